"""One collection: prompts -> groups of generated samples -> rewards -> advantages.

Generation goes through a `GroupGenerator` (the engine client's whole-group call, which
already retries a failed group); this module only turns SGLang-native `/generate`
responses into `Sample`s, scores them with the prompt's verifier, and filters/refills
zero-variance groups when configured. Per-sample sampling seeds are derived from
(run seed, prompt id, sample index, attempt) so a resumed run regenerates exactly what
the uninterrupted one would have.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from runtime.rewards.base import FailureCounter, ScoreItem, Verifier, apply_failure_policy
from runtime.rollout.advantages import assign_advantages, group_stats, split_zero_std
from runtime.rollout.shaping import Shaping
from runtime.rollout.types import Group, Sample


class GroupGenerator(Protocol):
    """Generate ``len(seeds)`` responses for one prompt; returns SGLang response dicts."""

    def __call__(
        self, input_ids: list[int], sampling_params: dict[str, Any], seeds: list[int]
    ) -> list[dict[str, Any]]: ...


class EpisodesLike(Protocol):
    """Runs a group's multi-turn episodes (`runtime.rollout.multiturn.EpisodeRunner`)."""

    def run_group(
        self,
        generate: GroupGenerator,
        prompt_ids: list[int],
        params: dict[str, Any],
        seeds: list[int],
        version: int,
    ) -> Sequence[Any]: ...


def sample_seed(run_seed: int, prompt_id: str, index: int, salt: str = "") -> int:
    """A stable 31-bit seed for one sample (independent of order and engine)."""
    h = hashlib.sha256(f"{run_seed}:{prompt_id}:{index}:{salt}".encode()).digest()
    return int.from_bytes(h[:4], "big") & 0x7FFFFFFF


def parse_response(resp: Mapping[str, Any]) -> tuple[list[int], list[float], str, str, Any]:
    """(output ids, output logprobs, text, finish type, routed experts) of one response."""
    meta = resp.get("meta_info") or {}
    lp = meta.get("output_token_logprobs") or []
    ids = resp.get("output_ids")
    if ids is None:
        ids = [int(item[1]) for item in lp]
    logprobs = [float(item[0]) for item in lp]
    if len(logprobs) != len(ids):
        raise ValueError(
            f"engine returned {len(ids)} output ids but {len(logprobs)} logprobs; "
            "was return_logprob set?"
        )
    fr = meta.get("finish_reason")
    finish = fr.get("type", "stop") if isinstance(fr, dict) else str(fr or "stop")
    return (
        list(map(int, ids)),
        logprobs,
        str(resp.get("text", "")),
        finish,
        meta.get("routed_experts"),
    )


def token_versions(resp: Mapping[str, Any], count: int, fallback: int) -> list[int]:
    """The weight version each of ``count`` output tokens was sampled under, from SGLang's
    ``meta_info.weight_versions`` spans (``{"version", "start", "end"}``).

    Tokens no span covers, and versions that are not the integers rlc publishes (an engine
    started with another label), get ``fallback``: the policy version when the group was
    requested.
    """
    out = [fallback] * count
    spans = (resp.get("meta_info") or {}).get("weight_versions") or []
    for span in spans:
        try:
            version = int(str(span["version"]))
            start, end = int(span["start"]), int(span["end"])
        except (KeyError, TypeError, ValueError):
            continue
        for i in range(max(0, start), min(end, count)):
            out[i] = version
    return out


def _item(sample: Sample, target: Any, metadata: Mapping[str, Any]) -> ScoreItem:
    """What a verifier scores: the text, plus how generation ended (stop token or length)."""
    return ScoreItem(sample.text, target, {**metadata, "finish_reason": sample.finish_reason})


@dataclass
class CollectSettings:
    samples_per_prompt: int
    sampling_params: dict[str, Any]
    run_seed: int
    normalize_std: bool = False
    filter_zero_std: bool = False
    max_refill_rounds: int = 2
    failure_policy: str = "zero"
    concurrency: int = 8
    shaping: Shaping = field(default_factory=Shaping)
    token_versions: bool = False  # refresh publication: age samples by their oldest token


@dataclass
class CollectStats:
    groups_generated: int = 0
    groups_zero_std: int = 0
    refill_rounds: int = 0
    generate_s: float = 0.0
    score_s: float = 0.0
    failures: FailureCounter = field(default_factory=FailureCounter)
    prompt_ids: list[str] = field(default_factory=list)


class Collector:
    """Builds scored groups for a collection."""

    def __init__(
        self,
        generate: GroupGenerator,
        render: Callable[[Any], list[int]],
        verifier_for: Callable[[str], Verifier],
        settings: CollectSettings,
        episodes: EpisodesLike | None = None,
    ) -> None:
        self.generate = generate
        self.render = render
        self.verifier_for = verifier_for
        self.s = settings
        self.episodes = episodes  # multi-turn tool use (``[environment]``); None: one turn
        # kept across collections: starting a pool's threads cost ~10 ms a collection
        self._pool: ThreadPoolExecutor | None = None

    def close(self) -> None:
        """Stop the rollout threads (idle between collections)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _one_group(self, prompt: Any, version: int, salt: str) -> Group:
        ids = self.render(prompt)
        n = self.s.samples_per_prompt
        base = sample_seed(self.s.run_seed, prompt.id, 0, salt)
        seeds = [(base + i) & 0x7FFFFFFF for i in range(n)]
        if self.episodes is not None:
            return self._episode_group(prompt, ids, seeds, version)
        responses = self.generate(ids, dict(self.s.sampling_params), seeds)
        if len(responses) != n:
            raise RuntimeError(f"engine returned {len(responses)} responses for {n} requested")
        g = Group(prompt=prompt, policy_version=version)
        for i, resp in enumerate(responses):
            out_ids, lps, text, finish, experts = parse_response(resp)
            sample = Sample(
                prompt_id=prompt.id,
                index=i,
                prompt_ids=list(ids),
                response_ids=out_ids,
                logprobs=lps,
                text=text,
                finish_reason=finish,
                policy_version=version,
                routed_experts=experts,
            )
            if self.s.token_versions:
                sample.token_versions = token_versions(resp, len(out_ids), version)
                sample.policy_version = min(sample.token_versions, default=version)
            g.samples.append(sample)
        if self.s.token_versions and g.samples:
            g.policy_version = min(s.policy_version for s in g.samples)
        return g

    def _episode_group(self, prompt: Any, ids: list[int], seeds: list[int], version: int) -> Group:
        """A group of multi-turn episodes: each trajectory is one sample whose tool-output
        tokens are masked out of the loss."""
        assert self.episodes is not None
        trajs = self.episodes.run_group(
            self.generate, ids, dict(self.s.sampling_params), seeds, version
        )
        g = Group(prompt=prompt, policy_version=version)
        for i, t in enumerate(trajs):
            sample = Sample(
                prompt_id=prompt.id,
                index=i,
                prompt_ids=list(ids),
                response_ids=t.response_ids,
                logprobs=t.logprobs,
                text=t.text,
                finish_reason=t.finish_reason,
                policy_version=version,
                loss_mask=t.loss_mask,
                turns=t.turns,
                tool_calls=t.tool_calls,
                tool_errors=t.tool_errors,
            )
            if self.s.token_versions:
                sample.token_versions = t.versions
                sample.policy_version = min(t.versions, default=version)
            g.samples.append(sample)
        if self.s.token_versions and g.samples:
            g.policy_version = min(s.policy_version for s in g.samples)
        return g

    def generate_groups(self, prompts: Sequence[Any], version: int, salt: str = "") -> list[Group]:
        """Generate every prompt's group concurrently (order of ``prompts`` kept)."""
        workers = max(1, min(self.s.concurrency, len(prompts)))
        if workers == 1:
            return [self._one_group(p, version, salt) for p in prompts]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                max_workers=max(1, self.s.concurrency), thread_name_prefix="rollout"
            )
        return list(self._pool.map(lambda p: self._one_group(p, version, salt), prompts))

    def score(self, groups: Sequence[Group], stats: CollectStats) -> None:
        """Score all samples (batched per verifier) and apply the failure policy."""
        by_verifier: dict[str, list[Sample]] = {}
        targets: dict[int, tuple[Any, Mapping[str, Any]]] = {}
        for g in groups:
            for s in g.samples:
                by_verifier.setdefault(g.prompt.verifier, []).append(s)
                targets[id(s)] = (g.prompt.target, g.prompt.metadata)
        for name, samples in by_verifier.items():
            verifier = self.verifier_for(name)
            items = [_item(s, *targets[id(s)]) for s in samples]
            results = verifier.score_batch(items)
            for s, r in zip(samples, results, strict=True):
                stats.failures.record(name, r)
                r = apply_failure_policy(r, self.s.failure_policy, name)
                s.reward, s.reward_ok, s.reward_failure = float(r.score), r.ok, r.failure

    def collect(
        self,
        next_prompts: Callable[[int], list[Any]],
        count: int,
        version: int,
    ) -> tuple[list[Group], CollectStats]:
        """Groups for ``count`` prompts; with the zero-std filter, refill from the sampler.

        Refill draws new prompts (the sampler's cursor advances; drawn prompts are never
        re-drawn) for at most ``max_refill_rounds`` rounds; if the collection is still
        short it proceeds with fewer groups rather than stalling the run.
        """
        stats = CollectStats()
        kept: list[Group] = []
        want = count
        rounds = 0
        while want > 0:
            prompts = next_prompts(want)
            if not prompts:
                break
            stats.prompt_ids.extend(p.id for p in prompts)
            t0 = time.monotonic()
            groups = self.generate_groups(prompts, version)
            t1 = time.monotonic()
            self.score(groups, stats)
            self.s.shaping.apply(groups)
            stats.generate_s += t1 - t0
            stats.score_s += time.monotonic() - t1
            stats.groups_generated += len(groups)
            if self.s.filter_zero_std:
                good, zero = split_zero_std(groups)
                stats.groups_zero_std += len(zero)
                kept.extend(good)
                want = count - len(kept)
                if want <= 0 or rounds >= self.s.max_refill_rounds:
                    break
                rounds += 1
                stats.refill_rounds = rounds
            else:
                kept.extend(groups)
                break
        assign_advantages(kept, self.s.normalize_std)
        return kept, stats


def tool_summary(groups: Sequence[Group]) -> dict[str, float]:
    """Multi-turn metrics: tool calls per sample, turns, tool errors, share of samples that
    called a tool."""
    samples = [s for g in groups for s in g.samples]
    n = float(max(len(samples), 1))
    calls = sum(s.tool_calls for s in samples)
    errors = sum(s.tool_errors for s in samples)
    return {
        "tools/calls_per_sample": calls / n,
        "tools/turns_mean": sum(s.turns for s in samples) / n,
        "tools/used_fraction": sum(1 for s in samples if s.tool_calls) / n,
        "tools/errors": float(errors),
        "tools/error_rate": errors / calls if calls else 0.0,
    }


def reward_summary(groups: Sequence[Group]) -> dict[str, float]:
    """Mean/std reward over all samples and mean in-group std."""
    rewards = [s.reward for g in groups for s in g.samples]
    mean, std = group_stats(rewards)
    stds = [group_stats(g.rewards)[1] for g in groups]
    return {
        "reward/mean": mean,
        "reward/std": std,
        "reward/group_std_mean": sum(stds) / len(stds) if stds else 0.0,
    }
