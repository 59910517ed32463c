"""[model]: the policy checkpoint."""

from __future__ import annotations

from typing import Literal

from compiler.spec._base import Section, fld

Architecture = Literal["dense", "moe", "hybrid_moe"]

# Builtin random-init models (no download). Sizes feed the plan's memory estimate.
BUILTIN_MODELS: dict[str, dict[str, object]] = {
    "tiny": {
        "architecture": "dense",
        "params": 1_200_000,
        "layers": 2,
        "hidden": 64,
        "kv_heads": 4,
        "head_dim": 16,
        "vocab": 64,
        "description": "2-layer dense toy model with a digit tokenizer (CPU tests, quickstart)",
    },
    "small": {
        "architecture": "dense",
        "params": 4_000_000,
        "layers": 4,
        "hidden": 256,
        "kv_heads": 4,
        "head_dim": 64,
        "vocab": 64,
        "description": "4-layer dense model with the builtin tokenizer (CPU experiments)",
    },
    "tiny-hybrid-moe": {
        "architecture": "hybrid_moe",
        "params": 3_000_000,
        "layers": 2,
        "hidden": 64,
        "kv_heads": 4,
        "head_dim": 16,
        "vocab": 64,
        "description": "2-layer hybrid MoE toy model (dense and MoE blocks)",
    },
    "tiny-moe": {
        "architecture": "moe",
        "params": 3_000_000,
        "layers": 2,
        "hidden": 64,
        "kv_heads": 4,
        "head_dim": 16,
        "vocab": 64,
        "description": "2-layer MoE toy model (4 experts, top-2)",
    },
    "olmo3-190m": {
        "architecture": "dense",
        "params": 190_000_000,
        "layers": 12,
        "hidden": 768,
        "kv_heads": 12,
        "head_dim": 64,
        "vocab": 100_352,
        "description": "Olmo 3 architecture at 190M parameters, random init",
    },
    "olmo3-1b": {
        "architecture": "dense",
        "params": 1_300_000_000,
        "layers": 16,
        "hidden": 2048,
        "kv_heads": 16,
        "head_dim": 128,
        "vocab": 100_352,
        "description": "Olmo 3 architecture at 1B parameters, random init",
    },
    "smallmoe": {
        "architecture": "moe",
        "params": 1_000_000_000,
        "active_params": 250_000_000,
        "layers": 8,
        "hidden": 1024,
        "kv_heads": 8,
        "head_dim": 128,
        "vocab": 100_352,
        "description": "OLMoE-style small MoE (16 experts, top-4), random init",
    },
    "small-hybrid-moe": {
        "architecture": "hybrid_moe",
        "params": 1_200_000_000,
        "active_params": 300_000_000,
        "layers": 8,
        "hidden": 1024,
        "kv_heads": 8,
        "head_dim": 128,
        "vocab": 100_352,
        "description": "hybrid (linear + full attention) MoE, random init",
    },
}
# `builtin:NAME?key=int&...` adjusts a builtin's shape (runtime/models/builtin.py reads it)
BUILTIN_OVERRIDE_KEYS = (
    "d_model",
    "n_heads",
    "n_layers",
    "num_experts",
    "top_k",
    "vocab_size",
    "window",
)


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
