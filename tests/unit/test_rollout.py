"""Rollout building blocks: advantages, zero-std filtering/refill, the async buffer, seeds."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from runtime.rewards.base import RewardResult, Verifier
from runtime.rollout.advantages import group_stats, relative_advantages, split_zero_std
from runtime.rollout.buffer import BufferClosed, GroupBuffer, tis_weights
from runtime.rollout.collect import (
    Collector,
    CollectSettings,
    parse_response,
    reward_summary,
    sample_seed,
)
from runtime.rollout.types import Group, Sample


@dataclass
class P:
    id: str
    target: str
    verifier: str = "exact"
    metadata: dict[str, Any] = field(default_factory=dict)


class Exact(Verifier):
    def score(self, response: str, target: Any, metadata: Any) -> RewardResult:
        if target == "boom":
            return RewardResult(0.0, ok=False, failure="cannot judge")
        return RewardResult(1.0 if response.strip() == target else 0.0)


def _resp(token: int, text: str, lp: float = -0.5) -> dict[str, Any]:
    return {
        "text": text,
        "output_ids": [token],
        "meta_info": {
            "output_token_logprobs": [[lp, token, None]],
            "finish_reason": {"type": "stop"},
        },
    }


def _group(rewards: list[float], version: int = 0, pid: str = "p") -> Group:
    g = Group(prompt=P(pid, "x"), policy_version=version)
    for i, r in enumerate(rewards):
        g.samples.append(Sample(pid, i, [1], [2], [-0.1], reward=r, policy_version=version))
    return g


def test_relative_advantages_center_and_normalise() -> None:
    adv = relative_advantages([1.0, 0.0, 0.0, 1.0])
    assert adv == [0.5, -0.5, -0.5, 0.5]
    norm = relative_advantages([1.0, 0.0, 0.0, 1.0], normalize_std=True)
    assert norm[0] == pytest.approx(1.0, rel=1e-4) and norm[1] == pytest.approx(-1.0, rel=1e-4)
    assert relative_advantages([0.3, 0.3]) == [0.0, 0.0]
    assert group_stats([]) == (0.0, 0.0)


def test_split_zero_std_keeps_order() -> None:
    a, b, c = _group([1, 1], pid="a"), _group([0, 1], pid="b"), _group([0, 0], pid="c")
    keep, drop = split_zero_std([a, b, c])
    assert [g.prompt_id for g in keep] == ["b"]
    assert [g.prompt_id for g in drop] == ["a", "c"]


def test_parse_response_and_mismatched_logprobs() -> None:
    ids, lps, text, finish, _ = parse_response(_resp(7, "7", -0.25))
    assert (ids, lps, text, finish) == ([7], [-0.25], "7", "stop")
    bad = {"output_ids": [1, 2], "meta_info": {"output_token_logprobs": [[-1.0, 1, None]]}}
    with pytest.raises(ValueError, match="return_logprob"):
        parse_response(bad)
    # ids can come from the logprob triples alone
    ids, *_ = parse_response(
        {"text": "", "meta_info": {"output_token_logprobs": [[-1.0, 5, None]]}}
    )
    assert ids == [5]


def test_sample_seed_stable_and_distinct() -> None:
    assert sample_seed(1, "p", 0) == sample_seed(1, "p", 0)
    seeds = {sample_seed(1, "p", i) for i in range(64)}
    assert len(seeds) == 64
    assert sample_seed(2, "p", 0) != sample_seed(1, "p", 0)


class ScriptedEngine:
    """Answers from a table: prompt token -> list of texts (cycled per sample)."""

    def __init__(self, answers: dict[int, list[str]]) -> None:
        self.answers = answers
        self.calls: list[tuple[list[int], list[int]]] = []
        self.lock = threading.Lock()

    def __call__(
        self, input_ids: list[int], sampling: dict[str, Any], seeds: list[int]
    ) -> list[dict[str, Any]]:
        with self.lock:
            self.calls.append((list(input_ids), list(seeds)))
        texts = self.answers[input_ids[0]]
        return [_resp(10 + i, texts[i % len(texts)]) for i in range(len(seeds))]


def _collector(engine: ScriptedEngine, prompts: list[P], **kw: Any) -> tuple[Collector, list[P]]:
    tokens = {p.id: i for i, p in enumerate(prompts)}
    settings = CollectSettings(
        samples_per_prompt=4, sampling_params={"max_new_tokens": 1}, run_seed=3, **kw
    )
    return Collector(engine, lambda p: [tokens[p.id]], lambda name: Exact(), settings), list(
        prompts
    )


def test_collect_scores_and_assigns_advantages() -> None:
    prompts = [P("a", "1"), P("b", "2")]
    engine = ScriptedEngine({0: ["1", "0"], 1: ["2"]})
    col, pool = _collector(engine, prompts)
    groups, stats = col.collect(lambda n: [pool.pop(0) for _ in range(n)], 2, version=5)
    assert [g.prompt_id for g in groups] == ["a", "b"]
    assert groups[0].rewards == [1.0, 0.0, 1.0, 0.0]
    assert [s.advantage for s in groups[0].samples] == [0.5, -0.5, 0.5, -0.5]
    assert all(s.policy_version == 5 for g in groups for s in g.samples)
    assert stats.prompt_ids == ["a", "b"]
    # every sample of a group carries its own seed
    assert all(len(set(seeds)) == 4 for _, seeds in engine.calls)
    assert reward_summary(groups)["reward/mean"] == pytest.approx(0.75)


def test_zero_std_filter_refills_with_fresh_prompts() -> None:
    prompts = [P("a", "1"), P("b", "2"), P("c", "3"), P("d", "4"), P("e", "5")]
    # a, b: all correct (std 0); c: mixed; d: mixed; e never drawn
    engine = ScriptedEngine({0: ["1"], 1: ["2"], 2: ["3", "x"], 3: ["4", "x"], 4: ["5", "x"]})
    col, pool = _collector(engine, prompts, filter_zero_std=True, max_refill_rounds=3)
    drawn: list[str] = []

    def draw(n: int) -> list[P]:
        out = [pool.pop(0) for _ in range(min(n, len(pool)))]
        drawn.extend(p.id for p in out)
        return out

    groups, stats = col.collect(draw, 2, version=0)
    assert [g.prompt_id for g in groups] == ["c", "d"]
    assert stats.groups_zero_std == 2 and stats.refill_rounds == 1
    assert drawn == ["a", "b", "c", "d"]  # refill drew exactly the shortfall, no repeats


def test_zero_std_filter_gives_up_after_max_rounds() -> None:
    prompts = [P(str(i), "1") for i in range(10)]
    engine = ScriptedEngine({i: ["1"] for i in range(10)})
    col, pool = _collector(engine, prompts, filter_zero_std=True, max_refill_rounds=1)
    groups, stats = col.collect(lambda n: [pool.pop(0) for _ in range(n)], 3, version=0)
    assert groups == [] and stats.groups_generated == 6


def test_verifier_failure_policy() -> None:
    prompts = [P("a", "boom")]
    engine = ScriptedEngine({0: ["1"]})
    col, pool = _collector(engine, prompts, failure_policy="zero")
    groups, stats = col.collect(lambda n: [pool.pop(0)], 1, version=0)
    assert all(not s.reward_ok and s.reward == 0.0 for s in groups[0].samples)
    assert stats.failures.counts == {"exact": 4}
    col, pool = _collector(engine, [P("a", "boom")], failure_policy="fail")
    with pytest.raises(RuntimeError, match="cannot judge"):
        col.collect(lambda n: [pool.pop(0)], 1, version=0)


def test_buffer_drops_stale_and_retries() -> None:
    buf = GroupBuffer(capacity=4, max_policy_lag=1)
    for v in (0, 1, 2):
        buf.put(_group([0, 1], version=v, pid=f"v{v}"))
    got = buf.take(1, current_version=2, timeout=1)
    assert [g.prompt_id for g in got] == ["v1"]  # v0 is 2 behind: dropped
    assert buf.stats.stale_dropped == 1

    retried: list[str] = []
    buf = GroupBuffer(
        capacity=4,
        max_policy_lag=0,
        handler="retry",
        on_retry=lambda g: retried.append(g.prompt_id),
    )
    buf.put(_group([0, 1], version=0, pid="old"))
    buf.put(_group([0, 1], version=3, pid="new"))
    assert [g.prompt_id for g in buf.take(1, current_version=3, timeout=1)] == ["new"]
    assert retried == ["old"] and buf.stats.stale_retried == 1


def test_buffer_bounds_the_producer_and_surfaces_errors() -> None:
    buf = GroupBuffer(capacity=1, max_policy_lag=5)
    buf.put(_group([0, 1]))
    with pytest.raises(TimeoutError):
        buf.put(_group([0, 1]), timeout=0.05)

    def fail_later() -> None:
        time.sleep(0.05)
        buf.close(RuntimeError("engine down"))

    buf.take(1, 0, timeout=1)
    threading.Thread(target=fail_later).start()
    with pytest.raises(BufferClosed, match="engine down"):
        buf.take(1, 0, timeout=5)
    with pytest.raises(ValueError):
        GroupBuffer(capacity=0, max_policy_lag=1)


def test_tis_weights_truncate() -> None:
    w = tis_weights([0.0, -1.0, -3.0], [-1.0, -1.0, 0.0], clip=2.0)
    assert w[0] == 2.0 and w[1] == pytest.approx(1.0) and w[2] == pytest.approx(0.0498, rel=1e-2)
