"""The runtime's view of one run: the typed contract (`contract.run.RunContract`) and what
this process adds to it (absolute paths, the judge endpoints, the manifest's location).

There is no mapping here: each section is the spec model the compiler validated and
resolved (`contract.spec`), read back from the manifest by `runtime.manifest`, so a field
and its default are defined once. Components that keep settings of their own build them
from their section (``from_contract``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contract.defaults import default_of
from contract.run import ContractError, RunContract, RunPaths
from contract.spec.teacher import DistillationSection

if TYPE_CHECKING:
    from contract.plan import Placement, Plan
    from contract.spec.async_ import AsyncSection
    from contract.spec.checkpoint import CheckpointSection
    from contract.spec.compiler_cache import CompilerCacheSection
    from contract.spec.data import DataSection
    from contract.spec.evaluation import EvaluationSection
    from contract.spec.inference import InferenceSection
    from contract.spec.launch import LaunchSection
    from contract.spec.model import ModelSection
    from contract.spec.optimizer import OptimizerSection
    from contract.spec.output import OutputSection
    from contract.spec.rewards import RewardsSection
    from contract.spec.root import Spec
    from contract.spec.runtime import RuntimeSection
    from contract.spec.tracking import TrackingSection
    from contract.spec.trainer import TrainerSection
    from contract.spec.training import TrainingSection
    from runtime.executor.settings import ExecutorSettings

ConfigError = ContractError  # a manifest this runtime cannot carry out


def required(value: Any, path: str) -> Any:
    """A derived field the compiler always resolves (it is ``None`` only in a spec)."""
    if value is None:
        raise ConfigError(f"config.{path} is not resolved; recompile the spec with this rlc")
    return value


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
    env: tuple[tuple[str, str], ...] = ()  # compiled (commands.teacher_env)
    loss: str = default_of(DistillationSection, "loss")
    coef: float = default_of(DistillationSection, "coef")
    reward_weight: float = default_of(DistillationSection, "reward_weight")


def teacher_of(contract: RunContract) -> TeacherConfig | None:
    """The distillation teacher of an ``opd`` run (None for GRPO); an ``opd`` manifest
    without a placed teacher and its command line is refused, never run as plain GRPO."""
    c = contract.config
    if c.training.algorithm != "opd":
        return None
    placed, argv = contract.plan.placement.teacher, contract.commands.teacher_argv
    if placed is None or not argv or not c.teacher.source:
        raise ConfigError(
            "training.algorithm = 'opd' but the manifest places no teacher "
            "(plan.placement.teacher, commands.teacher_argv): recompile the spec"
        )
    d = c.distillation
    return TeacherConfig(
        source=c.teacher.source,
        argv=tuple(argv),
        node=placed.node,
        port=placed.port,
        gpus=tuple(placed.gpus),
        device=placed.device,
        max_running_requests=c.teacher.max_running_requests,
        env=tuple(sorted(contract.commands.teacher_env.items())),
        loss=d.loss,
        coef=d.coef,
        reward_weight=d.reward_weight,
    )


@dataclass(frozen=True)
class Paths:
    """``manifest.paths`` made absolute (compiled from a relative spec path, they are
    relative to the working directory)."""

    root: Path
    checkpoints: Path
    metrics: Path
    rollouts: Path
    export_hf: Path
    engine_weights: Path
    eval_snapshots: Path

    @classmethod
    def from_contract(cls, paths: RunPaths) -> Paths:
        return cls(
            root=Path(paths.root).resolve(),
            checkpoints=Path(paths.checkpoints).resolve(),
            metrics=Path(paths.metrics).resolve(),
            rollouts=Path(paths.rollouts).resolve(),
            export_hf=Path(paths.export_hf).resolve(),
            engine_weights=Path(paths.engine_weights).resolve(),
            eval_snapshots=Path(paths.eval_snapshots).resolve(),
        )

    @property
    def eval_dir(self) -> Path:
        """Evaluation results: ``metrics.jsonl`` and one directory per evaluated update."""
        return self.root / "eval"

    def ensure(self) -> None:
        for p in (self.root, self.checkpoints, self.rollouts, self.engine_weights):
            p.mkdir(parents=True, exist_ok=True)


def judge_bindings(spec: Spec, placement: Placement) -> dict[str, JudgeBinding]:
    """``[judging.bindings.VERIFIER]`` joined with its ``[judges.NAME]`` and ``[rubrics.NAME]``.

    An external judge is reached at its endpoint; a managed one at the port the compiled
    placement gave it (loopback; a node on another machine is found through the registry,
    `runtime.entrypoints.execute.with_judge_urls`). The rules guarantee every name resolves.
    """
    placed = {j.name: j for j in placement.judges}
    out: dict[str, JudgeBinding] = {}
    for verifier, b in sorted(spec.judging.bindings.items()):
        judge, rubric = spec.judges.get(b.judge), spec.rubrics.get(b.rubric)
        if judge is None or rubric is None:
            raise ConfigError(f"judging.bindings.{verifier}: no [judges.{b.judge}] or rubric")
        if judge.mode == "external":
            url: str | None = judge.endpoint
            chat_template = None
        elif b.judge in placed:
            url = f"http://127.0.0.1:{placed[b.judge].port}"
            chat_template = judge.chat_template
        else:
            raise ConfigError(f"judges.{b.judge} is managed but the plan did not place it")
        out[verifier] = JudgeBinding(
            verifier=verifier,
            judge=b.judge,
            rubric=b.rubric,
            mode=judge.mode,
            url=url,
            model=judge.model,
            profile=rubric.profile,
            timeout_s=float(judge.timeout),
            concurrency=judge.max_concurrent_calls,
            max_tokens=rubric.max_response_tokens,
            temperature=rubric.temperature,
            chat_template=chat_template,
        )
    return out


@dataclass(frozen=True)
class RunConfig:
    """Everything the runtime needs, typed: the contract's sections plus this process's
    paths and judge endpoints; built by `from_contract`."""

    contract: RunContract
    paths: Paths
    judge_bindings: dict[str, JudgeBinding] = field(default_factory=dict)
    manifest_path: Path | None = None
    teacher: TeacherConfig | None = None  # on-policy distillation only

    @classmethod
    def from_contract(
        cls, contract: RunContract, manifest_path: str | Path | None = None
    ) -> RunConfig:
        return cls(
            contract=contract,
            paths=Paths.from_contract(contract.paths),
            judge_bindings=judge_bindings(contract.config, contract.plan.placement),
            manifest_path=None if manifest_path is None else Path(manifest_path).resolve(),
            teacher=teacher_of(contract),
        )

    # -- the resolved spec, section by section ----------------------------------------------
    @property
    def spec(self) -> Spec:
        return self.contract.config

    @property
    def name(self) -> str:
        return self.contract.name

    @property
    def digest(self) -> str:
        return self.contract.digest

    @property
    def model(self) -> ModelSection:
        return self.spec.model

    @property
    def data(self) -> DataSection:
        return self.spec.data

    @property
    def output(self) -> OutputSection:
        return self.spec.output

    @property
    def launch(self) -> LaunchSection:
        return self.spec.launch

    @property
    def training(self) -> TrainingSection:
        return self.spec.training

    @property
    def trainer(self) -> TrainerSection:
        return self.spec.trainer

    @property
    def inference(self) -> InferenceSection:
        return self.spec.inference

    @property
    def optimizer(self) -> OptimizerSection:
        return self.spec.optimizer

    @property
    def async_(self) -> AsyncSection:
        return self.spec.async_

    @property
    def checkpoint(self) -> CheckpointSection:
        return self.spec.checkpoint

    @property
    def rewards(self) -> RewardsSection:
        return self.spec.rewards

    @property
    def evaluation(self) -> EvaluationSection:
        return self.spec.evaluation

    @property
    def tracking(self) -> TrackingSection:
        return self.spec.tracking

    @property
    def compiler_cache(self) -> CompilerCacheSection:
        return self.spec.compiler_cache

    @property
    def runtime(self) -> RuntimeSection:
        return self.spec.runtime

    @property
    def config_document(self) -> dict[str, Any]:
        """The resolved config as the manifest holds it, for what hashes or diffs the whole
        config (the resume key, W&B's run config); never read field by field."""
        doc: dict[str, Any] = self.spec.model_dump(by_alias=True)
        return doc

    # -- the plan and the command lines -----------------------------------------------------
    @property
    def plan(self) -> Plan:
        return self.contract.plan

    @property
    def placement(self) -> Placement:
        return self.contract.plan.placement

    @property
    def engine_argv(self) -> list[list[str]]:
        return self.contract.commands.engine_argv

    @property
    def router_argv(self) -> list[str]:
        return self.contract.commands.router_argv

    @property
    def samples_per_collection(self) -> int:
        return self.plan.batch.samples_per_collection

    @cached_property
    def executor(self) -> ExecutorSettings:
        """The code executor's settings, built once (the verifier and the local service
        share the object)."""
        from runtime.executor.settings import ExecutorSettings

        return ExecutorSettings.from_contract(self.rewards.code)
