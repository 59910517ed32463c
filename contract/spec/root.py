"""The root spec model and the section tables (``compiler.spec`` re-exports them lazily)."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from contract.spec._base import Section, fld
from contract.spec.async_ import AsyncSection
from contract.spec.checkpoint import CheckpointSection
from contract.spec.compiler_cache import CompilerCacheSection
from contract.spec.data import DataSection
from contract.spec.environment import EnvironmentSection
from contract.spec.evaluation import EvaluationSection
from contract.spec.inference import InferenceSection
from contract.spec.judges import Judge, JudgeName, JudgingSection, Rubric
from contract.spec.launch import LaunchSection
from contract.spec.model import ModelSection
from contract.spec.native import NativeSection
from contract.spec.optimizer import OptimizerSection
from contract.spec.output import OutputSection
from contract.spec.rewards import RewardsSection
from contract.spec.runtime import RuntimeSection
from contract.spec.teacher import DistillationSection, TeacherSection
from contract.spec.tracking import TrackingSection
from contract.spec.trainer import TrainerSection
from contract.spec.training import TrainingSection

SCHEMA_VERSION = 1


class Spec(Section):
    """A whole run spec."""

    model_config = ConfigDict(**Section.model_config, populate_by_name=True)

    schema_version: Literal[1] = fld(description="spec schema version; must be 1")
    name: str = fld(
        description="run name (Beaker task name, W&B run name, build/<name>/)",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        max_length=100,
    )
    recipe: str | None = fld(
        None,
        description="named recipe from the catalog (`rlc recipes`); this spec's values layer over it",
        pattern=r"^[a-z0-9][a-z0-9_-]*$",
    )
    description: str | None = fld(None, description="one-line description (shown by `rlc recipes`)")
    model: ModelSection = fld(description="policy checkpoint")
    data: DataSection = fld(description="prompts and verifiers")
    output: OutputSection = fld(description="run directory")
    launch: LaunchSection = Field(
        default={}, validate_default=True, description="Beaker submission"
    )
    training: TrainingSection = Field(default={}, validate_default=True, description="outer loop")
    trainer: TrainerSection = Field(
        default={}, validate_default=True, description="OLMo-core trainer"
    )
    inference: InferenceSection = Field(
        default={}, validate_default=True, description="rollout engines"
    )
    optimizer: OptimizerSection = Field(
        default={}, validate_default=True, description="optimizer and loss"
    )
    async_: AsyncSection = Field(
        default={}, validate_default=True, alias="async", description="async rollouts"
    )
    checkpoint: CheckpointSection = Field(
        default={}, validate_default=True, description="checkpoints"
    )
    rewards: RewardsSection = Field(default={}, validate_default=True, description="verifiers")
    environment: EnvironmentSection = Field(
        default={}, validate_default=True, description="multi-turn tool use"
    )
    teacher: TeacherSection = Field(
        default={}, validate_default=True, description="on-policy distillation teacher"
    )
    distillation: DistillationSection = Field(
        default={}, validate_default=True, description="on-policy distillation loss"
    )
    judges: dict[JudgeName, Judge] = Field(default={}, description="LLM judge services")
    rubrics: dict[str, Rubric] = Field(default={}, description="judge rubric profiles")
    judging: JudgingSection = Field(
        default={}, validate_default=True, description="verifier bindings"
    )
    evaluation: EvaluationSection = Field(
        default={}, validate_default=True, description="evaluation"
    )
    tracking: TrackingSection = Field(
        default={}, validate_default=True, description="metrics and W&B"
    )
    compiler_cache: CompilerCacheSection = Field(
        default={}, validate_default=True, description="Triton caches"
    )
    runtime: RuntimeSection = Field(
        default={}, validate_default=True, description="runtime connections"
    )
    native: NativeSection = Field(
        default={}, validate_default=True, description="native pass-through"
    )


# Sections whose fields are fixed (model classes); judges/rubrics/judging.bindings are maps.
SECTIONS: dict[str, type[Section]] = {
    "model": ModelSection,
    "data": DataSection,
    "output": OutputSection,
    "launch": LaunchSection,
    "training": TrainingSection,
    "trainer": TrainerSection,
    "inference": InferenceSection,
    "optimizer": OptimizerSection,
    "async": AsyncSection,
    "checkpoint": CheckpointSection,
    "rewards": RewardsSection,
    "environment": EnvironmentSection,
    "teacher": TeacherSection,
    "distillation": DistillationSection,
    "evaluation": EvaluationSection,
    "tracking": TrackingSection,
    "compiler_cache": CompilerCacheSection,
    "runtime": RuntimeSection,
    "native": NativeSection,
}
MAP_SECTIONS: dict[str, type[Section]] = {
    "judges": Section,  # discriminated union, see judges.Judge
    "rubrics": Rubric,
    "judging": JudgingSection,
}
TOP_LEVEL = ("schema_version", "name", "recipe", "description")

__all__ = [
    "MAP_SECTIONS",
    "SCHEMA_VERSION",
    "SECTIONS",
    "TOP_LEVEL",
    "Judge",
    "Section",
    "Spec",
]
