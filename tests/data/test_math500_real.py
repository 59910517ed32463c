"""The math verifier on all 500 MATH-500 gold answers (real data).

Every gold answer must be equivalent to itself (as a boxed response) and to at least one
rewritten form (fraction <-> decimal, \\dfrac, spacing, reordered sums, explicit products,
\\left/\\right, expanded \\pm, ...); every rewritten form we construct must be accepted;
gold + 1 (numbers) and another problem's answer must be rejected.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal, localcontext
from pathlib import Path

import pytest

from runtime.rewards.base import get_verifier
from runtime.rewards.math_answer import Comparer, in_process_sympy
from runtime.rewards.math_normalize import exact_number, extract_answer, normalize

DATA = (
    Path(__file__).resolve().parents[2] / "runtime" / "data" / "datasets" / "math500" / "test.jsonl"
)
pytestmark = pytest.mark.skipif(not DATA.exists(), reason=f"MATH-500 not found at {DATA}")


@pytest.fixture(scope="module")
def answers() -> list[str]:
    return [json.loads(line)["answer"] for line in DATA.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def cmp() -> Comparer:
    return Comparer(in_process_sympy())


def _boxed(ans: str) -> str:
    return f"Putting it together, the final answer is $\\boxed{{{ans}}}$."


def rewrites(g: str) -> dict[str, str]:
    """Equivalent spellings of a gold answer, by kind."""
    out: dict[str, str] = {
        "dfrac": g.replace("\\frac", "\\dfrac"),
        "spaces": re.sub(r"([+\-=,])", r" \1 ", g),
    }
    v = exact_number(normalize(g))
    if v is not None:
        if v.denominator == 1:
            out["decimal"] = f"{v.numerator}.0"
            if abs(v.numerator) >= 1000:
                out["commas"] = f"{v.numerator:,}"
        else:
            out["slash"] = f"{v.numerator}/{v.denominator}"
            d = v.denominator
            for p in (2, 5):
                while d % p == 0:
                    d //= p
            if d == 1:
                with localcontext() as ctx:
                    ctx.prec = 50
                    out["decimal"] = str(Decimal(v.numerator) / Decimal(v.denominator))
    if re.search(r"\d\s*\\(sqrt|pi)", g):
        out["cdot"] = re.sub(r"(\d)\s*(\\(sqrt|pi))", r"\1 \\cdot \2", g)
    if re.search(r"\\sqrt\{\d\}", g):
        out["sqrt_nobrace"] = re.sub(r"\\sqrt\{(\d)\}", r"\\sqrt \1", g)
    if re.search(r"\\sqrt\{\d\d+\}", g):
        out["sqrt_power"] = re.sub(r"\\sqrt\{(\d+)\}", r"(\1)^{1/2}", g)
    if re.fullmatch(r"\d[a-zA-Z](\^\d)?", g):
        out["explicit_times"] = g[0] + "\\cdot " + g[1] + ("^{" + g[3] + "}" if len(g) > 2 else "")
    if g.startswith("\\cot"):
        out["func_parens"] = "\\cot(x)"
    if re.fullmatch(r"\d+_\d", g):
        out["base_braces"] = re.sub(r"_(\d+)", r"_{\1}", g)
    if re.fullmatch(r"\d+_\{\d\}", g):
        out["base_nobraces"] = g.replace("{", "").replace("}", "")
    if g.startswith("\\text{"):
        out["plain_text"] = g[6:-1]
    if g == "\\pi":
        out["pi_spaces"] = "  \\pi "
    if "\\pm" in g and not g.startswith("\\{"):
        a, b = g.split("\\pm")
        out["pm_expanded"] = f"{a}+{b}, {a}-{b}"
    if "pmatrix" in g:
        out["matrix_frac"] = re.sub(r"(\d+)/(\d+)", r"\\frac{\1}{\2}", g)
    parts = re.split(r"(?<=[^\s(,\[{^_])\s*\+\s*", g)
    if (
        "=" not in g
        and len(parts) == 2
        and all(p.count("{") == p.count("}") and p.count("(") == p.count(")") for p in parts)
    ):
        out["reorder"] = parts[1] + "+" + parts[0]
    if g.startswith("("):
        out["left_right"] = g.replace("(", "\\left(").replace(")", "\\right)")
    return {k: v for k, v in out.items() if v != g}


def test_every_gold_is_equivalent_to_itself(answers: list[str], cmp: Comparer) -> None:
    bad = [g for g in answers if not cmp.equivalent(extract_answer(_boxed(g)) or "", g)]
    assert bad == [] and len(answers) == 500


def test_every_gold_is_equivalent_to_its_rewrites(answers: list[str], cmp: Comparer) -> None:
    per_kind: dict[str, list[int]] = {}
    without = []
    rejected = []
    for g in answers:
        forms = rewrites(g)
        accepted = 0
        for kind, form in forms.items():
            ok = cmp.equivalent(extract_answer(_boxed(form)) or "", g)
            per_kind.setdefault(kind, [0, 0])
            per_kind[kind][1] += 1
            per_kind[kind][0] += ok
            accepted += ok
            if not ok:
                rejected.append((g, kind, form))
        if not accepted:
            without.append(g)
    print("rewrites accepted per kind:", per_kind)
    assert rejected == []
    assert without == []


def test_different_answers_are_not_equivalent(answers: list[str], cmp: Comparer) -> None:
    wrong_plus_one = []
    numeric = 0
    for g in answers:
        v = exact_number(normalize(g))
        if v is None:
            continue
        numeric += 1
        w = v + 1
        s = (
            str(w.numerator)
            if w.denominator == 1
            else f"\\frac{{{w.numerator}}}{{{w.denominator}}}"
        )
        if cmp.equivalent(s, g):
            wrong_plus_one.append(g)
    assert numeric > 350 and wrong_plus_one == []
    confused = []
    for i, g in enumerate(answers):
        j = (i + 1) % len(answers)
        while normalize(answers[j]) == normalize(g):
            j = (j + 1) % len(answers)
        if cmp.equivalent(answers[j], g):
            confused.append((g, answers[j]))
    assert confused == []


def test_through_the_registered_verifier_with_its_worker(answers: list[str]) -> None:
    v = get_verifier("math", {"timeout_s": 10.0})
    try:
        sample = answers[::10]
        scores = [v.score(_boxed(g.replace("\\frac", "\\dfrac")), g, {}).score for g in sample]
        assert scores == [1.0] * len(sample)
        assert v.score(_boxed("\\text{nonsense}"), answers[0], {}).score == 0.0
    finally:
        v.close()
