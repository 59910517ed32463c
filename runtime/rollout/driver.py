"""Trainer-node wiring: data, model, trainer, client, resume, audit, loop, export, report.

The functions named ``_make_*`` are the seams to the other runtime parts (models/trainer,
engine client, checkpoints, data); each adapts one interface in one place.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtime.checkpoints.identity import resume_key
from runtime.config import RunConfig, required
from runtime.engines.backend import backend_for
from runtime.metrics import MetricsWriter, ProgressView
from runtime.node.failure import shown_path
from runtime.rollout.collect import Collector, CollectSettings, GroupGenerator
from runtime.rollout.loop import GRPOLoop, LoopState
from runtime.rollout.shaping import Shaping
from runtime.rollout.types import Sample
from runtime.tracking import WandbSink

if TYPE_CHECKING:
    from runtime.node.protocol import Node
    from runtime.node.trainer_start import TrainerStart


# ---- seams ---------------------------------------------------------------------------------


def sampling_seed(cfg: RunConfig) -> int:
    """The seed of every rollout and evaluation sample (``inference.seed``, derived from
    ``data.seed`` like the trainer's ``runtime.seed``)."""
    return int(required(cfg.inference.seed, "inference.seed"))


def _make_data(cfg: RunConfig) -> tuple[Any, dict[str, Any]]:
    """The deterministic prompt sampler over the pool ``[data]`` selects (tasks, a
    prepared ``prompt_data`` file or a verified data ``manifest``) and an id -> prompt
    table (for async resume)."""
    from runtime.data.manifest import load_prompts
    from runtime.data.sampler import PromptSampler
    from runtime.rewards.judge_binding import attach_prompt_text

    train, _eval = load_prompts(cfg.data)
    attach_prompt_text(train, cfg.judge_bindings)
    sampler = PromptSampler(train, seed=cfg.data.seed, shuffle=cfg.data.shuffle)
    return sampler, {p.id: p for p in train}


def _make_evaluator(
    cfg: RunConfig,
    gen_url: str,
    on_failure: Callable[[], None],
    trainer: TrainerAdapter,
    verifier_for: Callable[[str], Any],
) -> Any:
    """Shared (rollout engines) or background (evaluator jobs) evaluation; None when off.

    Shared evaluation runs when ``training.eval_interval`` is set or update 0 is to be
    evaluated, and needs held-out prompts; background evaluation always runs.
    """
    from runtime.data.render import render_ids

    ev = cfg.evaluation
    if ev.mode == "background":
        return _background_evaluator(cfg, trainer)
    initial = not cfg.training.skip_eval_before_train
    if cfg.training.eval_interval is None and not initial:
        return None
    from runtime.data.eval_tasks import held_out_prompts
    from runtime.rewards.judge_binding import attach_prompt_text
    from runtime.rollout.evaluation import EvalSampling
    from runtime.rollout.evaluators import SharedEvaluator

    prompts = held_out_prompts(cfg.data)
    if not prompts:
        return None
    attach_prompt_text(prompts, cfg.judge_bindings)
    tokenizer = trainer.tokenizer
    eos = getattr(tokenizer, "eos_token_id", None)
    log = MetricsWriter(cfg.paths.eval_dir / "metrics.jsonl", key="update")
    return SharedEvaluator(
        _make_generator(cfg, gen_url, on_failure),
        lambda p: render_ids(p, tokenizer),
        verifier_for,
        prompts,
        EvalSampling(
            temperature=ev.temperature,
            samples_per_prompt=ev.samples_per_prompt,
            max_new_tokens=ev.max_response_length,
            top_p=cfg.inference.top_p,
            top_k=cfg.inference.top_k,
        ),
        log,
        interval=cfg.training.eval_interval,
        initial=initial,
        final=ev.final,
        run_seed=sampling_seed(cfg),
        stop_token_ids=[int(eos)] if eos is not None else [],
        concurrency=max(1, min(cfg.inference.max_running_requests, 16)),
    )


def _background_evaluator(cfg: RunConfig, trainer: TrainerAdapter) -> Any:
    """Milestone snapshots (HF for SGLang evaluators, native otherwise) + job submission."""
    from runtime.launch.evaluator import (
        BackgroundEvaluator,
        BeakerSubmitter,
        LocalSubmitter,
        submit_target,
    )

    def snapshot(out: Path) -> None:
        if backend_for(cfg.inference.engine).snapshot_format == "hf":
            trainer.export_hf(out)
        else:
            from runtime.models import save_native

            save_native(trainer.inner.loaded, out, state_dict=trainer.state_dict_for_publication())

    if cfg.manifest_path is None:
        raise RuntimeError("background evaluation needs the manifest path (RunConfig)")
    submitter: BeakerSubmitter | LocalSubmitter
    if submit_target() == "beaker":
        from runtime.manifest import document, manifest_signature

        submitter = BeakerSubmitter(
            document(cfg.manifest_path),
            cfg.evaluation.submit_timeout,
            manifest_signature(cfg.manifest_path),
            workspace=cfg.evaluation.workspace,
            name=cfg.name,
        )
    else:
        submitter = LocalSubmitter(
            cfg.contract.commands.evaluator_argv,
            cfg.manifest_path.resolve(),
            cfg.paths.eval_dir / "logs",
        )
    return BackgroundEvaluator(cfg, snapshot, submitter)


def _loss_mask(sample: Sample) -> list[int] | None:
    """The trainer's per-response-token loss weights: none for an untrained sample, none
    for tool output (multi-turn), all otherwise (None)."""
    if not sample.trained:
        return [0] * len(sample.response_ids)
    return None if sample.loss_mask is None else list(sample.loss_mask)


class TrainerAdapter:
    """Our rollout `Sample`s -> the trainer's input records; the rest passes through."""

    def __init__(self, trainer: Any, update_threads: int | None = None) -> None:
        self.inner = trainer
        self.tokenizer = trainer.loaded.tokenizer
        self.publication_device: Any = "cpu"  # the trainer's device for tensor publication
        # CPU threads for the trainer's passes (one outside them); None: leave them alone
        self.update_threads = update_threads

    @contextlib.contextmanager
    def _threads(self) -> Iterator[None]:
        if not self.update_threads or self.update_threads <= 1:
            yield
            return
        import torch

        torch.set_num_threads(self.update_threads)
        try:
            yield
        finally:
            torch.set_num_threads(1)

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
                loss_mask=_loss_mask(s),
                teacher_logprobs=s.teacher_logprobs,
            )
            for s in samples
        ]

    def compute_logprobs(self, samples: Sequence[Sample]) -> list[list[float]]:
        with self._threads():
            return [t.tolist() for t in self.inner.compute_logprobs(self._convert(samples))]

    def warm_up(self) -> int:
        return int(self.inner.warm_up())

    def fill_weights(self) -> None:
        self.inner.fill_weights()

    def train_step(self, samples: Sequence[Sample]) -> dict[str, Any]:
        with self._threads():
            return dict(self.inner.train_step(self._convert(samples)))

    def state_dict_for_publication(self, dtype: Any = None) -> Mapping[str, Any]:
        # gathered when read (a bucket at a time by the publishers): never made a dict here
        return self.inner.state_dict_for_publication(dtype=dtype, device=self.publication_device)

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


def cpu_update_threads(
    device: str, *, asynchronous: bool, trainer_world: int, env: Mapping[str, str]
) -> int | None:
    """CPU threads for an in-process trainer's passes, which otherwise run on one thread
    (None: not a CPU trainer whose threads we set, because ``OMP_NUM_THREADS`` says).
    Synchronous and alone, the trainer works while the engines wait, so its passes take
    every core (the quickstart's update: 0.24 s on one of 2 cores, 0.15 s on both); beside
    generating engines (async) or other trainer ranks they keep one."""
    if device != "cpu" or "OMP_NUM_THREADS" in env:
        return None
    if asynchronous or trainer_world != 1:
        return 1
    return max(1, len(os.sched_getaffinity(0)))


def _make_trainer(
    cfg: RunConfig,
    leader_host: str = "127.0.0.1",
    announce: Callable[[str], None] | None = None,
    defer_weights: bool = False,
) -> TrainerAdapter:
    """Trainer rank 0; with a larger trainer world its other ranks start here too (other
    trainer nodes find rank 0 through ``announce``: the run's registry). ``defer_weights``:
    see ``Trainer``; the caller runs ``fill_weights`` before any use of its values."""
    from runtime.trainer.ranks import lead_trainer

    update_threads = cpu_update_threads(
        cfg.trainer.device,
        asynchronous=cfg.async_.enabled,
        trainer_world=cfg.placement.trainer.world_size,
        env=os.environ,
    )
    if update_threads is not None:
        # the engines take the other cores; OpenMP workers spinning against them (or any
        # other load) made quickstart steps 2-7 s instead of 0.3 s on 2 cores
        import torch

        torch.set_num_threads(1)

    log_dir = cfg.paths.root / "logs" / "trainer-ranks"
    return TrainerAdapter(
        lead_trainer(
            cfg.contract,
            cfg.manifest_path or "",
            log_dir,
            leader_host=leader_host,
            announce=announce,
            defer_weights=defer_weights,
        ),
        update_threads=update_threads,
    )


def submission_granularity(cfg: RunConfig) -> str:
    """``async.submission_granularity``: "group" (one request with ``n``) or "sample"."""
    return cfg.async_.submission_granularity


def _make_generator(
    cfg: RunConfig,
    url: str,
    on_failure: Callable[[], None] = lambda: None,
    replay_urls: list[str] | None = None,
) -> GroupGenerator:
    """Group generation through the engine client (retries, timeouts from the manifest).

    ``async.submission_granularity = "group"``: the group goes out as ONE request with
    ``n`` and a base ``sampling_seed`` (the embedded engine gives sample i seed + i; SGLang
    copies one seed to all ``n`` and honours it only under deterministic inference, which
    the compiler refuses with "group"): the pinned sglang-router refuses per-sample
    ``sampling_params`` lists and forwards a request to one worker, so the group stays on
    one engine (SGLang expands ``n`` into parallel samples sharing the cached prompt
    prefix). ``"sample"``: each sample is its own request (``n = 1``, the
    seed it would have had in the group), sent concurrently, so the router may place the
    samples of one group on different engines; the group completes when every sample is
    back. Either way a failed or aborted request is retried up to ``runtime.group_retries``
    times (a whole group, or just the failed sample); ``on_failure`` runs before each retry
    (the node drops dead engines from the router there, so the retry goes to a live one,
    or raises when none is left).

    With MoE router replay (``replay_urls``: the live engine URLs, a list the node edits
    when an engine dies) requests ask for ``return_routed_experts`` and go to the engines
    directly, round-robin: the pinned sglang-router drops ``routed_experts`` from replies.
    """
    import itertools
    from concurrent.futures import ThreadPoolExecutor

    from runtime.engines.client import (
        ClientSettings,
        EngineClient,
        EngineFailure,
        EngineRequestError,
    )

    # ``on_failure`` also runs between HTTP-level retries: a dead engine leaves the router
    # once its exit is seen (one or two failed attempts), not after the whole backoff ladder
    client = EngineClient(url, ClientSettings.from_contract(cfg.runtime), on_retry=on_failure)
    clients: dict[str, EngineClient] = {url: client}
    turn = itertools.count()
    retries = client.settings.group_retries
    per_sample = submission_granularity(cfg) == "sample"

    def pick() -> tuple[str, EngineClient]:
        if not replay_urls:
            return url, client
        target = replay_urls[next(turn) % len(replay_urls)]
        if target not in clients:
            clients[target] = EngineClient(target, client.settings, on_retry=on_failure)
        return target, clients[target]

    def request(payload: dict[str, Any], n: int, what: str) -> list[dict[str, Any]]:
        """One ``/generate`` call for ``n`` samples, retried per the group retry policy."""
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
            f"{what} failed {retries + 1} times at {url} (runtime.group_retries={retries}); "
            f"last error: {errors[-1] if errors else 'unknown'}"
        )

    def payload_for(input_ids: list[int], params: dict[str, Any]) -> dict[str, Any]:
        payload = {"input_ids": list(input_ids), "sampling_params": params, "return_logprob": True}
        if replay_urls is not None:
            payload["return_routed_experts"] = True
        return payload

    def generate(
        input_ids: list[int], sampling: dict[str, Any], seeds: list[int]
    ) -> list[dict[str, Any]]:
        n = len(seeds)
        if not per_sample:
            params = {**sampling, "n": n, "sampling_seed": seeds[0]}
            return request(payload_for(input_ids, params), n, "a group")

        def one(i: int) -> dict[str, Any]:
            params = {**sampling, "n": 1, "sampling_seed": seeds[i]}
            return request(payload_for(input_ids, params), 1, f"sample {i} of a group")[0]

        if n == 1:
            return [one(0)]
        with ThreadPoolExecutor(max_workers=n, thread_name_prefix="sample") as pool:
            return list(pool.map(one, range(n)))

    return generate


def _make_episodes(cfg: RunConfig, tokenizer: Any, concurrency: int) -> Any:
    """The multi-turn episode runner of ``[environment]``; None for single-turn rollouts."""
    from runtime.rollout.environment import Environment

    env = Environment.from_contract(cfg.spec.environment)
    if not env.multi_turn:
        return None
    from runtime.rollout.multiturn import EpisodeRunner, make_codec
    from runtime.tools.runners import ToolBox

    tools = ToolBox(env.tools, cfg.executor, env.tool_timeout_s)
    return EpisodeRunner(env, tools, make_codec(tokenizer), concurrency=max(1, concurrency))


def rollout_concurrency(cfg: RunConfig) -> int:
    """Prompt groups generated at once.

    A group is ONE HTTP request (``n = samples_per_prompt``), so it takes one of the
    client's HTTP slots: ``min(server_concurrency, max_running_requests)`` per engine; with
    ``submission_granularity = "sample"`` it takes ``n`` slots (one request per sample).
    With async, ``async.producer_budget`` (samples in flight) bounds it to whole groups too.
    Never more than one collection's prompts, at least one group.
    """
    inf = cfg.inference
    slots = min(inf.server_concurrency, inf.max_running_requests) * len(cfg.placement.engines)
    if submission_granularity(cfg) == "sample":
        slots = max(1, slots // inf.samples_per_prompt)
    groups = min(inf.prompts_per_collection, slots)
    if cfg.async_.enabled:
        producer_budget = cfg.async_.producer_budget
        if producer_budget:
            groups = min(max(1, producer_budget // inf.samples_per_prompt), slots)
    return max(1, groups)


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
        "record": state.record,
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
        trainer.inner.save_checkpoint(
            manager,
            state.collection,
            extra=_loop_state_dict(state, cfg),
            digest=cfg.digest,
            resume_key=resume_key(cfg.config_document),
        )
        return time.monotonic() - t0

    return save


def _try_resume(
    cfg: RunConfig, trainer: TrainerAdapter, sampler: Any, mode: str
) -> LoopState | None:
    """Restore trainer + loop state from the newest complete checkpoint (per ``mode``).

    The checkpoint must come from the same experiment (its resume key: the compiled spec
    up to run length, checkpoint, evaluation, tracking, launch and runtime settings) and
    topology; the data cursor is restored so no prompt is lost or repeated.
    """
    if mode == "never":
        return None
    data = trainer.inner.restore_checkpoint(
        _manager(cfg), expect_digest=cfg.digest, expect_resume_key=resume_key(cfg.config_document)
    )
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
        record=extra.get("record"),
    )


def _serving_dtype(cfg: RunConfig) -> Any:
    """The dtype engines hold the weights in (``model.dtype``), for the weight audit."""
    import torch

    dtype = getattr(torch, cfg.model.dtype, None)
    return dtype if isinstance(dtype, torch.dtype) else None


def _logprob_fn(trainer: Any) -> Any:
    """The trainer's logprobs of ``response`` after ``prompt`` (behavioural weight audit)."""
    from runtime.trainer.types import Sample as TrainSample

    def fn(prompt: list[int], response: list[int]) -> list[float]:
        sample = TrainSample(prompt_ids=prompt, response_ids=response, advantage=0.0)
        return [float(x) for x in trainer.inner.compute_logprobs([sample])[0].tolist()]

    return fn


def _hf_names(model: Any) -> Any:
    """SGLang loads HF names: OLMo-core's converter renames the trainer's state."""
    from olmo_core.nn.hf import convert_state_to_hf, get_hf_config

    hf_config = get_hf_config(model)
    return lambda sd: convert_state_to_hf(hf_config, dict(sd))


def _distributed_publisher(runner: Node, model: Any) -> Any:
    """Broadcast publication from this (trainer) node: NCCL on GPUs, gloo on CPU."""
    from runtime.engines.process import free_port
    from runtime.publication.distributed import DistributedPublisher

    cfg = runner.cfg
    backend = backend_for(cfg.inference.engine)
    bind_host = "0.0.0.0" if runner.ident.count > 1 else "127.0.0.1"
    return DistributedPublisher(
        runner.engine_urls,
        cfg.runtime.publish_timeout_s,
        master_address=runner.ident.address,
        master_port=free_port(bind_host),
        bind_host=bind_host,
        backend="nccl" if cfg.trainer.device == "cuda" else "gloo",
        ranks_per_engine=backend.ranks_per_engine(cfg.inference),
        dtype=_serving_dtype(cfg),
        convert=_hf_names(model) if backend.hf_weight_names else None,
    )


# ---- the trainer node ------------------------------------------------------------------------
def train(runner: Node) -> dict[str, Any]:
    """Run GRPO on this (trainer) node; returns the end-of-run summary."""
    from runtime.data.render import render_ids
    from runtime.publication.audit import audit
    from runtime.publication.tensor import TensorPublisher, make_publisher
    from runtime.report import summary, write_report
    from runtime.rewards.judge_binding import RunVerifiers

    cfg = runner.cfg
    log = _logger(runner)
    sampler, by_id = runner.prompts if runner.prompts is not None else _make_data(cfg)
    start: TrainerStart[TrainerAdapter] | None = getattr(runner, "trainer_start", None)
    if start is not None:  # built (and warming up) beside the engines
        trainer = start.built()
    else:
        registry = getattr(runner, "registry", None)
        announce = None if registry is None else functools.partial(registry.register, "trainer")
        trainer = _make_trainer(cfg, runner.ident.leader_host, announce)
    startup = getattr(runner, "startup", None)
    if startup is not None:
        startup.mark("trainer")
    runner.on_close.append(trainer.close)  # also on failure: the other ranks must go
    runner.rank_pids = getattr(trainer.inner, "rank_pids", None)  # their heartbeats
    tokenizer = trainer.tokenizer
    transport = cfg.runtime.publication_transport
    backend = backend_for(cfg.inference.engine)
    if transport == "distributed":
        publisher: Any = _distributed_publisher(runner, trainer.inner.model)
        if not backend.checksum_audit:
            publisher.logprobs = _logprob_fn(trainer)
    else:
        publisher = make_publisher(
            transport,
            runner.engine_urls,
            cfg.runtime.publish_timeout_s,
            cfg.paths.engine_weights,
        )
        if transport == "disk" and backend.snapshot_format == "hf":
            from runtime.publication.disk import hf_snapshot

            publisher.writer = hf_snapshot(trainer.inner.model, tokenizer, _serving_dtype(cfg))
    if isinstance(publisher, TensorPublisher) or transport == "distributed":
        # share the trainer's own (device) tensors; NCCL broadcasts from the GPU
        trainer.publication_device = next(trainer.inner.model.parameters()).device
        # every publication ends with a checksum audit: its kernel compiles while the
        # engines warm up
        from runtime.publication.checksum import warm_up_kernel

        warm_up_kernel(trainer.publication_device)
    mode = cfg.async_.publication_mode if cfg.async_.enabled else "barrier"
    if mode == "refresh":
        from runtime.publication.refresh import RefreshPublisher

        publisher = RefreshPublisher(publisher, cfg.runtime.publish_timeout_s)
    elif mode == "engine_drain":
        from runtime.publication.drain import EngineDrainPublisher

        router = runner.gen_url if runner.gen_url not in runner.engine_urls else None
        publisher = EngineDrainPublisher(publisher, router, cfg.runtime.publish_timeout_s)
    runner.publisher = publisher
    # compiles and captures first: a resumed state and the audit then meet a trainer that
    # no thread is warming up (and an engine that is not capturing)
    _warm_up(cfg, runner, tokenizer, startup, trainer, start)

    state = _try_resume(cfg, trainer, sampler, runner.resume)
    if state is None:
        state = LoopState(collection=0, policy_version=0, sampler=sampler.state())
    else:
        log(f"resumed from collection {state.collection} (policy v{state.policy_version})")
        publisher.publish(trainer.state_dict_for_publication(), state.policy_version)
    if cfg.runtime.weight_audit:
        from runtime.models.weights import state_checksum

        t_audit = time.monotonic()
        # engines serve the model dtype (bf16 on GPUs) while the trainer keeps fp32 master
        # weights: compare what the engines should hold
        if isinstance(getattr(publisher, "inner", publisher), TensorPublisher):
            # device checksums, no copy to the CPU
            publisher.audit(trainer.state_dict_for_publication())
        elif transport == "distributed":
            publisher.audit(trainer.state_dict_for_publication(dtype=_serving_dtype(cfg)))
        else:
            served = trainer.state_dict_for_publication(dtype=_serving_dtype(cfg))
            by_name = None
            if not backend.checksum_audit:  # e.g. SGLang: no checksum endpoint
                by_name = _hf_names(trainer.inner.model)(served)
            audit(
                state_checksum(served),
                runner.engine_urls,
                cfg.runtime.publish_timeout_s,
                state=by_name,
                logprobs=_logprob_fn(trainer) if by_name is not None else None,
            )
        log(
            f"weight audit: {len(runner.engine_urls)} engine(s) match the trainer "
            f"({time.monotonic() - t_audit:.2f}s)"
        )

    if startup is not None:
        startup.mark("weight audit")
    if getattr(runner, "freeze_heap", False):
        # start-up's objects (modules, compiled graphs) out of the collector's reach: a
        # full collection over them would stall a collection for a long pause
        from runtime.heap import freeze_heap

        frozen = freeze_heap()
        if startup is not None:
            startup.mark("heap freeze")
            startup.details["frozen_objects"] = frozen
    if startup is not None:
        log(startup.line())
        startup.write(cfg.paths.root)

    verifier_for = RunVerifiers(
        cfg.rewards, cfg.judge_bindings, cfg.rewards.failure_policy, executor=cfg.executor
    )

    check_lock = threading.Lock()

    def check_engines() -> None:
        with check_lock:
            runner.health_check()

    episodes = _make_episodes(cfg, tokenizer, cfg.inference.samples_per_prompt)
    if episodes is not None:
        runner.on_close.append(episodes.tools.close)
    collector = Collector(
        _make_generator(
            cfg,
            runner.gen_url,
            check_engines,
            replay_urls=runner.engine_urls if cfg.trainer.router_replay else None,
        ),
        lambda p: render_ids(p, tokenizer),
        verifier_for,
        CollectSettings(
            samples_per_prompt=cfg.inference.samples_per_prompt,
            sampling_params=_sampling_params(cfg, tokenizer),
            run_seed=sampling_seed(cfg),
            normalize_std=cfg.optimizer.normalize_std,
            filter_zero_std=cfg.training.filter_zero_std_groups,
            max_refill_rounds=cfg.training.max_refill_rounds,
            failure_policy=cfg.rewards.failure_policy,
            concurrency=rollout_concurrency(cfg),
            shaping=Shaping.from_contract(cfg.rewards),
            token_versions=mode != "barrier",
        ),
        episodes=episodes,
    )
    metrics = MetricsWriter(cfg.paths.metrics)
    metrics.truncate_from(state.collection, saved=state.record)
    # evaluation gets its own verifiers: shared evaluation runs beside the async producer
    eval_verifiers = RunVerifiers(cfg.rewards, cfg.judge_bindings, "zero", executor=cfg.executor)
    evaluator = _make_evaluator(cfg, runner.gen_url, check_engines, trainer, eval_verifiers)
    # evaluations of updates after the restored one are redone
    MetricsWriter(cfg.paths.eval_dir / "metrics.jsonl", key="update").truncate_from(
        state.policy_version + (1 if state.collection else 0)
    )
    save = _make_saver(cfg, trainer) if _checkpointing(cfg) else None
    total = cfg.training.num_rollouts
    tracker = WandbSink.from_contract(cfg.tracking).start(
        cfg.paths.root / "wandb",
        cfg.config_document,
        run_id=cfg.digest.removeprefix("sha256:")[:16],
    )
    teacher = _make_teacher(cfg, runner)
    with ProgressView(
        total, start=state.collection, enabled=runner.progress, every=runner.progress_every
    ) as progress:
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
            evaluator=evaluator,
            tracker=tracker,
            teacher=teacher,
        )
        try:
            state = loop.run()
        finally:
            collector.close()
            if teacher is not None:
                teacher.close()
            eval_summary = evaluator.close() if evaluator is not None else {}
            if tracker is not None:
                tracker.finish()
    if runner.stop:
        log(f"stopped after collection {state.collection}: {runner.stop.reason}")
    # checkpoint.export_hf_final: resolved from output.export_hf unless the spec sets it
    final = required(cfg.checkpoint.export_hf_final, "checkpoint.export_hf_final")
    exported = not runner.stop and final
    if exported:
        trainer.export_hf(cfg.paths.export_hf)
    verifier_for.close()
    eval_verifiers.close()
    trainer.close()
    report = write_report(cfg.paths.metrics, cfg.paths.root / "report.png", title=cfg.name)
    out = summary(cfg.paths.metrics)
    out.update(
        {"report": str(report), "metrics": str(cfg.paths.metrics), "stopped": bool(runner.stop)}
    )
    out.update(eval_summary)
    if runner.stop:
        out["stopped_reason"] = runner.stop.reason
    log(done_line(out, total))
    log(f"report: {shown_path(Path(report))}")
    if exported:
        out["export"] = str(cfg.paths.export_hf)
        log(f"export: {shown_path(cfg.paths.export_hf)}")
    return out


def done_line(out: dict[str, Any], total: int) -> str:
    """The end-of-run line: where the run ended, and which update the evaluation is of."""
    n = int(out["collections"])
    if out.get("stopped"):
        head = f"stopped ({out.get('stopped_reason') or 'stop requested'}) after {n} of {total} collections"
    else:
        head = f"done: {n} collections"
    line = head
    if n:
        line += (
            f", reward first fifth {out['reward_first_fifth']:.3f}"
            f" -> last fifth {out['reward_last_fifth']:.3f}"
        )
    evaluated = out.get("eval_score")
    if evaluated is not None:
        update = out.get("eval_update")
        when = ""
        if update == 0:
            when = " (before training)"
        elif update is not None and (update != n or out.get("stopped")):
            when = f" (at update {update})"
        line += f", held-out evaluation {float(evaluated):.3f}{when}"
    return line


def warms_up_trainer(cfg: RunConfig) -> bool:
    """The trainer compiles every row length before the first collection: on GPUs only (a
    CPU trainer has nothing to warm); ``RLC_TRAINER_WARMUP=0`` leaves its compiles to the
    first collection (to measure what the warm-up saves)."""
    return cfg.trainer.gpus > 0 and os.environ.get("RLC_TRAINER_WARMUP", "1") != "0"


def trainer_start(runner: Node) -> TrainerStart[TrainerAdapter] | None:
    """This node's trainer, to build and warm up while its engines start (None: it starts
    after them; see ``runtime.node.trainer_start``). Call before the engines start."""
    from runtime.node.trainer_start import TrainerStart, beside_engines

    cfg = runner.cfg
    if not beside_engines(
        trainer_world=cfg.placement.trainer.world_size,
        trainer_on_gpus=cfg.trainer.device != "cpu",
        warms_up=warms_up_trainer(cfg),
        colocated=cfg.inference.placement == "colocated",
        pool_from_own_memory=backend_for(cfg.inference.engine).pool_from_own_memory,
    ):
        return None
    registry = getattr(runner, "registry", None)
    announce = None if registry is None else functools.partial(registry.register, "trainer")
    preload = getattr(runner, "preload", None)
    return TrainerStart(
        # its weights are read while it compiles (zeros until then): a builtin's cold
        # initialisation or a large checkpoint's read leaves the critical path
        lambda: _make_trainer(cfg, runner.ident.leader_host, announce, defer_weights=True),
        TrainerAdapter.warm_up if warms_up_trainer(cfg) else None,
        finish=TrainerAdapter.fill_weights,
        wait_first=preload.result if preload is not None else None,
    )


def _warm_up(
    cfg: RunConfig,
    runner: Node,
    tokenizer: Any,
    startup: Any,
    trainer: TrainerAdapter,
    start: TrainerStart[TrainerAdapter] | None = None,
) -> None:
    """Before the first collection: every decode graph the run can meet, captured by the
    embedded engines in their processes, while the trainer compiles every row length (here,
    or begun beside the engines' start: ``start``, joined here)."""
    from concurrent.futures import ThreadPoolExecutor

    from runtime.engines.warmup import warm_up_engines

    embedded = cfg.inference.engine == "embedded"
    sampling = [_sampling_params(cfg, tokenizer)]
    if cfg.evaluation.mode == "shared":  # held-out prompts go to the same engines
        sampling.append({"temperature": cfg.evaluation.temperature})
    rows, trainer_s = 0, None
    with ThreadPoolExecutor(max_workers=1) as pool:
        engines = (
            pool.submit(
                warm_up_engines,
                runner.engine_urls,
                sampling,
                float(cfg.runtime.startup_timeout_s or 1800),
                max_kv_len=cfg.inference.max_context_length,
            )
            if embedded
            else None
        )
        if start is not None:
            rows, trainer_s = start.warmed(), start.warm_up_s
        elif warms_up_trainer(cfg):
            t0 = time.monotonic()
            rows = trainer.warm_up()
            trainer_s = time.monotonic() - t0
        answers = engines.result() if engines is not None else {}
    if startup is None:
        return
    log = _logger(runner)
    from runtime.node.startup import phase_line

    if start is not None:  # the trainer's own start-up, inside "engines ready" and here
        startup.details["trainer_start"] = start.phases()
        log(f"trainer start-up (beside the engines): {phase_line(start.phases())}")
    if not embedded and trainer_s is None:
        return
    startup.mark("decode graph warm-up" if embedded else "trainer warm-up")
    startup.details["graphs"] = sum(int(a.get("graphs") or 0) for a in answers.values())
    # of the warm-up, the prefill's compile (the slowest engine's): no admission compiles
    prefill_s = [float(a.get("prefill_compile_s") or 0.0) for a in answers.values()]
    if any(prefill_s):
        startup.details["prefill_compile_s"] = round(max(prefill_s), 2)
    if trainer_s is not None:
        startup.details["trainer_warm_up_rows"] = rows
        startup.details["trainer_warm_up_s"] = round(trainer_s, 2)
        # each row's seconds and compiled graphs: where the warm-up's time goes
        startup.details["trainer_warm_up"] = list(getattr(trainer.inner, "warm_up_log", []))
    startup.details["modes"] = sorted({m for a in answers.values() for m in a.get("modes", [])})
    # each engine's own start-up (interpreter and imports, model, KV pool), inside
    # "engines ready": the run prints it beside its own phases
    engine_phases = {u: a["startup"] for u, a in answers.items() if a.get("startup")}
    if engine_phases:
        startup.details["engine_startup"] = engine_phases
        for url, phases in engine_phases.items():
            log(f"engine start-up ({url}): {phase_line(phases)}")


def _make_teacher(cfg: RunConfig, runner: Node) -> Any:
    """On-policy distillation: the scorer of the teacher this node started (None for GRPO)."""
    if cfg.teacher is None:
        return None
    from runtime.node.teacher import TeacherScorer

    url = runner.teacher_url
    if not url:
        raise RuntimeError("training.algorithm = 'opd' but no teacher server was started")
    from runtime.engines.client import ClientSettings

    client = ClientSettings.from_contract(cfg.runtime)
    return TeacherScorer(url, client, concurrency=cfg.teacher.max_running_requests)


def _checkpointing(cfg: RunConfig) -> bool:
    return cfg.training.save_checkpoints or bool(cfg.checkpoint.interval)


def _logger(runner: Node) -> Callable[[str], None]:
    def log(msg: str) -> None:
        print(f"rlc: {msg}", file=sys.stderr, flush=True)

    return log


__all__ = ["train", "Path"]
