"""[data]: prompts and their verifiers."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contract.spec._base import Section, fld
from contract.tasks import TaskName

PromptWrapper = Literal[
    "none",
    "auto",
    "boxed",
    "open_instruct_rlzero_answer",
    "gsm8k",
    "rlzero",
    "code",
    "calculator_call",
]


class TaskEntry(Section):
    task: TaskName = fld(description="named task; picks the loader and the verifier")
    path: str | None = fld(
        None,
        description="local data file (JSONL/parquet) for the task; generated tasks "
        "(arithmetic, multiplication, addition) need none",
    )
    train_count: int | None = fld(None, description="training prompts to take (null: all)", ge=1)
    eval_count: int | None = fld(
        None, description="held-out prompts for evaluation (null: none)", ge=1
    )
    prompt_wrapper: PromptWrapper | None = fld(
        None, description="how the prompt is wrapped", derived="data.prompt_wrapper"
    )
    weight: float = fld(1.0, description="sampling weight relative to the other tasks", gt=0.0)
    digits: list[int] | None = fld(
        None,
        description="multiplication and addition only: digits of the two operands, e.g. "
        "[2, 2] (null: [2, 2])",
        min_length=2,
        max_length=2,
    )
    allow_subtraction: bool = fld(
        False, description="arithmetic only: also generate a-b (a >= b), still one-token answers"
    )


class EvalSet(Section):
    name: str = fld(description="eval set name", pattern=r"^[A-Za-z0-9_-]+$")
    path: str = fld(description="prepared eval JSONL", min_length=1)


class DataSection(Section):
    tasks: list[TaskEntry] | None = fld(
        None,
        description="selector: named tasks (exactly one of tasks, prompt_data, manifest)",
    )
    prompt_data: str | None = fld(
        None, description="selector: prepared training JSONL (needs reward_config)"
    )
    reward_config: str | None = fld(None, description="verifier registry JSON for prompt_data")
    manifest: str | None = fld(
        None, description="selector: an immutable data manifest with sha256s"
    )
    eval: list[EvalSet] = Field(default=[], description="extra held-out eval sets (name + path)")
    seed: int = fld(17, description="data seed (shuffling, generated tasks)", ge=0)
    shuffle: bool = fld(True, description="shuffle training prompts")
    prompt_wrapper: PromptWrapper = fld("none", description="default prompt wrapper for tasks")
