"""Score a policy on held-out prompts: generate with the evaluation sampling, verify, summarise.

Used by shared evaluation (the rollout engines, between updates) and by the background
evaluator (`runtime.entrypoints.evaluate`, its own engine). Generation and scoring are the rollout
`Collector`'s, so an evaluated sample is produced and scored exactly like a training one;
only the sampling differs. Seeds are salted with ``eval`` and do not depend on the update,
so successive evaluations of one run are comparable. Verifier failures are counted and
scored 0: an evaluation never stops a run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runtime.rewards.base import Verifier
from runtime.rollout.collect import Collector, CollectSettings, CollectStats, GroupGenerator
from runtime.rollout.types import Group


@dataclass(frozen=True)
class EvalSampling:
    """Sampling of one evaluation (``[evaluation]`` plus a task's ``generation`` overrides)."""

    temperature: float = 0.0
    samples_per_prompt: int = 1
    max_new_tokens: int = 256
    top_p: float = 1.0
    top_k: int = -1

    def params(self, stop_token_ids: Sequence[int] = ()) -> dict[str, Any]:
        out: dict[str, Any] = {
            "max_new_tokens": self.max_new_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
        }
        if stop_token_ids:
            out["stop_token_ids"] = [int(t) for t in stop_token_ids]
        return out

    def with_overrides(self, generation: Mapping[str, Any]) -> EvalSampling:
        """olmo-eval style overrides: temperature, top_p, top_k, max_gen_toks, repeats/n."""
        known = {"temperature", "top_p", "top_k", "max_gen_toks", "max_new_tokens", "n", "repeats"}
        unknown = sorted(set(generation) - known)
        if unknown:
            raise ValueError(
                f"unknown generation override(s) {', '.join(unknown)}; known: {sorted(known)}"
            )
        g = dict(generation)
        max_new = g.get("max_new_tokens", g.get("max_gen_toks", self.max_new_tokens))
        n = g.get("n", g.get("repeats", self.samples_per_prompt))
        out = EvalSampling(
            temperature=float(g.get("temperature", self.temperature)),
            samples_per_prompt=int(n),
            max_new_tokens=int(max_new),
            top_p=float(g.get("top_p", self.top_p)),
            top_k=int(g.get("top_k", self.top_k)),
        )
        if out.samples_per_prompt < 1 or out.max_new_tokens < 1 or out.temperature < 0:
            raise ValueError("generation overrides: n >= 1, max_gen_toks >= 1, temperature >= 0")
        return out


@dataclass
class EvalResult:
    """Flat metrics (``eval/<pool>/...``) and one row per evaluated sample."""

    metrics: dict[str, Any] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def summarise(groups: Sequence[Group], failures: Mapping[str, int], prefix: str) -> dict[str, Any]:
    """Score, best-of-n, length and truncation of one pool's groups."""
    samples = [s for g in groups for s in g.samples]
    best = [max((s.reward for s in g.samples), default=0.0) for g in groups]
    return {
        f"{prefix}/score": _mean([s.reward for s in samples]),
        f"{prefix}/best_of_n": _mean(best),
        f"{prefix}/prompts": len(groups),
        f"{prefix}/samples": len(samples),
        f"{prefix}/response_length/mean": _mean([float(len(s.response_ids)) for s in samples]),
        f"{prefix}/truncated/fraction": _mean(
            [1.0 if s.finish_reason == "length" else 0.0 for s in samples]
        ),
        f"{prefix}/verifier_failures": sum(failures.values()),
    }


def evaluate_pool(
    generate: GroupGenerator,
    render: Callable[[Any], list[int]],
    verifier_for: Callable[[str], Verifier],
    prompts: Sequence[Any],
    sampling: EvalSampling,
    *,
    run_seed: int,
    version: int,
    stop_token_ids: Sequence[int] = (),
    concurrency: int = 8,
    prefix: str = "eval",
) -> EvalResult:
    """Generate and score ``prompts`` (one pool); metrics are keyed ``<prefix>/...``."""
    collector = Collector(
        generate,
        render,
        verifier_for,
        CollectSettings(
            samples_per_prompt=sampling.samples_per_prompt,
            sampling_params=sampling.params(stop_token_ids),
            run_seed=run_seed,
            failure_policy="zero",
            concurrency=max(1, concurrency),
        ),
    )
    t0 = time.monotonic()
    try:
        groups = collector.generate_groups(list(prompts), version, salt="eval")
    finally:
        collector.close()
    t1 = time.monotonic()
    stats = CollectStats()
    collector.score(groups, stats)
    t2 = time.monotonic()
    out = EvalResult(summarise(groups, stats.failures.counts, prefix))
    out.metrics[f"{prefix}/generate_s"] = t1 - t0
    out.metrics[f"{prefix}/score_s"] = t2 - t1
    out.rows = [
        {
            "prompt_id": s.prompt_id,
            "index": s.index,
            "reward": s.reward,
            "reward_ok": s.reward_ok,
            "failure": s.reward_failure,
            "finish_reason": s.finish_reason,
            "response_tokens": len(s.response_ids),
            "text": s.text,
        }
        for g in groups
        for s in g.samples
    ]
    return out


def macro_score(metrics: Mapping[str, Any], names: Sequence[str], prefix: str = "eval") -> float:
    """Unweighted mean of the pools' scores (each task counts once)."""
    return _mean([float(metrics[f"{prefix}/{n}/score"]) for n in names])
