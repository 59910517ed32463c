"""Trainer-node wiring: data, model, trainer, client, resume, audit, loop, export, report.

The functions named ``_make_*`` are the seams to the other runtime parts (models/trainer,
engine client, checkpoints, data); each adapts one interface in one place.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtime.config import RunConfig
from runtime.metrics import MetricsWriter, ProgressView
from runtime.rollout.collect import Collector, CollectSettings, GroupGenerator
from runtime.rollout.loop import GRPOLoop, LoopState
from runtime.rollout.types import Sample

if TYPE_CHECKING:
    from runtime.execute import NodeRunner


# ---- seams ---------------------------------------------------------------------------------
def _make_data(cfg: RunConfig) -> tuple[Any, dict[str, Any]]:
    """The deterministic prompt sampler and an id -> prompt table (for async resume)."""
    from runtime.data.sampler import PromptSampler
    from runtime.data.tasks import load_tasks

    entries = [dict(t) for t in (cfg.config.get("data") or {}).get("tasks") or []]
    train, _eval, _parts = load_tasks(entries, cfg.data.seed)
    sampler = PromptSampler(train, seed=cfg.data.seed, shuffle=cfg.data.shuffle)
    return sampler, {p.id: p for p in train}


class TrainerAdapter:
    """Our rollout `Sample`s -> the trainer's input records; the rest passes through."""

    def __init__(self, trainer: Any) -> None:
        self.inner = trainer
        self.tokenizer = trainer.loaded.tokenizer

    @staticmethod
    def _convert(samples: Sequence[Sample]) -> list[Any]:
        from runtime.trainer.types import Sample as TrainSample

        return [
            TrainSample(
                prompt_ids=s.prompt_ids,
                response_ids=s.response_ids,
                advantage=s.advantage,
                rollout_logprobs=s.logprobs,
                old_logprobs=s.old_logprobs,
                policy_version=s.policy_version,
                reward=s.reward,
                group_id=s.prompt_id,
                routed_experts=s.routed_experts,
            )
            for s in samples
        ]

    def compute_logprobs(self, samples: Sequence[Sample]) -> list[list[float]]:
        return [t.tolist() for t in self.inner.compute_logprobs(self._convert(samples))]

    def train_step(self, samples: Sequence[Sample]) -> dict[str, Any]:
        return dict(self.inner.train_step(self._convert(samples)))

    def state_dict_for_publication(self) -> dict[str, Any]:
        return dict(self.inner.state_dict_for_publication())

    def export_hf(self, out_dir: Path) -> None:
        from runtime.models import export_hf

        export_hf(
            self.inner.loaded,
            self.tokenizer,
            out_dir,
            state_dict=self.inner.state_dict_for_publication(),
        )

    def close(self) -> None:
        self.inner.close()


def _make_trainer(cfg: RunConfig) -> TrainerAdapter:
    from runtime.trainer.trainer import Trainer, TrainerConfig

    return TrainerAdapter(Trainer(TrainerConfig.from_manifest({"config": cfg.config})))


def _make_generator(
    cfg: RunConfig,
    url: str,
    on_failure: Callable[[], None] = lambda: None,
    replay_urls: list[str] | None = None,
) -> GroupGenerator:
    """Whole-group generation through the engine client (retries, timeouts from the manifest).

    The group goes out as ONE request with ``n`` and a base ``sampling_seed`` (sample i uses
    seed + i): the pinned sglang-router refuses per-sample ``sampling_params`` lists, and one
    request keeps the group on one engine (its prompt prefix is cached there). A failed or
    aborted group is retried whole, up to ``runtime.group_retries`` times; ``on_failure``
    runs before each retry (the node drops dead engines from the router there, so the
    retry goes to a live one, or raises when none is left).

    With MoE router replay (``replay_urls``: the live engine URLs, a list the node edits
    when an engine dies) requests ask for ``return_routed_experts`` and go to the engines
    directly, round-robin: the pinned sglang-router drops ``routed_experts`` from replies.
    """
    import itertools

    from runtime.engines.client import (
        ClientSettings,
        EngineClient,
        EngineFailure,
        EngineRequestError,
    )

    settings = ClientSettings.from_config(cfg.config.get("runtime") or {})
    client = EngineClient(url, settings)
    clients: dict[str, EngineClient] = {url: client}
    turn = itertools.count()
    retries = client.settings.group_retries

    def pick() -> tuple[str, EngineClient]:
        if not replay_urls:
            return url, client
        target = replay_urls[next(turn) % len(replay_urls)]
        if target not in clients:
            clients[target] = EngineClient(target, settings)
        return target, clients[target]

    def generate(
        input_ids: list[int], sampling: dict[str, Any], seeds: list[int]
    ) -> list[dict[str, Any]]:
        n = len(seeds)
        payload = {
            "input_ids": list(input_ids),
            "sampling_params": {**sampling, "n": n, "sampling_seed": seeds[0]},
            "return_logprob": True,
        }
        if replay_urls is not None:
            payload["return_routed_experts"] = True
        errors: list[str] = []
        for attempt in range(retries + 1):
            target, engine = pick()
            try:
                data = engine.generate_raw(payload)
            except EngineRequestError:
                raise  # a 4xx: the request itself is wrong, retrying cannot help
            except EngineFailure as exc:
                errors.append(f"{target}: {exc}")
            else:
                data = data if isinstance(data, list) else [data]
                aborted = [
                    d
                    for d in data
                    if isinstance((d.get("meta_info") or {}).get("finish_reason"), dict)
                    and d["meta_info"]["finish_reason"].get("type") == "abort"
                ]
                if len(data) == n and not aborted:
                    return data
                errors.append(f"{len(aborted)} aborted / {len(data)} of {n} samples returned")
            if attempt < retries:
                on_failure()
                time.sleep(client.backoff(attempt))
        on_failure()
        raise EngineFailure(
            f"a group failed {retries + 1} times at {url} (runtime.group_retries={retries}); "
            f"last error: {errors[-1] if errors else 'unknown'}"
        )

    return generate


def _sampling_params(cfg: RunConfig, tokenizer: Any) -> dict[str, Any]:
    inf = cfg.inference
    params: dict[str, Any] = {
        "max_new_tokens": inf.max_response_length,
        "temperature": inf.temperature,
        "top_p": inf.top_p,
        "top_k": inf.top_k,
    }
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is not None:
        params["stop_token_ids"] = [int(eos)]
    return params


# ---- checkpoints -----------------------------------------------------------------------------
def _loop_state_dict(state: LoopState, cfg: RunConfig) -> dict[str, Any]:
    return {
        "collection": state.collection,
        "policy_version": state.policy_version,
        "sampler": state.sampler,
        "pending_prompt_ids": state.pending_prompt_ids,
        "spec_digest": cfg.digest,
    }


def _manager(cfg: RunConfig) -> Any:
    from runtime.checkpoints import CheckpointManager

    return CheckpointManager(
        cfg.paths.checkpoints,
        interval=cfg.checkpoint.interval,
        keep_last=cfg.checkpoint.keep_last,
        keep_every=cfg.checkpoint.keep_every,
    )


def _make_saver(cfg: RunConfig, trainer: TrainerAdapter) -> Callable[[LoopState], float]:
    manager = _manager(cfg)

    def save(state: LoopState) -> float:
        t0 = time.monotonic()
        manager.save(
            state.collection, trainer.inner, extra=_loop_state_dict(state, cfg), digest=cfg.digest
        )
        return time.monotonic() - t0

    return save


def _try_resume(
    cfg: RunConfig, trainer: TrainerAdapter, sampler: Any, mode: str
) -> LoopState | None:
    """Restore trainer + loop state from the newest complete checkpoint (per ``mode``).

    The checkpoint must come from the same compiled spec (digest) and topology; the data
    cursor is restored so no prompt is lost or repeated.
    """
    if mode == "never":
        return None
    data = _manager(cfg).restore(trainer.inner, expect_digest=cfg.digest)
    if data is None:
        if mode == "required":
            raise RuntimeError(f"checkpoint.resume=required but {cfg.paths.checkpoints} has none")
        return None
    extra = data.extra
    sampler.restore(extra["sampler"])
    return LoopState(
        collection=int(extra["collection"]),
        policy_version=int(extra["policy_version"]),
        sampler=dict(extra["sampler"]),
        pending_prompt_ids=list(extra.get("pending_prompt_ids") or []),
    )


# ---- the trainer node ------------------------------------------------------------------------
def train(runner: NodeRunner) -> dict[str, Any]:
    """Run GRPO on this (trainer) node; returns the end-of-run summary."""
    from runtime.data.render import render_ids
    from runtime.publication.audit import audit
    from runtime.publication.disk import DiskPublisher
    from runtime.report import summary, write_report
    from runtime.rewards.base import get_verifier

    cfg = runner.cfg
    log = _logger(runner)
    sampler, by_id = _make_data(cfg)
    trainer = _make_trainer(cfg)
    tokenizer = trainer.tokenizer
    publisher = DiskPublisher(
        cfg.paths.engine_weights, runner.engine_urls, cfg.runtime.publish_timeout_s
    )
    runner.publisher = publisher

    state = _try_resume(cfg, trainer, sampler, runner.resume)
    if state is None:
        state = LoopState(collection=0, policy_version=0, sampler=sampler.state())
    else:
        log(f"resumed from collection {state.collection} (policy v{state.policy_version})")
        publisher.publish(trainer.state_dict_for_publication(), state.policy_version)
    if cfg.runtime.weight_audit:
        from runtime.models.weights import state_checksum

        audit(
            state_checksum(trainer.state_dict_for_publication()),
            runner.engine_urls,
            cfg.runtime.publish_timeout_s,
        )
        log(f"weight audit: {len(runner.engine_urls)} engine(s) match the trainer")

    verifiers: dict[str, Any] = {}

    def verifier_for(name: str) -> Any:
        if name not in verifiers:
            verifiers[name] = get_verifier(name, cfg.rewards.get(name))
        return verifiers[name]

    check_lock = threading.Lock()

    def check_engines() -> None:
        with check_lock:
            runner.health_check()

    collector = Collector(
        _make_generator(
            cfg,
            runner.gen_url,
            check_engines,
            replay_urls=runner.engine_urls if cfg.config["trainer"].get("router_replay") else None,
        ),
        lambda p: render_ids(p, tokenizer),
        verifier_for,
        CollectSettings(
            samples_per_prompt=cfg.inference.samples_per_prompt,
            sampling_params=_sampling_params(cfg, tokenizer),
            run_seed=cfg.runtime.seed,
            normalize_std=cfg.optimizer.normalize_std,
            filter_zero_std=cfg.training.filter_zero_std_groups,
            max_refill_rounds=cfg.training.max_refill_rounds,
            failure_policy=cfg.failure_policy,
            concurrency=max(1, min(cfg.inference.prompts_per_collection, 16)),
        ),
    )
    metrics = MetricsWriter(cfg.paths.metrics)
    metrics.truncate_from(state.collection)
    save = _make_saver(cfg, trainer) if _checkpointing(cfg) else None
    total = cfg.training.num_rollouts
    with ProgressView(total, start=state.collection, enabled=runner.progress) as progress:
        loop = GRPOLoop(
            cfg,
            trainer,
            collector,
            sampler,
            publisher,
            metrics,
            state,
            save_checkpoint=save,
            health_check=check_engines,
            progress=progress,
            stop=runner.stop,
            prompt_lookup=by_id.__getitem__,
        )
        state = loop.run()
    if runner.stop:
        log(f"stopped after collection {state.collection}: {runner.stop.reason}")
    elif cfg.export_hf or cfg.checkpoint.export_hf_final:
        t0 = time.monotonic()
        trainer.export_hf(cfg.paths.export_hf)
        log(f"HF export: {cfg.paths.export_hf} ({time.monotonic() - t0:.1f}s)")
    for v in verifiers.values():
        v.close()
    trainer.close()
    report = write_report(cfg.paths.metrics, cfg.paths.root / "report.png", title=cfg.name)
    out = summary(cfg.paths.metrics)
    out.update(
        {"report": str(report), "metrics": str(cfg.paths.metrics), "stopped": bool(runner.stop)}
    )
    log(
        f"done: {out['collections']} collections, reward first fifth {out['reward_first_fifth']:.3f}"
        f" -> last fifth {out['reward_last_fifth']:.3f}; report {report}"
    )
    return out


def _checkpointing(cfg: RunConfig) -> bool:
    return cfg.training.save_checkpoints or bool(cfg.checkpoint.interval)


def _logger(runner: NodeRunner) -> Callable[[str], None]:
    def log(msg: str) -> None:
        print(f"rlc: {msg}", file=sys.stderr, flush=True)

    return log


__all__ = ["train", "Path"]
