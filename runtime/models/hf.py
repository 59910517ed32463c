"""Hugging Face import/export for OLMo 2/3 checkpoints (offline, via OLMo-core's converters).

Export writes ``Olmo3ForCausalLM`` when any layer uses sliding-window attention (our OLMo 3
shaped builtins) and ``Olmo2ForCausalLM`` otherwise: both are post-norm ("reordered norm")
blocks with full-width QK RMSNorm, which is exactly OLMo-core's ``reordered_norm`` block.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from olmo_core.nn.attention import AttentionBackendName, SlidingWindowAttentionConfig
from olmo_core.nn.feed_forward import FeedForwardConfig
from olmo_core.nn.transformer import Transformer, TransformerBlockType, TransformerConfig

from .tokenizer import Tokenizer
from .weights import load_safetensors, save_safetensors

SUPPORTED_HF_TYPES = ("olmo2", "olmo3")


class UnsupportedHFModel(ValueError):
    """The HF checkpoint uses an architecture or option we cannot map to OLMo-core."""


def _rope_theta(cfg: dict[str, Any]) -> float:
    if "rope_theta" in cfg and cfg["rope_theta"] is not None:
        return float(cfg["rope_theta"])
    params = cfg.get("rope_parameters") or {}
    if "full_attention" in params:
        params = params["full_attention"]
    if params.get("rope_type", "default") != "default" or cfg.get("rope_scaling"):
        raise UnsupportedHFModel("RoPE scaling in HF checkpoints is not supported yet")
    return float(params.get("rope_theta", 10_000.0))


def hf_config_to_olmo_core(
    cfg: dict[str, Any], *, attn_backend: str = "torch"
) -> tuple[str, TransformerConfig]:
    """Map an HF ``config.json`` dict (olmo2/olmo3) to ``(family, TransformerConfig)``."""
    model_type = cfg.get("model_type")
    if model_type not in SUPPORTED_HF_TYPES:
        raise UnsupportedHFModel(
            f"HF model_type {model_type!r} is not supported; supported: {SUPPORTED_HF_TYPES}"
        )
    if cfg.get("attention_bias"):
        raise UnsupportedHFModel("attention_bias=true is not supported")
    n_layers = int(cfg["num_hidden_layers"])
    sliding: SlidingWindowAttentionConfig | None = None
    if model_type == "olmo3" and cfg.get("sliding_window"):
        layer_types = cfg.get("layer_types") or ["full_attention"] * n_layers
        window = int(cfg["sliding_window"])
        pattern = [window if t == "sliding_attention" else -1 for t in layer_types]
        if any(p != -1 for p in pattern):
            sliding = SlidingWindowAttentionConfig(
                pattern=pattern,
                force_full_attention_on_first_layer=False,
                force_full_attention_on_last_layer=False,
            )
    config = TransformerConfig.llama_like(
        d_model=int(cfg["hidden_size"]),
        vocab_size=int(cfg["vocab_size"]),
        n_layers=n_layers,
        n_heads=int(cfg["num_attention_heads"]),
        n_kv_heads=cfg.get("num_key_value_heads"),
        block_name=TransformerBlockType.reordered_norm,
        qk_norm=True,
        rope_theta=_rope_theta(cfg),  # type: ignore[arg-type]
        layer_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        feed_forward=FeedForwardConfig(hidden_size=int(cfg["intermediate_size"]), bias=False),
        sliding_window=sliding,
        attn_backend=AttentionBackendName(attn_backend),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
    )
    return "dense", config


def load_hf_state(path: Path, config: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Read HF safetensors and convert the names/layouts to OLMo-core's."""
    from olmo_core.nn.hf import convert_state_from_hf
    from transformers import AutoConfig

    hf_state = load_safetensors(path)
    hf_config = AutoConfig.for_model(**config)
    return convert_state_from_hf(hf_config, hf_state, model_type=config["model_type"])


def _unwrap(model_or_loaded: Any) -> Transformer:
    model = getattr(model_or_loaded, "model", model_or_loaded)
    if not isinstance(model, Transformer):
        raise TypeError(f"expected an OLMo-core Transformer, got {type(model).__name__}")
    return model


def export_hf(
    model_or_loaded: Any,
    tokenizer: Tokenizer,
    out_dir: str | Path,
    *,
    state_dict: dict[str, torch.Tensor] | None = None,
    dtype: torch.dtype | None = None,
    max_position_embeddings: int = 65536,
) -> Path:
    """Write an HF checkpoint (safetensors, config, tokenizer, generation config).

    ``state_dict`` overrides the model's own weights (e.g. a gathered FSDP state).
    """
    from olmo_core.nn.hf import convert_state_to_hf, get_hf_config

    model = _unwrap(model_or_loaded)
    from olmo_core.nn.transformer import MoETransformer

    if isinstance(model, MoETransformer):
        raise UnsupportedHFModel(
            "HF export of MoE models is not supported (no transformers architecture matches "
            "OLMo-core's shared-expert / hybrid MoE blocks); use the native checkpoint instead"
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    hf_config = get_hf_config(model)
    hf_config.max_position_embeddings = max_position_embeddings
    hf_config.eos_token_id = tokenizer.eos_token_id
    hf_config.pad_token_id = tokenizer.pad_token_id
    hf_config.bos_token_id = None
    state = {k: v.detach().cpu() for k, v in (state_dict or model.state_dict()).items()}
    if dtype is not None:
        state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}
    hf_state = convert_state_to_hf(hf_config, state)
    if hf_config.tie_word_embeddings:
        hf_state.pop("lm_head.weight", None)
    hf_config.architectures = [type(hf_config).__name__.replace("Config", "ForCausalLM")]
    torch_dtype = dtype or next(iter(state.values())).dtype
    hf_config.dtype = str(torch_dtype).removeprefix("torch.")
    save_safetensors(hf_state, out)
    hf_config.save_pretrained(str(out))
    gen = {
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "do_sample": True,
        "temperature": 1.0,
    }
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    tokenizer.save(out)
    return out
