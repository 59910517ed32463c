"""Prompt data: task loaders, wrappers, length budgets, the sampler, data manifests.

Nothing here imports torch: `rlc data prepare` runs on a laptop.
"""

from runtime.data.manifest import (
    DataManifest,
    DataManifestError,
    PrepareResult,
    load_prompts,
    prepare_data,
    verify_data_manifest,
)
from runtime.data.records import Prompt
from runtime.data.render import LengthReport, PromptTooLong, check_prompt_lengths, render_ids
from runtime.data.sampler import PromptSampler, SamplerStateError
from runtime.data.tasks import TASKS, DataError, TaskData, load_task, load_tasks
from runtime.data.wrappers import WRAPPERS, resolve_wrapper, wrap

__all__ = [
    "TASKS",
    "WRAPPERS",
    "DataError",
    "DataManifest",
    "DataManifestError",
    "LengthReport",
    "PrepareResult",
    "Prompt",
    "PromptSampler",
    "PromptTooLong",
    "SamplerStateError",
    "TaskData",
    "check_prompt_lengths",
    "load_prompts",
    "load_task",
    "load_tasks",
    "prepare_data",
    "render_ids",
    "resolve_wrapper",
    "verify_data_manifest",
    "wrap",
]
