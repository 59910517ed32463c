"""The prompt sampler: deterministic order, weights, and exact resume."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from runtime.data.records import Prompt
from runtime.data.sampler import PromptSampler, SamplerStateError


def _pool(name: str, n: int, weight: float = 1.0) -> list[Prompt]:
    return [
        Prompt(
            f"{name}:{i}",
            name,
            [{"role": "user", "content": str(i)}],
            str(i),
            "arithmetic",
            {"pool": name, "weight": weight},
        )
        for i in range(n)
    ]


def test_each_epoch_is_a_permutation_and_epochs_differ() -> None:
    s = PromptSampler(_pool("a", 10), seed=3)
    e0 = [p.id for p in s.next_batch(10)]
    e1 = [p.id for p in s.next_batch(10)]
    assert sorted(e0) == sorted(e1) == sorted(f"a:{i}" for i in range(10))
    assert e0 != e1
    assert s.cursor() == (2, 0)
    assert [p.id for p in PromptSampler(_pool("a", 10), seed=3).next_batch(10)] == e0
    assert [p.id for p in PromptSampler(_pool("a", 10), seed=4).next_batch(10)] != e0
    assert [p.id for p in PromptSampler(_pool("a", 10), seed=3, shuffle=False).next_batch(3)] == [
        "a:0",
        "a:1",
        "a:2",
    ]


@pytest.mark.parametrize("cut", [0, 1, 7, 10, 23])
def test_resume_neither_loses_nor_repeats(cut: int) -> None:
    prompts = _pool("a", 10) + _pool("b", 4, weight=2.0)
    ref = [p.id for p in PromptSampler(prompts, seed=9).next_batch(40)]
    s = PromptSampler(prompts, seed=9)
    first = [p.id for p in s.next_batch(cut)]
    state = json.loads(json.dumps(s.state()))  # survives a checkpoint round trip
    resumed = PromptSampler(prompts, seed=9)
    resumed.restore(state)
    assert first + [p.id for p in resumed.next_batch(40 - cut)] == ref
    assert resumed.drawn == 40


def test_weights_set_the_mix() -> None:
    s = PromptSampler(_pool("a", 50) + _pool("b", 50, weight=3.0), seed=1)
    counts = Counter(p.task for p in s.next_batch(400))
    assert counts == {"a": 100, "b": 300}


def test_restore_refuses_foreign_state() -> None:
    s = PromptSampler(_pool("a", 5), seed=1)
    state = s.state()
    with pytest.raises(SamplerStateError, match="seed"):
        PromptSampler(_pool("a", 5), seed=2).restore(state)
    with pytest.raises(SamplerStateError, match="pool_digest"):
        PromptSampler(_pool("a", 6), seed=1).restore(state)
    bad = dict(state, pools={"a": {"epoch": 0, "index": 99}})
    with pytest.raises(SamplerStateError, match="out of range"):
        PromptSampler(_pool("a", 5), seed=1).restore(bad)
    with pytest.raises(ValueError):
        PromptSampler([], seed=1)
