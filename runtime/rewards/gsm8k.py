"""GSM8K: extract the final number of a response and compare it exactly with the gold.

Extraction order (first that applies): ``#### N``; the last "answer is N" phrase; the last
``\\boxed{N}``; the last number anywhere. Gold answers are the text after ``####`` of the
reference solution (or already the bare number).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from runtime.rewards.base import RewardResult, Verifier, register
from runtime.rewards.numbers import NUMBER_RE, last_number, parse_number

_HASHES_RE = re.compile(r"####\s*\$?\s*([-−]?[\d,]*\.?\d+)")
_ANSWER_IS_RE = re.compile(
    r"answer\s*(?:is|:)\s*[:\s]*(?:\*\*)?\s*\$?\\?\$?\s*(?:\\boxed\{)?\s*([-−]?[\d,]*\.?\d+)",
    re.IGNORECASE,
)
_BOXED_RE = re.compile(r"\\boxed\{\s*\\?\$?\s*([-−]?[\d,]*\.?\d+)")


def gold_answer(answer: str) -> str:
    """The gold number of a GSM8K reference solution (``... #### 1,450`` -> ``1450``)."""
    return answer.split("####")[-1].strip().replace(",", "")


def extract_answer(response: str) -> Fraction | None:
    """The final numeric answer of a model response, or None."""
    for pattern in (_HASHES_RE, _ANSWER_IS_RE, _BOXED_RE):
        found = pattern.findall(response)
        if found:
            value = parse_number(found[-1])
            if value is not None:
                return value
    return last_number(response)


@register("gsm8k")
class GSM8KVerifier(Verifier):
    def score(self, response: str, target: Any, metadata: Mapping[str, Any]) -> RewardResult:
        text = str(target)
        gold = parse_number(gold_answer(text)) if "####" in text else parse_number(text)
        if gold is None:
            m = NUMBER_RE.findall(text)
            gold = parse_number(m[-1]) if m else None
        if gold is None:
            return RewardResult(0.0, ok=False, failure=f"unparseable gold {target!r}")
        got = extract_answer(response)
        hit = got is not None and got == gold
        return RewardResult(
            1.0 if hit else 0.0, detail={"extracted": None if got is None else str(got)}
        )
