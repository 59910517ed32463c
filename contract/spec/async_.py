"""[async]: bounded-lag asynchronous rollouts."""

from __future__ import annotations

from typing import Literal

from contract.spec._base import Section, fld


class AsyncSection(Section):
    enabled: bool = fld(
        False, description="overlap rollout and training", aliases=("async.fully_async",)
    )
    max_policy_lag: int | None = fld(
        None,
        description="oldest policy (in optimizer updates) a trained sample may come from",
        aliases=("async.max_weight_staleness",),
        derived="6 if async.enabled else 0",
        ge=0,
    )
    off_policy_correction: Literal["tis", "none"] | None = fld(
        None,
        description="importance correction for stale samples",
        derived="'tis' if async.enabled and not optimizer.use_rollout_logprobs else 'none'",
    )
    tis_clip: float = fld(2.0, description="cap on the TIS weight", gt=0.0)
    buffer_factor: float = fld(
        2.0,
        description="completed-group buffer, in collections' worth of prompt groups",
        aliases=("async.async_data_buffer_capacity_factor",),
        gt=0.0,
    )
    producer_budget: int | None = fld(
        None,
        description="samples in flight at once",
        aliases=("async.async_max_concurrent_samples",),
        derived="ceil(max(P*S, 2*engines*min(server_concurrency, max_running_requests)) / S) * S",
        ge=1,
        le=2**30,
    )
    unused_sample_handler: Literal["drop", "retry"] = fld(
        "retry",
        description="what happens to samples older than the lag",
        aliases=("async.async_unused_samples_handler",),
    )
    submission_granularity: Literal["sample", "group"] = fld(
        "group",
        description="group: one request with n samples (one engine, shared prefix); "
        "sample: one request per sample with its group seed (the router may spread a group)",
        aliases=("async.rollout_submission_granularity",),
    )
    publication_mode: Literal["barrier", "refresh", "engine_drain"] = fld(
        "barrier",
        description="how new weights reach the engines: barrier (in-flight generations "
        "finish on the old weights, then the fleet loads); refresh (engines retract "
        "in-flight generations, load, recompute their KV under the new weights and decode "
        "on; each token keeps the version and logprob it was sampled with, a group ages by "
        "its oldest token, TIS corrects); engine_drain (experimental: engines leave the "
        "router one at a time, finish what they admitted on their version, load and "
        "rejoin; the others keep serving, no response spans two versions)",
    )
