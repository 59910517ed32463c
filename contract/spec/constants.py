"""Constants of the spec sections that the compile path needs without pydantic.

(The section modules import pydantic; resolve/bind read these on every compile.)
"""

from __future__ import annotations

from contract.env import PIN_ENV, VERIFIED_ENV

# Builtin random-init models (no download). Sizes feed the plan's memory estimate: the
# parameter count as built at the tokenizer's vocabulary (``compiler.resolve.builtin_shape`` adds a
# ``vocab_size`` override; tests/unit/test_memory_estimate.py builds each to check it, with
# its shape and ``expert_params``, the routed experts' weights, which shard differently).
BUILTIN_MODELS: dict[str, dict[str, object]] = {
    "tiny": {
        "architecture": "dense",
        "params": 197_184,
        "layers": 2,
        "hidden": 64,
        "kv_heads": 4,
        "head_dim": 16,
        "ffn_hidden": 192,
        "vocab": 704,
        "description": "2-layer dense toy model with the builtin text tokenizer (CPU tests)",
    },
    "tiny-digits": {
        "architecture": "dense",
        "params": 286_336,
        "layers": 2,
        "hidden": 128,
        "kv_heads": 4,
        "head_dim": 32,
        "ffn_hidden": 192,
        "vocab": 26,
        "description": "2-layer dense model, 26-token digit tokenizer: single-digit arithmetic (quickstart)",
    },
    "tiny-tools": {
        "architecture": "dense",
        "params": 285_312,
        "layers": 2,
        "hidden": 128,
        "kv_heads": 4,
        "head_dim": 32,
        "ffn_hidden": 192,
        "vocab": 22,
        "description": "tiny-digits' shape, 22-token tool tokenizer: arithmetic with a calculator tool",
    },
    "small": {
        "architecture": "dense",
        "params": 3_576_064,
        "layers": 4,
        "hidden": 256,
        "kv_heads": 4,
        "head_dim": 64,
        "ffn_hidden": 704,
        "vocab": 704,
        "description": "4-layer dense model with the builtin tokenizer (CPU experiments)",
    },
    "tiny-hybrid-moe": {
        "experts": 4,
        "expert_params": 49_152,
        "architecture": "hybrid_moe",
        "params": 222_400,
        "layers": 2,
        "hidden": 64,
        "kv_heads": 4,
        "head_dim": 16,
        "vocab": 704,
        "description": "2-layer hybrid MoE toy model (dense and MoE blocks)",
    },
    "tiny-moe": {
        "experts": 4,
        "expert_params": 49_152,
        "architecture": "moe",
        "params": 222_272,
        "layers": 2,
        "hidden": 64,
        "kv_heads": 4,
        "head_dim": 16,
        "vocab": 704,
        "description": "2-layer MoE toy model (4 experts, top-2)",
    },
    "olmo3-190m": {
        "architecture": "dense",
        "params": 114_365_184,
        "layers": 12,
        "hidden": 768,
        "kv_heads": 12,
        "head_dim": 64,
        "ffn_hidden": 3072,
        "vocab": 704,
        "description": "Olmo 3 architecture at 190M parameters, random init",
    },
    "olmo3-1b": {
        "architecture": "dense",
        "params": 1_076_758_528,
        "layers": 16,
        "hidden": 2048,
        "kv_heads": 16,
        "head_dim": 128,
        "ffn_hidden": 8192,
        "vocab": 704,
        "description": "Olmo 3 architecture at 1B parameters, random init",
    },
    "smallmoe": {
        "experts": 32,
        "expert_params": 339_738_624,
        "architecture": "moe",
        "params": 411_931_392,
        "active_params": 250_000_000,
        "layers": 12,
        "hidden": 768,
        "kv_heads": 12,
        "head_dim": 64,
        "vocab": 704,
        "description": "OLMoE-style small MoE (32 experts, top-4), random init",
    },
    "small-hybrid-moe": {
        "experts": 32,
        "expert_params": 339_738_624,
        "architecture": "hybrid_moe",
        "params": 411_940_608,
        "active_params": 300_000_000,
        "layers": 12,
        "hidden": 768,
        "kv_heads": 12,
        "head_dim": 64,
        "vocab": 704,
        "description": "hybrid (linear + full attention) MoE, random init",
    },
}
# `builtin:NAME?key=int&...` adjusts a builtin's shape (runtime/models/builtin.py reads it)
BUILTIN_OVERRIDE_KEYS = (
    "d_model",
    "dropless",  # MoE builtins: 0 = OLMo-core's capacity MLP, 1 (default) = dropless MLP
    "n_heads",
    "n_layers",
    "num_experts",
    "top_k",
    "vocab_size",
    "window",
)

# Names the launcher and runtime own; a spec may not set them.
RESERVED_ENV = frozenset(
    {
        "RLC_REPLICA_RANK",
        "RLC_REPLICA_COUNT",
        "RLC_LAUNCH_ID",
        "RLC_MANIFEST",
        PIN_ENV,
        VERIFIED_ENV,
        "RLC_COMPILER_CACHE_DIR",
        "RLC_COMPILER_CACHE_SHARED_ROOT",
        "BEAKER_REPLICA_RANK",
        "BEAKER_REPLICA_COUNT",
        "PYTHONPATH",
        "CUDA_VISIBLE_DEVICES",
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
    }
)
# Suffixes that mark a credential; such variables belong in launch.secrets.
CREDENTIAL_SUFFIXES = (
    "_TOKEN",
    "_API_KEY",
    "_APIKEY",
    "_SECRET",
    "_SECRET_KEY",
    "_PASSWORD",
    "_PRIVATE_KEY",
    "_ACCESS_KEY",
    "_CREDENTIALS",
    "_KEY",
    "_AUTH",
    "_PAT",
    "_PASSWD",
)
# Whole names that mark a credential.
CREDENTIAL_NAMES = frozenset(
    {"TOKEN", "PASSWORD", "SECRET", "API_KEY", "APIKEY", "AUTH", "CREDENTIALS", "KEY", "PAT"}
)

# Shared Triton cache root on GPU runs (compiler_cache.shared_root default).
DEFAULT_SHARED_ROOT = "/weka/oe-training-default/rlc-compiler-cache/tmp-7d"
