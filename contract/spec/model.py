"""[model]: the policy checkpoint."""

from __future__ import annotations

from typing import Literal

from contract.spec._base import Section, fld
from contract.spec.constants import BUILTIN_MODELS, BUILTIN_OVERRIDE_KEYS

Architecture = Literal["dense", "moe", "hybrid_moe"]

__all__ = ["BUILTIN_MODELS", "BUILTIN_OVERRIDE_KEYS", "Architecture", "ModelSection"]


class ModelSection(Section):
    source: str = fld(
        description="policy checkpoint: an HF directory, an OLMo-core checkpoint directory, "
        "or `builtin:NAME` for a random-init model",
        note="relative paths resolve against the spec file's directory; the checkpoint is "
        "treated read-only. Builtin names: " + ", ".join(f"builtin:{n}" for n in BUILTIN_MODELS),
        min_length=1,
    )
    format: Literal["hf", "olmo_core", "builtin"] | None = fld(
        None,
        description="checkpoint format",
        derived="'builtin' for builtin:NAME sources, else 'hf'",
    )
    hf_template: str | None = fld(
        None,
        description="HF config/tokenizer template directory; required for olmo_core checkpoints "
        "(used for HF export and serving)",
    )
    chat_template: str | None = fld(
        None,
        description="the chat template prompts are rendered with: the name of one of the "
        "checkpoint's templates (additional_chat_templates/NAME.jinja, or a named entry of "
        "tokenizer_config.json), or a path to a .jinja file",
        note="by default the checkpoint's own template, found where transformers looks "
        "(chat_template.jinja, then tokenizer_config.json); an HF checkpoint without one is "
        "an error at model.source. Rendered by transformers' own renderer, as "
        "apply_chat_template does. A .jinja path resolves against the spec file's directory",
        min_length=1,
    )
    architecture: Architecture | None = fld(
        None,
        description="model family; checked against the checkpoint at run time",
        derived="the builtin model's architecture, else 'dense'",
    )
    dtype: Literal["bfloat16", "float32"] | None = fld(
        None,
        description="parameter dtype for training and serving",
        derived="'float32' on a CPU trainer, else 'bfloat16'",
    )
    num_params: int | None = fld(
        None,
        description="parameter count used by the plan's memory estimate for non-builtin models",
        derived="known for builtin models; otherwise no memory estimate",
        ge=1,
    )
