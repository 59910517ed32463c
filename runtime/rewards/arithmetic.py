"""Arithmetic and multiplication: the answer at the start of the response.

These tasks train tiny models to emit the answer right away ("3+4=" -> "7"). Multiplication
scores the first number of the response. Arithmetic also asks the model to stop:

- 1.0: the answer alone, ended by the stop token;
- 0.25: the response begins with the answer's digits but goes on, or is cut at the length
  limit (text only: "73" begins with "7");
- 0.0: anything else.

Why this shape (measured on the quickstart): the partial credit lets a random-init model
learn the answer before it has learned to stop, and since everything after the answer earns
the same 0.25, the stop token is the only way up. Crediting only a first *number* (so "7\n"
scored and "73" did not) made the model settle on a newline after the answer, never stopping;
a credit for a tidy wrong answer drove it to one fixed answer for every prompt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runtime.rewards.base import RewardResult, Verifier, register
from runtime.rewards.numbers import first_number, numbers_in, parse_number


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
    """Single-digit addition/subtraction: full credit only for the answer, then stop.

    ``metadata["finish_reason"]`` (set by the collector) says how generation ended; without
    it the text alone decides.
    """

    def score(self, response: str, target: Any, metadata: Mapping[str, Any]) -> RewardResult:
        gold = parse_number(str(target))
        if gold is None:
            return RewardResult(0.0, ok=False, failure=f"unparseable target {target!r}")
        answer, text = str(gold), response.strip()
        stopped = metadata.get("finish_reason", "stop") == "stop"
        if text == answer and stopped:
            score = 1.0
        elif text.startswith(answer):
            score = 0.25
        else:
            score = 0.0
        return RewardResult(score, detail={"answer": answer})


@register("multiplication")
class MultiplicationVerifier(_FirstNumberVerifier):
    """n-digit x m-digit multiplication."""


@register("addition")
class AdditionVerifier(Verifier):
    """Multi-digit addition, where a tool may do the sum: the whole trajectory is scored.

    The answer is the trajectory's last number (a tool result counts: "the calculator says
    82" is an answer when the policy stops after it). 1.0 for the sum as the last number of
    a trajectory that ended with the stop token; 0.25 when the sum appears but something
    else follows it or the episode did not stop (the same shaping as `ArithmeticVerifier`:
    the partial credit is found first, stopping after it is the only way up); 0 otherwise.
    """

    def score(self, response: str, target: Any, metadata: Mapping[str, Any]) -> RewardResult:
        gold = parse_number(str(target))
        if gold is None:
            return RewardResult(0.0, ok=False, failure=f"unparseable target {target!r}")
        found = [parse_number(n) for n in numbers_in(response)]
        stopped = metadata.get("finish_reason", "stop") == "stop"
        if found and found[-1] == gold and stopped:
            score = 1.0
        elif gold in found:
            score = 0.25
        else:
            score = 0.0
        return RewardResult(score, detail={"answer": str(gold)})
