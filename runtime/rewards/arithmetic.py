"""Arithmetic and multiplication: exact match of the FIRST number in the response.

These tasks train tiny models to emit the answer right away ("3+4=" -> "7"), so the first
number is the answer; anything after it is ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runtime.rewards.base import RewardResult, Verifier, register
from runtime.rewards.numbers import first_number, parse_number


class _FirstNumberVerifier(Verifier):
    def score(self, response: str, target: Any, metadata: Mapping[str, Any]) -> RewardResult:
        gold = parse_number(str(target))
        if gold is None:
            return RewardResult(0.0, ok=False, failure=f"unparseable target {target!r}")
        got = first_number(response)
        hit = got is not None and got == gold
        return RewardResult(
            1.0 if hit else 0.0, detail={"extracted": None if got is None else str(got)}
        )


@register("arithmetic")
class ArithmeticVerifier(_FirstNumberVerifier):
    """Single-digit addition/subtraction."""


@register("multiplication")
class MultiplicationVerifier(_FirstNumberVerifier):
    """n-digit x m-digit multiplication."""
