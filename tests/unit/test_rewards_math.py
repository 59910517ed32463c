"""Math answer extraction, normalisation and equivalence (sympy), and the deadline."""

from __future__ import annotations

import time

import pytest

from runtime.rewards.base import get_verifier
from runtime.rewards.math_answer import Comparer, in_process_sympy
from runtime.rewards.math_normalize import boxed_contents, extract_answer, normalize
from runtime.rewards.math_sympy import ConversionError, to_python
from runtime.rewards.sympy_worker import SympyWorker


@pytest.fixture(scope="module")
def cmp() -> Comparer:
    return Comparer(in_process_sympy())


@pytest.mark.parametrize(
    ("response", "answer"),
    [
        ("so $\\boxed{\\frac{1}{\\sqrt{2}}}$ done", "\\frac{1}{\\sqrt{2}}"),
        ("first \\boxed{1} then \\boxed{2}.", "2"),
        ("\\fbox{x^{2}}", "x^{2}"),
        ("thus \\boxed 5$.", "5"),
        ("The final answer is $\\frac{3}{4}$. I hope it is correct.", "\\frac{3}{4}"),
        ("Work...\nAnswer: 12", "12"),
        ("lots of work\n\n$x = 7$.", "x = 7"),
        ("", None),
    ],
)
def test_extract_answer(response: str, answer: str | None) -> None:
    assert extract_answer(response) == answer


def test_boxed_handles_nested_and_escaped_braces() -> None:
    assert boxed_contents("\\boxed{\\{1,2\\}} and \\boxed{a{b{c}}d}") == ["\\{1,2\\}", "a{b{c}}d"]
    assert boxed_contents("\\boxed{unclosed") == []


@pytest.mark.parametrize(
    ("raw", "norm"),
    [
        ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})"),
        ("\\dfrac{17}{50}", "\\frac{17}{50}"),
        ("\\frac 59", "\\frac{5}{9}"),
        ("\\frac9{19}", "\\frac{9}{19}"),
        ("\\frac{270}7\\text{ degrees}", "\\frac{270}{7}"),
        ("90^\\circ", "90"),
        ("10,\\!080", "10080"),
        ("\\$32,\\!348", "32348"),
        ("864 \\mbox{ inches}^2", "864"),
        ("5.4 \\text{ cents}", "5.4"),
        ("50\\%", "50"),
        ("x=5", "5"),
        ("x \\in [-2,7]", "[-2,7]"),
        (".0000672", "0.0000672"),
        ("2.50", "2.5"),
        ("11\\sqrt2", "11\\sqrt{2}"),
        ("\\text{Evelyn}", "Evelyn"),
        ("4210_{5}", "4210_5"),
        ("3 \\pi r", "3\\pi r"),
    ],
)
def test_normalize(raw: str, norm: str) -> None:
    assert normalize(raw) == norm


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("0.5", "\\frac{1}{2}"),
        ("\\frac{3}{20}", "0.15"),
        ("1\\frac{4}{5}", "\\frac{9}{5}"),
        ("137 \\frac{1}{2}", "137.5"),
        ("2\\sqrt{3}+1", "1+2\\sqrt{3}"),
        ("\\sqrt{12}", "2\\sqrt{3}"),
        ("\\frac{\\sqrt{3}}{3}", "\\frac{1}{\\sqrt{3}}"),
        ("6 - 5i", "-5i+6"),
        ("x^2-1", "(x-1)(x+1)"),
        ("\\pi", "3.14159265358979323846"),
        ("(3, \\frac{\\pi}{2})", "\\left(3,\\dfrac{\\pi}{2}\\right)"),
        ("3, 5, 7", "7,5,3"),
        ("\\{1\\pm\\sqrt{5},-2\\}", "-2, 1+\\sqrt{5}, 1-\\sqrt{5}"),
        ("1 \\pm \\sqrt{19}", "1-\\sqrt{19}, 1+\\sqrt{19}"),
        ("(0,9) \\cup (9,36)", "(9,36)\\cup(0,9)"),
        ("(-\\infty, 0]", "(-\\infty,0]"),
        ("y = 2x + 3", "y=3+2x"),
        ("\\text{(C)}", "C"),
        ("\\text{Navin}", "navin"),
        (
            "\\begin{pmatrix} -1/3 \\\\ 2/3 \\end{pmatrix}",
            "\\begin{pmatrix}-\\frac{1}{3}\\\\\\frac{2}{3}\\end{pmatrix}",
        ),
        ("\\cot x", "\\cot(x)"),
        ("1,234", "1234"),
        ("30^\\circ", "30"),
    ],
)
def test_equivalent(cmp: Comparer, a: str, b: str) -> None:
    assert cmp.equivalent(a, b)
    assert cmp.equivalent(b, a)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("0.33", "\\frac{1}{3}"),
        ("(3,4]", "(3,4)"),
        ("(1,2)", "(2,1)"),
        ("52_8", "42"),
        ("2\\sqrt{3}", "3\\sqrt{2}"),
        ("x^2+1", "x^2-1"),
        ("\\text{even}", "\\text{odd}"),
        ("3, 5", "3, 5, 7"),
        ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix} 2 \\\\ 1 \\end{pmatrix}"),
        ("x=5", "y=5x"),
        ("\\sqrt 51", "\\sqrt{51}"),  # LaTeX reads \sqrt 51 as sqrt(5)*1
        ("", "1"),
    ],
)
def test_not_equivalent(cmp: Comparer, a: str, b: str) -> None:
    assert not cmp.equivalent(a, b)


def test_to_python_explicit_products_and_functions() -> None:
    assert to_python("2k+2") == "2*Symbol('k')+2"
    assert to_python("3\\sqrt{13}") == "3*sqrt(13)"
    assert to_python("6+9i") == "6+9*I"
    assert to_python("\\sin 2x") == "sin(2*Symbol('x'))"
    with pytest.raises(ConversionError):
        to_python("\\unknowncommand{3}")


def test_verifier_in_process_and_string_mode() -> None:
    v = get_verifier("math", {"use_worker": False})
    assert v.score("so \\boxed{\\dfrac{1}{2}}", "0.5", {}).score == 1.0
    assert v.score("so \\boxed{0.6}", "0.5", {}).score == 0.0
    # a full reference solution as the target: its last boxed answer is the gold
    assert v.score("\\boxed{4}", "thus $\\boxed{4}$.", {}).score == 1.0
    assert not v.score("\\boxed{4}", "", {}).ok
    s = get_verifier("math", {"equivalence": "string"})
    assert s.score("\\boxed{\\dfrac{1}{2}}", "0.5", {}).score == 1.0  # exact rationals
    assert s.score("\\boxed{2\\sqrt{3}+1}", "1+2\\sqrt{3}", {}).score == 0.0  # needs sympy
    with pytest.raises(ValueError):
        get_verifier("math", {"equivalence": "fuzzy"})


def test_worker_deadline_kills_and_recovers() -> None:
    w = SympyWorker(timeout_s=1.0)
    try:
        assert w.equal("2\\sqrt{3}+1", "1+2\\sqrt{3}") == (True, None)
        t = time.monotonic()
        result, err = w._request({"ping": True, "sleep_s": 30}, 1.0)
        assert result is None and "timed out" in (err or "")
        assert time.monotonic() - t < 5
        # a pathological input is bounded too (deadline or memory cap), never a hang
        t = time.monotonic()
        result, _ = w.equal("10^{10^{10^{10}}}", "1")
        assert result in (None, False) and time.monotonic() - t < 15
        assert w.equal("x^2-1", "(x-1)(x+1)")[0] is True  # a fresh worker took over
        assert w.timeouts >= 1
    finally:
        w.close()


def test_verifier_with_worker_scores_and_reports_undecided() -> None:
    v = get_verifier("math", {"timeout_s": 1.0})
    try:
        assert v.score("\\boxed{\\frac{\\sqrt{3}}{3}}", "\\frac{1}{\\sqrt{3}}", {}).score == 1.0
        r = v.score("\\boxed{10^{10^{10^{10}}}}", "1", {})
        assert r.ok and r.score == 0.0
    finally:
        v.close()
