"""The tool-use task: builtin:tiny-tools' tokenizer, the addition task and its wrapper, and
the addition verifier that scores a whole multi-turn trajectory."""

from __future__ import annotations

import pytest

from runtime.data.tasks import DataError, load_task
from runtime.models.tokenizer import TOOL_TAGS, build_tools_tokenizer, builtin_tokenizer
from runtime.rewards.base import get_verifier


def test_tool_tags_are_single_visible_tokens() -> None:
    tok = build_tools_tokenizer()
    assert tok.vocab_size == 22
    assert builtin_tokenizer("builtin:tiny-tools").vocab_size == 22
    for tag in TOOL_TAGS:
        (one,) = tok.encode(tag)
        assert tok.decode([one]) == tag  # not a special token: it cannot vanish from text
    text = "<calculator>37+45</calculator><output>82</output>"
    assert len(tok.encode(text)) == 11 and tok.decode(tok.encode(text)) == text
    assert tok.decode(tok.encode("82") + [tok.eos_token_id]) == "82"


def test_addition_prompts_open_a_calculator_call() -> None:
    data = load_task(
        {"task": "addition", "prompt_wrapper": "calculator_call", "train_count": 5}, seed=3
    )
    assert len(data.train) == 5 and data.eval == []
    for p in data.train:
        a, b = p.text.removeprefix("<calculator>").split("+")
        assert p.text.startswith("<calculator>") and not p.text.endswith("=")
        assert len(a) == len(b) == 2 and p.target == str(int(a) + int(b))
        assert p.verifier == "addition" and p.metadata["raw"]
    plain = load_task({"task": "addition", "digits": [3, 1], "train_count": 2}, seed=3)
    a, b = plain.train[0].text.removesuffix("=").split("+")
    assert (len(a), len(b)) == (3, 1)
    again = load_task({"task": "addition", "digits": [3, 1], "train_count": 2}, seed=3)
    assert [p.text for p in again.train] == [p.text for p in plain.train]  # seeded
    with pytest.raises(DataError, match="digits"):
        load_task({"task": "addition", "digits": [0, 2]}, seed=3)


@pytest.mark.parametrize(
    ("trajectory", "finish", "score"),
    [
        ("</calculator><output>82</output>", "stop", 1.0),  # the tool's result is the answer
        ("</calculator><output>82</output>82", "stop", 1.0),
        ("=82", "stop", 1.0),  # answered without the tool
        ("</calculator><output>82</output>", "length", 0.25),  # did not stop
        ("</calculator><output>82</output>7", "stop", 0.25),  # something else follows
        ("</calculator><output>81</output>", "stop", 0.0),
        ("", "stop", 0.0),
    ],
)
def test_the_addition_verifier_scores_the_whole_trajectory(
    trajectory: str, finish: str, score: float
) -> None:
    verifier = get_verifier("addition", {})
    result = verifier.score(trajectory, "82", {"finish_reason": finish})
    assert result.ok and result.score == score
