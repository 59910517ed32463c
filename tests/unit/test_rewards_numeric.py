"""GSM8K and arithmetic/multiplication verifiers: number extraction and exact match."""

from __future__ import annotations

import pytest

from runtime.rewards.base import get_verifier
from runtime.rewards.gsm8k import extract_answer, gold_answer
from runtime.rewards.numbers import first_number, parse_number


@pytest.mark.parametrize(
    ("response", "value"),
    [
        ("so she has 5 + 3 = 8 apples.\n#### 8", "8"),
        ("#### 1,450,000", "1450000"),
        ("The answer is -12.", "-12"),
        ("The answer is: $1,234.50", "1234.5"),
        ("Total: \\boxed{42} dollars, i.e. 42 in 3 bags", "42"),
        ("first 3, then 4, finally 7", "7"),
        ("It costs $0.75 each", "0.75"),
        ("the answer is **18**", "18"),
        ("no numbers here", None),
    ],
)
def test_gsm8k_extraction(response: str, value: str | None) -> None:
    got = extract_answer(response)
    assert (None if got is None else got) == (None if value is None else parse_number(value))


def test_gsm8k_gold_answer_strips_rationale_and_commas() -> None:
    assert gold_answer("step <<2*3=6>>6\n#### 1,234") == "1234"


def test_gsm8k_scores() -> None:
    v = get_verifier("gsm8k")
    assert v.score("The answer is 72.", "72", {}).score == 1.0
    assert v.score("The answer is 72.0", "72", {}).score == 1.0
    assert v.score("The answer is 73.", "72", {}).score == 0.0
    assert v.score("so 48/2 = 24 clips\n#### 72", "Natalia ... #### 72", {}).score == 1.0
    bad = v.score("72", "no gold", {})
    assert not bad.ok and "gold" in (bad.failure or "")


def test_first_number() -> None:
    assert first_number(" 7 because 3+4") == 7
    assert first_number("-3 and 5") == -3
    assert first_number("x") is None


def test_arithmetic_wants_the_answer_then_stop() -> None:
    v = get_verifier("arithmetic")
    stop, cut = {"finish_reason": "stop"}, {"finish_reason": "length"}
    assert v.score("7", "7", stop).score == 1.0
    assert v.score(" 7\n", "7", stop).score == 1.0
    assert v.score("7", "7", {}).score == 1.0  # no finish reason: the text decides
    # begins with the answer but goes on, or is cut: partial credit, whatever follows
    assert v.score("7 = 3+4", "7", stop).score == 0.25
    assert v.score("7\n", "7", cut).score == 0.25
    assert v.score("73", "7", cut).score == 0.25
    assert v.score("7", "7", cut).score == 0.25
    # anything else earns nothing, however tidy
    assert v.score("8", "7", stop).score == 0.0
    assert v.score("8 no wait 7", "7", stop).score == 0.0
    assert v.score("17", "7", stop).score == 0.0
    assert v.score("", "7", stop).score == 0.0
    assert not v.score("7", "x", stop).ok
    m = get_verifier("multiplication")
    assert m.score("3366", "3366", {}).score == 1.0
    assert m.score("3,366", "3366", {}).score == 1.0
    assert m.score("3367", "3366", {}).score == 0.0
    assert not m.score("1", "abc", {}).ok
