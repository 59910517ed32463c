"""HF ``olmo_hybrid`` <-> OLMo-core: GatedDeltaNet blocks beside attention blocks.

An ``olmo_hybrid`` checkpoint interleaves, per ``layer_types``:

* ``linear_attention`` layers: pre-norm blocks whose sequence mixer is OLMo-core's
  ``GatedDeltaNet`` (flash-linear-attention kernels on GPU, ``runtime.models.gdn_cpu``
  elsewhere);
* ``full_attention`` layers: post-norm (reordered-norm) blocks with full-width QK norm, as
  in OLMo 3.

Names go through OLMo-core's own hybrid key maps (``HYBRID_*_KEY_MAP``, which OLMo-core
uses for its HF export); the import reads them inverted. Two differences between those
maps and what transformers' ``OlmoHybridForCausalLM`` loads are bridged here:

* the gated output norm and the output projection are ``linear_attn.o_norm`` and
  ``linear_attn.o_proj`` in transformers, ``linear_attn.norm`` and ``linear_attn.out_proj``
  in OLMo-core's map (transformers renames neither, so a file with OLMo-core's names loads
  with both freshly initialised);
* transformers fuses the three short convolutions into ``linear_attn.conv1d`` and saves
  the legacy names (``q/k/v_conv1d``, ``attention_layer_norm``,
  ``feedforward_layer_norm``); both spellings are read.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch
from olmo_core.nn.transformer import Transformer, TransformerBlockType, TransformerConfig

from .hf_common import UnsupportedHFModel, export_state, write_generation_files
from .tokenizer import Tokenizer
from .weights import save_safetensors

GDN, ATTN = "linear_attention", "full_attention"
#: transformers' legacy (saved) names -> the names its model uses (its conversion mapping)
_HF_LEGACY_RENAMES = {
    ".attention_layer_norm.": ".input_layernorm.",
    ".feedforward_layer_norm.": ".post_attention_layernorm.",
}
#: transformers' names -> OLMo-core's key-map names, where they differ
_HF_TO_KEY_MAP_NAMES = {
    "linear_attn.o_norm.weight": "linear_attn.norm.weight",
    "linear_attn.o_proj.weight": "linear_attn.out_proj.weight",
}
#: the output norm of the GatedDeltaNet: transformers hard-codes fla's default
GDN_NORM_EPS = 1e-5


class UnsupportedHybrid(ValueError):
    """An ``olmo_hybrid`` option OLMo-core's GatedDeltaNet blocks cannot reproduce."""


def _layer_types(cfg: dict[str, Any]) -> list[str]:
    n = int(cfg["num_hidden_layers"])
    types = cfg.get("layer_types")
    if types is None:  # transformers' default: every 4th layer attends
        types = [ATTN if i % 4 == 3 else GDN for i in range(n)]
        if ATTN not in types:
            types[-1] = ATTN
    types = [str(t) for t in types]
    if len(types) != n or set(types) - {GDN, ATTN}:
        raise UnsupportedHybrid(
            f"layer_types must list {n} entries of {GDN!r} / {ATTN!r}, got {types}"
        )
    return types


def _rope_theta(cfg: dict[str, Any]) -> float | None:
    """RoPE theta of the attention layers; None for NoPE (no ``rope_parameters``)."""
    params = cfg.get("rope_parameters")
    if params is None:
        theta = cfg.get("rope_theta")
        return None if theta is None else float(theta)
    if params.get("rope_type", "default") != "default":
        raise UnsupportedHybrid("RoPE scaling in olmo_hybrid checkpoints is not supported yet")
    theta = params.get("rope_theta")
    return None if theta is None else float(theta)


def check_hybrid_config(cfg: dict[str, Any]) -> list[str]:
    """The layer types of a valid config, or ``UnsupportedHybrid`` with the reason."""
    try:
        types = _layer_types(cfg)
        _rope_theta(cfg)
    except UnsupportedHybrid as exc:
        raise UnsupportedHFModel(str(exc)) from None
    from olmo_core.nn.attention.flash_linear_attn_api import has_fla

    if not has_fla():
        raise UnsupportedHFModel(
            "olmo_hybrid's GatedDeltaNet layers need flash-linear-attention and triton "
            "(pip install 'rlc[runtime]')"
        )
    key_dim = cfg.get("linear_key_head_dim")
    if key_dim is not None and int(cfg.get("linear_value_head_dim") or 2 * key_dim) % int(key_dim):
        raise UnsupportedHFModel("linear_value_head_dim must be a multiple of the key head dim")
    return types


def _gdn_dims(cfg: dict[str, Any]) -> tuple[int, int, int, int]:
    """(key heads, value heads, key head dim, value head dim) with transformers' defaults."""
    heads = int(cfg["num_attention_heads"])
    k_heads = int(cfg.get("linear_num_key_heads") or heads)
    v_heads = int(cfg.get("linear_num_value_heads") or heads)
    k_dim = int(cfg.get("linear_key_head_dim") or int(0.75 * int(cfg["hidden_size"]) / k_heads))
    v_dim = int(cfg.get("linear_value_head_dim") or 2 * k_dim)
    return k_heads, v_heads, k_dim, v_dim


def hybrid_config_to_olmo_core(
    cfg: dict[str, Any], *, attn_backend: str = "torch"
) -> TransformerConfig:
    """The OLMo-core config of an ``olmo_hybrid`` ``config.json`` dict."""
    from olmo_core.nn.attention import AttentionBackendName
    from olmo_core.nn.attention.recurrent import GatedDeltaNetConfig
    from olmo_core.nn.feed_forward import FeedForwardConfig

    types = check_hybrid_config(cfg)
    theta = _rope_theta(cfg)
    config = TransformerConfig.llama_like(
        d_model=int(cfg["hidden_size"]),
        vocab_size=int(cfg["vocab_size"]),
        n_layers=len(types),
        n_heads=int(cfg["num_attention_heads"]),
        n_kv_heads=cfg.get("num_key_value_heads"),
        qk_norm=True,
        rope_theta=theta or 10_000,  # type: ignore[arg-type]  # a float theta works as well
        layer_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        attn_backend=AttentionBackendName(attn_backend),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        block_name=TransformerBlockType.reordered_norm,
        feed_forward=FeedForwardConfig(hidden_size=int(cfg["intermediate_size"]), bias=False),
    )
    assert not isinstance(config.block, dict)
    attn_block = config.block
    if theta is None:
        nope: Any = dataclasses.replace(attn_block.sequence_mixer)
        nope.rope = None  # NoPE: transformers skips RoPE without rope_parameters
        attn_block = dataclasses.replace(attn_block, sequence_mixer=nope)
    k_heads, v_heads, k_dim, v_dim = _gdn_dims(cfg)
    gdn_block = dataclasses.replace(
        attn_block,
        name=TransformerBlockType.default,
        sequence_mixer=GatedDeltaNetConfig(
            n_heads=k_heads,
            n_v_heads=v_heads,
            head_dim=k_dim,
            expand_v=v_dim / k_dim,
            allow_neg_eigval=bool(cfg.get("linear_allow_neg_eigval", True)),
            conv_size=int(cfg.get("linear_conv_kernel_dim", 4)),
            conv_bias=False,
            norm_eps=GDN_NORM_EPS,
        ),
    )
    config.block = {GDN: gdn_block, ATTN: attn_block}
    config.block_pattern = types
    return config


def _key_maps() -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    from olmo_core.nn.hf.convert import (
        HYBRID_ATTN_LAYER_KEY_MAP,
        HYBRID_GDN_LAYER_KEY_MAP,
        HYBRID_SHARED_KEY_MAP,
    )

    return HYBRID_SHARED_KEY_MAP, HYBRID_GDN_LAYER_KEY_MAP, HYBRID_ATTN_LAYER_KEY_MAP


def _swap_suffix(name: str, table: dict[str, str]) -> str:
    for old, new in table.items():
        if name.endswith("." + old):
            return name.removesuffix(old) + new
    return name


def _normalise_hf_names(
    hf_state: dict[str, torch.Tensor], cfg: dict[str, Any]
) -> dict[str, torch.Tensor]:
    """Any spelling transformers reads -> OLMo-core's key-map names (split convolutions,
    ``input_layernorm``/``post_attention_layernorm``, ``linear_attn.norm``/``out_proj``).

    The short convolutions are read as transformers reads them: concatenated q|k|v (its
    ``save_pretrained`` splits the fused weight into equal thirds, which are not the q/k/v
    widths when key and value dims differ), then split at the real widths."""
    k_heads, v_heads, k_dim, v_dim = _gdn_dims(cfg)
    out: dict[str, torch.Tensor] = {}
    convs: dict[str, dict[str, torch.Tensor]] = {}
    for name, value in hf_state.items():
        for old, new in _HF_LEGACY_RENAMES.items():
            name = name.replace(old, new)
        name = _swap_suffix(name, _HF_TO_KEY_MAP_NAMES)
        prefix, _, leaf = name.rpartition("linear_attn.")
        if leaf in ("conv1d.weight", "q_conv1d.weight", "k_conv1d.weight", "v_conv1d.weight"):
            convs.setdefault(prefix + "linear_attn.", {})[leaf[0]] = value
            continue
        out[name] = value
    for prefix, parts in convs.items():
        fused = parts["c"] if "c" in parts else torch.cat([parts[p] for p in "qkv"])
        q, k, v = torch.split(fused, [k_heads * k_dim, k_heads * k_dim, v_heads * v_dim])
        out.update({f"{prefix}q_conv1d.weight": q, f"{prefix}k_conv1d.weight": k})
        out[f"{prefix}v_conv1d.weight"] = v
    return out


def hybrid_state_from_hf(
    hf_state: dict[str, torch.Tensor], cfg: dict[str, Any]
) -> dict[str, torch.Tensor]:
    """HF ``olmo_hybrid`` weights -> the OLMo-core state dict (OLMo-core's maps, inverted)."""
    shared, gdn, attn = _key_maps()
    types = _layer_types(cfg)
    inverse = {hf: ours for ours, hf in shared.items()}
    for i, kind in enumerate(types):
        table = gdn if kind == GDN else attn
        inverse.update(
            {f"model.layers.{i}.{hf}": f"blocks.{i}.{ours}" for ours, hf in table.items()}
        )
    state: dict[str, torch.Tensor] = {}
    unknown = []
    for name, value in _normalise_hf_names(hf_state, cfg).items():
        if name in inverse:
            state[inverse[name]] = value
        else:
            unknown.append(name)
    if unknown:
        raise UnsupportedHFModel(f"olmo_hybrid weights with no OLMo-core name: {unknown[:5]}")
    return state


def is_hybrid(model: Transformer) -> bool:
    from .gdn_cpu import has_gated_delta_net

    return has_gated_delta_net(model)


def hybrid_hf_config(model: Transformer, max_position_embeddings: int) -> dict[str, Any]:
    """``config.json`` of the HF export: OLMo-core's hybrid config builder."""
    from olmo_core.nn.hf import get_hybrid_hf_config, get_hybrid_layer_types

    types = get_hybrid_layer_types(model)
    block: Any
    for idx, block in model.blocks.items():
        kind = type(block).__name__
        want = "TransformerBlock" if types[int(idx)] == GDN else "ReorderedNormTransformerBlock"
        if kind != want:
            raise UnsupportedHFModel(
                f"olmo_hybrid has {want} for {types[int(idx)]} layers; layer {idx} is {kind}"
            )
        if types[int(idx)] == GDN and block.attention.o_norm.eps != GDN_NORM_EPS:
            raise UnsupportedHFModel(f"olmo_hybrid's GatedDeltaNet norm eps is {GDN_NORM_EPS}")
    return get_hybrid_hf_config(model, types, max_seq_len=max_position_embeddings)


def hybrid_state_to_hf(
    model: Transformer, state: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    from olmo_core.nn.hf import convert_hybrid_state_to_hf, get_hybrid_layer_types

    hf = convert_hybrid_state_to_hf(state, get_hybrid_layer_types(model))
    if model.tie_word_embeddings:
        hf.pop("lm_head.weight", None)
    to_hf = {ours: theirs for theirs, ours in _HF_TO_KEY_MAP_NAMES.items()}
    return {_swap_suffix(k, to_hf): v for k, v in hf.items()}


def export_hybrid_hf(
    model: Transformer,
    tokenizer: Tokenizer,
    out_dir: str | Path,
    *,
    state_dict: dict[str, torch.Tensor] | None = None,
    dtype: torch.dtype | None = None,
    max_position_embeddings: int = 65536,
) -> Path:
    """Write ``OlmoHybridForCausalLM``'s checkpoint (safetensors, config, tokenizer)."""
    cfg = hybrid_hf_config(model, max_position_embeddings)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = export_state(model, state_dict, dtype)
    hf_state = hybrid_state_to_hf(model, state)
    cfg["eos_token_id"] = tokenizer.eos_token_id
    cfg["pad_token_id"] = tokenizer.pad_token_id
    cfg["dtype"] = str(dtype or next(iter(state.values())).dtype).removeprefix("torch.")
    save_safetensors(hf_state, out)
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    write_generation_files(out, tokenizer)
    return out
