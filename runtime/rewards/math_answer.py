"""The ``math`` verifier: final-answer equivalence for MATH-style problems.

Pipeline: extract the response's final answer (`math_normalize.extract_answer`), normalise
both sides, split compound answers into parts, and compare parts by (1) canonical string,
(2) exact rational value, (3) text, (4) sympy in a worker process with a deadline. A
comparison sympy cannot decide in time counts as "not equivalent" (score 0, ``ok`` stays
True: a pathological answer is the model's fault, not the verifier's) and is flagged in
``detail["undecided"]``.

Settings (``[rewards.math]``): ``equivalence`` = "sympy" (default) | "string" (normalised
strings and exact numbers only, no sympy), ``timeout_s`` (5), ``rel_tol`` (1e-8),
``use_worker`` (true; false runs sympy in process without a deadline: tests, benchmarks).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from contract.spec.rewards import MathReward
from runtime.rewards.base import RewardResult, Verifier, register
from runtime.rewards.math_normalize import (
    Structure,
    exact_number,
    extract_answer,
    gold_answer,
    mixed_to_sum,
    normalize,
    parse_structure,
)

SympyEq = Callable[[str, str], "bool | None"]

_TEXTY = re.compile(r"[A-Za-z][A-Za-z ]*")
_CHOICE = re.compile(r"\(?([A-Ea-e])\)?")


class Comparer:
    """Structural comparison of normalised answers with a pluggable sympy equality."""

    def __init__(self, sympy_eq: SympyEq) -> None:
        self._sympy_eq = sympy_eq
        self.undecided = 0

    def atoms(self, a: str, b: str) -> bool:
        if a == b:
            return True
        if not a or not b:
            return False
        ca, cb = _CHOICE.fullmatch(a), _CHOICE.fullmatch(b)
        if ca and cb:
            return ca.group(1).upper() == cb.group(1).upper()
        if _TEXTY.fullmatch(a) and _TEXTY.fullmatch(b) and (len(a) > 1 or len(b) > 1):
            return a.replace(" ", "").lower() == b.replace(" ", "").lower()
        na, nb = exact_number(a), exact_number(b)
        if na is not None and nb is not None:
            return na == nb
        if "_" in a or "_" in b:  # base-n numbers like 52_8 compare as written
            return False
        if a.count("=") == 1 and b.count("=") == 1:
            la, ra = a.split("=")
            lb, rb = b.split("=")
            if self.atoms(la, lb) and self.atoms(ra, rb):
                return True
            return self._sym(f"{la}-({ra})", f"{lb}-({rb})") or self._sym(
                f"{la}-({ra})", f"{rb}-({lb})"
            )
        if "=" in a or "=" in b:
            return False
        return self._sym(mixed_to_sum(a), mixed_to_sum(b))

    def _sym(self, a: str, b: str) -> bool:
        res = self._sympy_eq(a, b)
        if res is None:
            self.undecided += 1
            return False
        return res

    def structures(self, sa: Structure, sb: Structure) -> bool:
        # a one-element bag is just its element
        if sa.kind == "bag" and len(sa.items) == 1:
            sa = sa.items[0]
        if sb.kind == "bag" and len(sb.items) == 1:
            sb = sb.items[0]
        if sa.kind == "atom" and sb.kind == "atom":
            return self.atoms(sa.text, sb.text)
        if sa.kind != sb.kind or len(sa.items) != len(sb.items):
            return False
        if sa.kind in ("seq", "matrix"):
            if sa.brackets != sb.brackets:
                return False
            return all(self.structures(x, y) for x, y in zip(sa.items, sb.items, strict=True))
        # bag: multiset matching (answers have few parts; greedy is exact enough here)
        left = list(sb.items)
        for x in sa.items:
            for k, y in enumerate(left):
                if self.structures(x, y):
                    del left[k]
                    break
            else:
                return False
        return True

    def equivalent(self, answer: str, gold: str) -> bool:
        na, ng = normalize(answer), normalize(gold)
        if na == ng:
            return True
        return self.structures(parse_structure(na), parse_structure(ng))


def in_process_sympy(rel_tol: float = 1e-8) -> SympyEq:
    """A sympy equality without a deadline (tests, benchmarks)."""
    from runtime.rewards.math_sympy import ConversionError, sympy_equal

    def eq(a: str, b: str) -> bool | None:
        try:
            return sympy_equal(a, b, rel_tol)
        except ConversionError:
            return None
        except Exception:
            return None

    return eq


def _no_sympy(a: str, b: str) -> bool | None:
    return False


@register("math")
class MathVerifier(Verifier):
    settings_type = MathReward

    def __init__(self, config: Mapping[str, Any] | MathReward | None = None) -> None:
        super().__init__(config)
        settings = self.settings_model
        assert isinstance(settings, MathReward)
        # not spec fields: the comparer's tolerance; in-process sympy (tests, benchmarks)
        self.rel_tol = float(self.config.get("rel_tol", 1e-8))
        self.timeout_s = settings.timeout_s
        self._worker: Any = None
        self._sympy_eq: SympyEq
        self.equivalence = settings.equivalence
        if self.equivalence == "string":
            self._sympy_eq = _no_sympy
        elif self.config.get("use_worker", True):
            from runtime.rewards.sympy_worker import SympyWorker

            self._worker = SympyWorker(self.timeout_s)
            self._sympy_eq = self._worker_eq
        else:
            self._sympy_eq = in_process_sympy(self.rel_tol)

    def _worker_eq(self, a: str, b: str) -> bool | None:
        result, _error = self._worker.equal(a, b, self.rel_tol)
        return result

    def equivalent(self, answer: str, gold: str) -> bool:
        return Comparer(self._sympy_eq).equivalent(answer, gold)

    def score(self, response: str, target: Any, metadata: Mapping[str, Any]) -> RewardResult:
        if target is None or str(target).strip() == "":
            return RewardResult(0.0, ok=False, failure="empty gold answer")
        gold = gold_answer(str(target))
        answer = extract_answer(response)
        if answer is None:
            return RewardResult(0.0, detail={"extracted": None})
        cmp = Comparer(self._sympy_eq)
        hit = cmp.equivalent(answer, gold)
        detail: dict[str, Any] = {"extracted": answer}
        if cmp.undecided:
            detail["undecided"] = cmp.undecided
        return RewardResult(1.0 if hit else 0.0, detail=detail)

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
