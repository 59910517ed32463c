"""[training]: the outer loop."""

from __future__ import annotations

from typing import Literal

from contract.spec._base import Section, fld


class TrainingSection(Section):
    num_rollouts: int = fld(
        100,
        description="rollout collections to run (each ends in one or more optimizer updates)",
        aliases=("training.collections",),
        ge=1,
        le=100000,
    )
    algorithm: Literal["grpo", "opd"] = fld(
        "grpo",
        description="training objective: grpo, or opd (on-policy distillation toward "
        "[teacher], experimental, one node)",
    )
    eval_interval: int | None = fld(
        None,
        description="collections between evaluations",
        derived="20 when held-out data exists, else none",
        ge=1,
    )
    skip_eval_before_train: bool | None = fld(
        None,
        description="skip the evaluation before the first update",
        derived="false with shared held-out evaluation, true otherwise",
    )
    save_checkpoints: bool = fld(True, description="write checkpoints (always at the end)")
    filter_zero_std_groups: bool = fld(
        True, description="drop prompt groups whose rewards are all equal and refill the batch"
    )
    max_refill_rounds: int = fld(
        2,
        description="extra generation rounds to refill groups dropped by filter_zero_std_groups",
        ge=0,
    )
    max_run_seconds: int | None = fld(
        None, description="soft wall-clock budget; the run stops cleanly after it", ge=1
    )
