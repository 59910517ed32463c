"""[evaluation]: shared (rollout engines) or background (Beaker evaluator jobs)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from contract.spec._base import Section, fld
from contract.spec.launch import Duration


class EvalTask(Section):
    task: str = fld(description="olmo-eval task name", min_length=1)
    interval: int | None = fld(None, description="updates between evaluations of this task", ge=1)
    generation: dict[str, Any] = Field(default={}, description="sampling overrides")
    scoring: dict[str, Any] = Field(default={}, description="scoring overrides")


class EvaluationSection(Section):
    mode: Literal["shared", "background"] = fld(
        "shared",
        description="shared: rollout engines evaluate held-out data; background: separate jobs",
    )
    temperature: float = fld(
        0.0,
        description="shared: eval sampling temperature",
        aliases=("training.eval_temperature",),
        ge=0.0,
    )
    samples_per_prompt: int = fld(
        1,
        description="shared: samples per eval prompt",
        aliases=("training.n_samples_per_eval_prompt",),
        ge=1,
    )
    max_response_length: int | None = fld(
        None,
        description="shared: eval response cap",
        aliases=("training.eval_max_response_length",),
        derived="inference.max_response_length",
        ge=1,
    )
    interval: int | None = fld(
        None,
        description="background: optimizer updates between milestones",
        derived="20 in background mode",
        ge=1,
    )
    initial: bool = fld(True, description="background: evaluate update 0")
    final: bool = fld(True, description="background: evaluate the final update")
    image: str | None = fld(
        None,
        description="background: immutable Beaker image id",
        pattern=r"^[0-9A-HJKMNP-TV-Z]{26}$",
    )
    revision: str | None = fld(
        None,
        description="background: olmo-eval commit (40 hex) in the reference system; rejected "
        "here: evaluator jobs run runtime.entrypoints.evaluate from the image (pin it with evaluation.image)",
        pattern=r"^[0-9a-f]{40}$",
    )
    gpus: int = fld(1, description="background: GPUs per evaluator job", ge=1, le=8)
    cluster: str | None = fld(None, description="background: cluster", derived="launch.cluster")
    workspace: str | None = fld(
        None, description="background: workspace", derived="launch.workspace"
    )
    budget: str | None = fld(None, description="background: budget", derived="launch.budget")
    submit_timeout: int = fld(30, description="background: seconds for one submission", ge=1)
    timeout: Duration = fld("3h", description="background: evaluator task timeout (e.g. 3h, 2d)")
    server_args: list[str] = Field(default=[], description="background: extra SGLang args")
    tasks: list[EvalTask] = Field(default=[], description="background: evaluation tasks")
