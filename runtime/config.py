"""Typed view of a compiled manifest: the ONE place the runtime reads `config` and `plan`.

The compiler owns the manifest schema; when it moves a field, only this module changes.
Every accessor tolerates a missing field by falling back to the documented default, so
an older manifest still runs, but unknown *values* (a misspelt placement, a negative
count) are refused here with a clear message rather than deep inside the loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime.executor.settings import ExecutorSettings


class ConfigError(ValueError):
    """The manifest's config/plan cannot be carried out by this runtime."""


def _sec(config: dict[str, Any], name: str) -> dict[str, Any]:
    value = config.get(name) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"config.{name} must be a table, got {type(value).__name__}")
    return value


def _get(sec: dict[str, Any], key: str, default: Any) -> Any:
    value = sec.get(key, default)
    return default if value is None and default is not None else value


@dataclass(frozen=True)
class TaskConfig:
    task: str
    path: str | None = None
    train_count: int | None = None
    eval_count: int | None = None
    prompt_wrapper: str = "default"
    weight: float = 1.0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelConfig:
    source: str = "builtin:tiny"
    format: str = "builtin"
    architecture: str = "dense"
    dtype: str = "float32"


@dataclass(frozen=True)
class DataConfig:
    tasks: tuple[TaskConfig, ...] = ()
    seed: int = 17
    shuffle: bool = True


@dataclass(frozen=True)
class TrainingConfig:
    num_rollouts: int = 100
    save_checkpoints: bool = False
    filter_zero_std_groups: bool = False
    max_refill_rounds: int = 2
    max_run_seconds: int | None = None
    eval_interval: int | None = None
    skip_eval_before_train: bool = True
    algorithm: str = "grpo"


@dataclass(frozen=True)
class TrainerConfig:
    nodes: int = 1
    gpus: int = 0
    device: str = "cpu"
    micro_batch_size: int = 1
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class InferenceConfig:
    engine: str = "embedded"
    placement: str = "colocated"
    num_engines: int = 1
    prompts_per_collection: int = 8
    samples_per_prompt: int = 8
    max_context_length: int = 6144
    max_response_length: int = 4096
    max_prompt_length: int = 2048
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_running_requests: int = 64
    router_policy: str = "cache_aware"
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def global_batch_size(self) -> int:
        return self.prompts_per_collection * self.samples_per_prompt


@dataclass(frozen=True)
class OptimizerConfig:
    lr: float = 1e-6
    steps_per_collection: int = 1
    eps_clip: float = 0.2
    eps_clip_high: float = 0.28
    kl_coef: float = 0.0
    entropy_coef: float = 0.0
    normalize_std: bool = False
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AsyncConfig:
    enabled: bool = False
    max_policy_lag: int = 1
    off_policy_correction: str = "tis"
    tis_clip: float = 2.0
    buffer_factor: int = 2
    unused_sample_handler: str = "drop"
    publication_mode: str = "barrier"


@dataclass(frozen=True)
class CheckpointConfig:
    interval: int | None = None
    keep_last: int = 1
    keep_every: int | None = None
    resume: str = "auto"
    export_hf_final: bool = False


@dataclass(frozen=True)
class EvalTaskConfig:
    """One ``[[evaluation.tasks]]`` entry (an olmo-eval task name plus overrides)."""

    task: str
    interval: int | None = None
    generation: dict[str, Any] = field(default_factory=dict)
    scoring: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EvaluationConfig:
    """``[evaluation]``: how held-out prompts are sampled, and when (shared or background)."""

    mode: str = "shared"
    temperature: float = 0.0
    samples_per_prompt: int = 1
    max_response_length: int = 4096
    interval: int | None = None
    initial: bool = True
    final: bool = True
    gpus: int = 1
    submit_timeout_s: float = 30.0
    tasks: tuple[EvalTaskConfig, ...] = ()


@dataclass(frozen=True)
class JudgeBinding:
    """A verifier name scored by a judge with a rubric: the client settings it needs."""

    verifier: str
    judge: str
    rubric: str
    mode: str
    url: str | None
    model: str
    profile: str
    timeout_s: float
    concurrency: int
    max_tokens: int
    temperature: float
    chat_template: str | None = None  # managed judges only

    def verifier_settings(self, failure_policy: str) -> dict[str, Any]:
        """Settings for `runtime.rewards.judge.JudgeVerifier`."""
        return {
            "url": self.url,
            "model": self.model,
            "rubric": self.profile,
            "concurrency": self.concurrency,
            "timeout_s": self.timeout_s,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "failure_policy": failure_policy,
            "chat_template": self.chat_template,
        }


@dataclass(frozen=True)
class TeacherConfig:
    """On-policy distillation (``training.algorithm = "opd"``): the managed teacher server
    (compiled argv, planned node/GPUs/port) and the distillation loss settings."""

    source: str
    argv: tuple[str, ...]
    node: int
    port: int
    gpus: tuple[int, ...]
    device: str
    max_running_requests: int
    loss: str = "reverse_kl"
    coef: float = 1.0
    reward_weight: float = 0.0


@dataclass(frozen=True)
class ClientSettings:
    """The engine connection (``config.runtime``): the one type the manifest mapping builds
    and `runtime.engines.client.EngineClient` consumes; defaults are the spec's."""

    health_timeout_s: float = 5.0
    generate_timeout_s: float = 600.0
    http_retries: int = 3
    retry_backoff_s: float = 0.5
    group_retries: int = 2
    max_backoff_s: float = 30.0
    connect_timeout_s: float = 10.0
    max_connections: int = 256

    @classmethod
    def from_config(cls, runtime: Mapping[str, Any]) -> ClientSettings:
        """From the manifest's ``config.runtime`` section; missing fields keep defaults."""
        names = ("health_timeout_s", "generate_timeout_s", "http_retries", "retry_backoff_s")
        kw = {n: runtime[n] for n in (*names, "group_retries") if runtime.get(n) is not None}
        return cls(**kw)


@dataclass(frozen=True)
class PublicationSettings:
    """How new weights reach the engines (``runtime.publication_transport``) and how long one
    publication may take (``runtime.publish_timeout_s``); defaults are the spec's."""

    transport: str = "disk"
    timeout_s: float = 120.0


@dataclass(frozen=True)
class RuntimeSettings:
    client: ClientSettings = field(default_factory=ClientSettings)
    publication: PublicationSettings = field(default_factory=PublicationSettings)
    startup_timeout_s: float = 1200.0  # launch.coordination.startup_timeout
    heartbeat_timeout_s: float = 120.0  # launch.coordination.heartbeat_timeout
    weight_audit: bool = True
    max_logprob_mismatch: float | None = None
    seed: int = 17


@dataclass(frozen=True)
class EnginePlacement:
    id: int
    node: int
    port: int
    gpus: tuple[int, ...] = ()
    host: str = "127.0.0.1"


@dataclass(frozen=True)
class PlacementPlan:
    num_nodes: int
    engines: tuple[EnginePlacement, ...]
    router_node: int | None
    router_port: int | None
    trainer_nodes: tuple[int, ...]
    gpus_per_node: int
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Paths:
    root: Path
    checkpoints: Path
    metrics: Path
    rollouts: Path
    export_hf: Path
    engine_weights: Path
    eval_snapshots: Path = Path("eval-snapshots")

    @property
    def eval_dir(self) -> Path:
        """Evaluation results: ``metrics.jsonl`` and one directory per evaluated update."""
        return self.root / "eval"

    def ensure(self) -> None:
        for p in (self.root, self.checkpoints, self.rollouts, self.engine_weights):
            p.mkdir(parents=True, exist_ok=True)


@dataclass(frozen=True)
class RunConfig:
    """Everything the runtime needs, typed; built by `from_manifest`."""

    name: str
    digest: str
    model: ModelConfig
    data: DataConfig
    training: TrainingConfig
    trainer: TrainerConfig
    inference: InferenceConfig
    optimizer: OptimizerConfig
    async_: AsyncConfig
    checkpoint: CheckpointConfig
    runtime: RuntimeSettings
    placement: PlacementPlan
    paths: Paths
    rewards: dict[str, Any]
    failure_policy: str
    export_hf: bool
    rollout_sample_rate: float
    engine_argv: tuple[tuple[str, ...], ...]
    router_argv: tuple[str, ...]
    config: dict[str, Any]
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    judge_bindings: dict[str, JudgeBinding] = field(default_factory=dict)
    manifest_path: Path | None = None
    executor: ExecutorSettings = field(default_factory=ExecutorSettings)
    teacher: TeacherConfig | None = None  # on-policy distillation only

    @property
    def samples_per_collection(self) -> int:
        return self.inference.global_batch_size


def _tasks(data: dict[str, Any]) -> tuple[TaskConfig, ...]:
    out = []
    known = {"task", "path", "train_count", "eval_count", "prompt_wrapper", "weight"}
    for i, t in enumerate(data.get("tasks") or []):
        if not isinstance(t, dict) or "task" not in t:
            raise ConfigError(f"config.data.tasks[{i}] must be a table with a 'task' name")
        out.append(
            TaskConfig(
                task=str(t["task"]),
                path=t.get("path"),
                train_count=t.get("train_count"),
                eval_count=t.get("eval_count"),
                prompt_wrapper=str(t.get("prompt_wrapper") or "default"),
                weight=float(t.get("weight", 1.0) or 1.0),
                extra={k: v for k, v in t.items() if k not in known},
            )
        )
    return tuple(out)


def _placement(plan: dict[str, Any], inference: InferenceConfig) -> PlacementPlan:
    pl = plan.get("placement") or {}
    engines_raw = pl.get("engines")
    if engines_raw is None:
        engines_raw = [
            {"id": i, "node": 0, "gpus": [], "port": 30000 + i}
            for i in range(inference.num_engines)
        ]
    engines = tuple(
        EnginePlacement(
            id=int(e["id"]),
            node=int(e.get("node", 0)),
            port=int(e.get("port", 30000 + int(e["id"]))),
            gpus=tuple(int(g) for g in e.get("gpus") or ()),
            host=str(e.get("host") or "127.0.0.1"),
        )
        for e in engines_raw
    )
    if not engines:
        raise ConfigError("plan.placement has no engines; a GRPO run needs at least one")
    router = pl.get("router")
    if router is None and len(engines) > 1:
        router = {"node": 0, "port": 29000}
    trainer = pl.get("trainer") or {"nodes": [0], "gpus_per_node": 0}
    nodes = pl.get("nodes") or [{"node": 0}]
    num_nodes = max(
        [int(n.get("node", 0)) + 1 for n in nodes]
        + [e.node + 1 for e in engines]
        + [int(n) + 1 for n in trainer.get("nodes") or [0]]
    )
    return PlacementPlan(
        num_nodes=num_nodes,
        engines=engines,
        router_node=None if router is None else int(router.get("node", 0)),
        router_port=None if router is None else int(router.get("port", 29000)),
        trainer_nodes=tuple(int(n) for n in trainer.get("nodes") or [0]),
        gpus_per_node=int(trainer.get("gpus_per_node") or 0),
        raw=pl,
    )


def _paths(manifest: dict[str, Any], output: dict[str, Any]) -> Paths:
    p = manifest.get("paths") or {}
    root = Path(p.get("root") or output.get("root") or f"runs/{manifest.get('name', 'run')}")
    root = root.resolve()

    def path(key: str, default: str) -> Path:
        # compiled from a relative spec path, paths are relative to the working directory
        return Path(p.get(key) or root / default).resolve()

    return Paths(
        root=root,
        checkpoints=path("checkpoints", "checkpoints"),
        metrics=path("metrics", "metrics.jsonl"),
        rollouts=path("rollouts", "rollouts"),
        export_hf=path("export_hf", "export-hf"),
        engine_weights=path("engine_weights", "publish"),
        eval_snapshots=path("eval_snapshots", "eval-snapshots"),
    )


def _evaluation(ev: dict[str, Any], inference: InferenceConfig) -> EvaluationConfig:
    mode = str(_get(ev, "mode", "shared"))
    if mode not in ("shared", "background"):
        raise ConfigError(f"evaluation.mode must be 'shared' or 'background', got {mode!r}")
    tasks = []
    for i, t in enumerate(ev.get("tasks") or []):
        if not isinstance(t, dict) or not t.get("task"):
            raise ConfigError(f"config.evaluation.tasks[{i}] must be a table with a 'task' name")
        tasks.append(
            EvalTaskConfig(
                task=str(t["task"]),
                interval=None if t.get("interval") is None else int(t["interval"]),
                generation=dict(t.get("generation") or {}),
                scoring=dict(t.get("scoring") or {}),
            )
        )
    out = EvaluationConfig(
        mode=mode,
        temperature=float(_get(ev, "temperature", 0.0)),
        samples_per_prompt=int(_get(ev, "samples_per_prompt", 1)),
        max_response_length=int(_get(ev, "max_response_length", inference.max_response_length)),
        interval=None if ev.get("interval") is None else int(ev["interval"]),
        initial=bool(_get(ev, "initial", True)),
        final=bool(_get(ev, "final", True)),
        gpus=int(_get(ev, "gpus", 1)),
        submit_timeout_s=float(_get(ev, "submit_timeout", 30)),
        tasks=tuple(tasks),
    )
    if out.samples_per_prompt < 1 or out.max_response_length < 1 or out.temperature < 0:
        raise ConfigError(
            "evaluation.samples_per_prompt and max_response_length must be >= 1 and "
            "temperature >= 0"
        )
    return out


def _judge_bindings(config: dict[str, Any], plan: dict[str, Any]) -> dict[str, JudgeBinding]:
    """``[judging.bindings.VERIFIER]`` joined with its ``[judges.NAME]`` and ``[rubrics.NAME]``.

    An external judge is reached at its endpoint; a managed one at the port the compiled
    placement gave it (on the node it was placed on; loopback on a single node).
    """
    judges = _sec(config, "judges")
    rubrics = _sec(config, "rubrics")
    bindings = _sec(_sec(config, "judging"), "bindings")
    placed = {str(j.get("name")): j for j in ((plan.get("placement") or {}).get("judges") or [])}
    out: dict[str, JudgeBinding] = {}
    for verifier, b in sorted(bindings.items()):
        if not isinstance(b, dict):
            raise ConfigError(f"config.judging.bindings.{verifier} must be a table")
        jname, rname = str(b.get("judge", "")), str(b.get("rubric", ""))
        judge, rubric = judges.get(jname), rubrics.get(rname)
        if not isinstance(judge, dict):
            raise ConfigError(f"judging.bindings.{verifier}: no [judges.{jname}]")
        if not isinstance(rubric, dict):
            raise ConfigError(f"judging.bindings.{verifier}: no [rubrics.{rname}]")
        mode = str(judge.get("mode", "external"))
        if mode == "external":
            url: str | None = str(judge.get("endpoint") or "") or None
            if url is None:
                raise ConfigError(f"judges.{jname}: an external judge needs an endpoint")
        elif jname in placed:
            host = str(placed[jname].get("host") or "127.0.0.1")
            url = f"http://{host}:{int(placed[jname]['port'])}"
        else:
            raise ConfigError(f"judges.{jname} is managed but the plan did not place it")
        out[str(verifier)] = JudgeBinding(
            verifier=str(verifier),
            judge=jname,
            rubric=rname,
            mode=mode,
            url=url,
            model=str(judge.get("model") or "judge"),
            profile=str(rubric.get("profile") or ""),
            timeout_s=float(_get(judge, "timeout", 120)),
            concurrency=int(_get(judge, "max_concurrent_calls", 16)),
            max_tokens=int(_get(rubric, "max_response_tokens", 2048)),
            temperature=float(_get(rubric, "temperature", 1.0)),
            chat_template=judge.get("chat_template") if mode == "managed" else None,
        )
    return out


def _teacher(manifest: dict[str, Any]) -> TeacherConfig | None:
    """The distillation teacher of an ``opd`` manifest (None for GRPO); an ``opd`` manifest
    without a placed teacher and its command line is refused, never run as plain GRPO."""
    config = manifest.get("config") or {}
    if _sec(config, "training").get("algorithm", "grpo") != "opd":
        return None
    placed = ((manifest.get("plan") or {}).get("placement") or {}).get("teacher")
    argv = (manifest.get("commands") or {}).get("teacher_argv") or []
    t, d = _sec(config, "teacher"), _sec(config, "distillation")
    if not isinstance(placed, dict) or not argv or not t.get("source"):
        raise ConfigError(
            "training.algorithm = 'opd' but the manifest places no teacher "
            "(plan.placement.teacher, commands.teacher_argv): recompile the spec"
        )
    loss = str(_get(d, "loss", "reverse_kl"))
    if loss not in ("reverse_kl", "reverse_kl_k3"):
        raise ConfigError(f"distillation.loss = {loss!r} is not 'reverse_kl' or 'reverse_kl_k3'")
    return TeacherConfig(
        source=str(t["source"]),
        argv=tuple(str(a) for a in argv),
        node=int(placed.get("node", 0)),
        port=int(placed.get("port", 32000)),
        gpus=tuple(int(g) for g in placed.get("gpus") or ()),
        device=str(placed.get("device") or "cpu"),
        max_running_requests=int(_get(t, "max_running_requests", 64)),
        loss=loss,
        coef=float(_get(d, "coef", 1.0)),
        reward_weight=float(_get(d, "reward_weight", 0.0)),
    )


def _check_honoured(config: dict[str, Any]) -> None:
    """Refuse, before anything starts, values this runtime would not carry out.

    The compiler rejects them too (schemas/rules/*.rules); this guards manifests
    from older compilers, so nothing ever silently runs something else.
    """
    algorithm = _sec(config, "training").get("algorithm", "grpo")
    if algorithm not in (None, "grpo", "opd"):
        raise ConfigError(f"training.algorithm = {algorithm!r} is not 'grpo' or 'opd'")
    asy = _sec(config, "async")
    submission_granularity = asy.get("submission_granularity") or "group"
    if submission_granularity not in ("group", "sample"):
        raise ConfigError(
            f"async.submission_granularity = {submission_granularity!r} is not one of "
            "'group', 'sample'"
        )


def from_manifest(manifest: dict[str, Any]) -> RunConfig:
    """Map a verified manifest dict onto `RunConfig` (raises `ConfigError`)."""
    config = manifest.get("config") or {}
    plan = manifest.get("plan") or {}
    model = _sec(config, "model")
    data = _sec(config, "data")
    output = _sec(config, "output")
    training = _sec(config, "training")
    trainer = _sec(config, "trainer")
    inf = _sec(config, "inference")
    opt = _sec(config, "optimizer")
    asy = _sec(config, "async")
    ckpt = _sec(config, "checkpoint")
    rt = _sec(config, "runtime")
    rewards = _sec(config, "rewards")

    data_cfg = DataConfig(
        tasks=_tasks(data),
        seed=int(_get(data, "seed", 17)),
        shuffle=bool(_get(data, "shuffle", True)),
    )
    if not data_cfg.tasks and not (data.get("manifest") or data.get("prompt_data")):
        raise ConfigError(
            "config.data selects no prompts (data.tasks, data.prompt_data or data.manifest)"
        )
    _check_honoured(config)

    ctx = int(_get(inf, "max_context_length", 6144))
    resp = int(_get(inf, "max_response_length", min(4096, ctx // 2)))
    inference = InferenceConfig(
        engine=str(_get(inf, "engine", "embedded")),
        placement=str(_get(inf, "placement", "colocated")),
        num_engines=int(_get(inf, "num_engines", 1)),
        prompts_per_collection=int(_get(inf, "prompts_per_collection", 8)),
        samples_per_prompt=int(_get(inf, "samples_per_prompt", 8)),
        max_context_length=ctx,
        max_response_length=resp,
        max_prompt_length=int(_get(inf, "max_prompt_length", ctx - resp)),
        temperature=float(_get(inf, "temperature", 1.0)),
        top_p=float(_get(inf, "top_p", 1.0)),
        top_k=int(_get(inf, "top_k", -1)),
        max_running_requests=int(_get(inf, "max_running_requests", 64)),
        router_policy=str(_get(inf, "router_policy", "cache_aware")),
        raw=inf,
    )
    if inference.prompts_per_collection < 1 or inference.samples_per_prompt < 1:
        raise ConfigError("inference.prompts_per_collection and samples_per_prompt must be >= 1")

    seed = int(_get(rt, "seed", data_cfg.seed))
    mm = rt.get("max_logprob_mismatch")
    runtime = RuntimeSettings(
        client=ClientSettings.from_config(rt),
        startup_timeout_s=float(_get(rt, "startup_timeout_s", 1200.0)),
        heartbeat_timeout_s=float(
            _get(_sec(_sec(config, "launch"), "coordination"), "heartbeat_timeout", 120.0)
        ),
        weight_audit=bool(_get(rt, "weight_audit", True)),
        max_logprob_mismatch=None if mm is None else float(mm),
        seed=seed,
        publication=PublicationSettings(
            transport=str(_get(rt, "publication_transport", "disk")),
            timeout_s=float(_get(rt, "publish_timeout_s", 120.0)),
        ),
    )
    gpus = int(_get(trainer, "gpus", 0))
    commands = manifest.get("commands") or {}
    return RunConfig(
        name=str(manifest.get("name", "run")),
        digest=str(manifest.get("digest", "")),
        model=ModelConfig(
            source=str(_get(model, "source", "builtin:tiny")),
            format=str(_get(model, "format", "builtin")),
            architecture=str(_get(model, "architecture", "dense")),
            dtype=str(_get(model, "dtype", "float32")),
        ),
        data=data_cfg,
        training=TrainingConfig(
            num_rollouts=int(_get(training, "num_rollouts", 100)),
            save_checkpoints=bool(_get(training, "save_checkpoints", False)),
            filter_zero_std_groups=bool(_get(training, "filter_zero_std_groups", False)),
            max_refill_rounds=int(_get(training, "max_refill_rounds", 2)),
            max_run_seconds=training.get("max_run_seconds"),
            eval_interval=training.get("eval_interval"),
            skip_eval_before_train=bool(_get(training, "skip_eval_before_train", True)),
            algorithm=str(_get(training, "algorithm", "grpo")),
        ),
        trainer=TrainerConfig(
            nodes=int(_get(trainer, "nodes", 1)),
            gpus=gpus,
            device=str(_get(trainer, "device", "cuda" if gpus else "cpu")),
            micro_batch_size=int(_get(trainer, "micro_batch_size", 1)),
            raw=trainer,
        ),
        inference=inference,
        optimizer=OptimizerConfig(
            lr=float(_get(opt, "lr", 1e-6)),
            steps_per_collection=max(1, int(_get(opt, "steps_per_collection", 1))),
            eps_clip=float(_get(opt, "eps_clip", 0.2)),
            eps_clip_high=float(_get(opt, "eps_clip_high", 0.28)),
            kl_coef=float(_get(opt, "kl_coef", 0.0)),
            entropy_coef=float(_get(opt, "entropy_coef", 0.0)),
            normalize_std=bool(_get(opt, "normalize_std", False)),
            raw=opt,
        ),
        async_=AsyncConfig(
            enabled=bool(_get(asy, "enabled", False)),
            max_policy_lag=int(_get(asy, "max_policy_lag", 1)),
            off_policy_correction=str(_get(asy, "off_policy_correction", "tis")),
            tis_clip=float(_get(asy, "tis_clip", 2.0)),
            buffer_factor=max(1, int(_get(asy, "buffer_factor", 2))),
            unused_sample_handler=str(_get(asy, "unused_sample_handler", "drop")),
            publication_mode=str(_get(asy, "publication_mode", "barrier")),
        ),
        checkpoint=CheckpointConfig(
            interval=ckpt.get("interval"),
            keep_last=int(_get(ckpt, "keep_last", 1)),
            keep_every=ckpt.get("keep_every"),
            resume=str(_get(ckpt, "resume", "auto")),
            export_hf_final=bool(_get(ckpt, "export_hf_final", False)),
        ),
        runtime=runtime,
        placement=_placement(plan, inference),
        paths=_paths(manifest, output),
        rewards={k: v for k, v in rewards.items() if isinstance(v, dict)},
        failure_policy=str(_get(rewards, "failure_policy", "zero")),
        export_hf=bool(_get(output, "export_hf", False)),
        rollout_sample_rate=float(_get(output, "rollout_sample_rate", 0.0)),
        engine_argv=tuple(
            tuple(str(a) for a in argv) for argv in commands.get("engine_argv") or ()
        ),
        router_argv=tuple(str(a) for a in commands.get("router_argv") or ()),
        config=config,
        evaluation=_evaluation(_sec(config, "evaluation"), inference),
        judge_bindings=_judge_bindings(config, plan),
        executor=ExecutorSettings.from_config(_sec(rewards, "code")),
        teacher=_teacher(manifest),
    )
