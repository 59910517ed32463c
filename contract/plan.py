"""The compiled plan (``manifest.plan``), typed: placement, batch geometry, lengths, the
async budget, the scoring pass and the evaluation schedule.

The compiler computes the plan (`compiler.resolve.placement`, `compiler.resolve.resolve`)
as plain data and writes it into the manifest unchanged; these models are its one
definition on the reading side. They are closed (an unknown key is an error), so a plan the
compiler writes and this type do not drift apart unnoticed (tests/unit/test_contract.py
validates every example's plan).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Record(BaseModel):
    """A closed, frozen, strict record of compiled data."""

    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, populate_by_name=True, defer_build=True
    )


class PlacedEngine(Record):
    id: int
    node: int
    gpus: list[int]
    device: Literal["cpu", "cuda"]
    port: int


class PlacedJudge(Record):
    name: str
    node: int
    gpus: list[int]
    port: int


class PlacedTeacher(Record):
    node: int
    gpus: list[int]
    device: Literal["cpu", "cuda"]
    port: int


class PlacedGpu(Record):
    gpu: int
    roles: list[str]


class PlacedNode(Record):
    node: int
    gpus: list[PlacedGpu]
    cpu_roles: list[str]


class PlacedRouter(Record):
    node: int
    port: int


class PlacedTrainer(Record):
    nodes: list[int]
    gpus_per_node: int
    world_size: int
    device: Literal["cpu", "cuda"]


class Placement(Record):
    nodes: list[PlacedNode]
    engines: list[PlacedEngine]
    router: PlacedRouter | None
    judges: list[PlacedJudge]
    teacher: PlacedTeacher | None
    teacher_gpus: int
    trainer: PlacedTrainer
    replicas: int
    gpus_per_replica: int
    allocated_gpus: int
    used_gpus: int
    policy_gpus: int
    judge_gpus: int
    unused_gpus: int
    widest_node: int

    @property
    def num_nodes(self) -> int:
        """Nodes the run spans: every node some role was placed on."""
        return 1 + max(
            [n.node for n in self.nodes]
            + [e.node for e in self.engines]
            + list(self.trainer.nodes)
            + [j.node for j in self.judges]
        )


class Batch(Record):
    prompts_per_collection: int
    samples_per_prompt: int
    samples_per_collection: int
    global_batch_size: int
    optimizer_steps_per_collection: int
    total_optimizer_steps: int
    trainer_world_size: int
    samples_per_rank_per_step: int | None
    micro_batch_size: int


class Lengths(Record):
    max_context_length: int
    max_prompt_length: int
    max_response_length: int
    packing_max_tokens: int | None
    eval_max_response_length: int
    token_pool: int
    full_context_slots_per_engine: int


class AsyncPlan(Record):
    enabled: bool
    engines: int
    global_http_slots: int
    requested_engine_slots: int
    usable_slots: int
    producer_sample_budget: int
    producer_group_budget: int
    producer_budget_whole_groups: bool
    completed_buffer_groups: int
    completed_buffer_samples: int
    max_policy_lag: int
    lag_window_samples: int
    submission_granularity: Literal["sample", "group"]
    publication_mode: Literal["barrier", "refresh", "engine_drain"]
    off_policy_correction: Literal["tis", "none"]


class ScoringPass(Record):
    standalone: bool
    reason: str
    check_interval: int
    check_tolerance: float


class EvaluationPlan(Record):
    mode: Literal["shared", "background"]
    interval: int | None
    milestones: list[int]
    has_eval_data: bool


class Plan(Record):
    placement: Placement
    batch: Batch
    lengths: Lengths
    async_: AsyncPlan = Field(alias="async")
    scoring_pass: ScoringPass
    evaluation: EvaluationPlan
    memory: dict[str, Any]  # the estimate and its parts, for people (`rlc plan`), not read
