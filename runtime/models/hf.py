"""Hugging Face import/export for the OLMo families, through OLMo-core's converters.

One table (``HF_FAMILIES``) says which HF ``model_type`` maps to which OLMo-core block:

* ``olmo2`` / ``olmo3``: dense reordered-norm blocks with full-width QK norm (``olmo3`` adds
  the sliding-window layer pattern);
* ``flex_olmo``: the same block with a routed MoE instead of the MLP;
* ``olmoe``: pre-norm MoE blocks (``input_layernorm`` before attention,
  ``post_attention_layernorm`` before the experts) with full-width QK norm;
* ``olmo_hybrid``: GatedDeltaNet (linear attention) blocks, pre-norm, beside post-norm
  attention blocks, in the order of ``layer_types`` (``runtime.models.olmo_hybrid``).

State dicts go through ``olmo_core.nn.hf.convert_state_{from,to}_hf``. OLMo-core's tables
have no ``olmoe`` entry, and its generic norm mapping is OLMo 2's post-norm one, so the
pre-norm names are registered once in OLMo-core's model-type tables (their documented
extension point), exactly as OLMo-core does for ``llama``. The imported MoE uses a capacity
factor of ``num_experts / top_k``: no token is ever dropped, so it computes what HF computes.

Refused, with the reason (the compiler refuses the same sources before anything starts):
shared-expert MoE and OLMo-core's parallel dense+MoE ("hybrid MoE") blocks on export (no
transformers architecture has them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from olmo_core.nn.attention import AttentionBackendName, SlidingWindowAttentionConfig
from olmo_core.nn.feed_forward import FeedForwardConfig
from olmo_core.nn.moe import MoEConfig, MoERouterConfig, MoEType
from olmo_core.nn.transformer import (
    Transformer,
    TransformerBlockType,
    TransformerConfig,
    TransformerType,
)

from .hf_common import UnsupportedHFModel, export_state, write_generation_files
from .tokenizer import Tokenizer
from .weights import load_safetensors, save_safetensors

__all__ = ["UnsupportedHFModel", "export_hf", "hf_config_to_olmo_core", "load_hf_state"]

#: HF ``model_type`` -> our family. Keep in step with ``compiler/spec/model_source.py``.
HF_FAMILIES: dict[str, str] = {
    "olmo2": "dense",
    "olmo3": "dense",
    "flex_olmo": "moe",
    "olmoe": "moe",
    "olmo_hybrid": "dense",
}
SUPPORTED_HF_TYPES = tuple(HF_FAMILIES)
REFUSED_HF_TYPES: dict[str, str] = {}
# OLMoE default router settings (HF's OlmoeConfig has no z-loss field).
_MOE_Z_LOSS = 0.001


def _register_olmoe_mappings() -> None:
    """Teach OLMo-core's converter OLMoE's pre-norm layer-norm names (idempotent)."""
    from olmo_core.nn.conversion.state_mapping import StateMappingTemplate, StateType
    from olmo_core.nn.hf import convert as C

    layer = C.LAYER
    attn_norm, ffn_norm = f"blocks.{layer}.attention_norm", f"blocks.{layer}.feed_forward_norm"
    pre, post = (
        f"model.layers.{layer}.input_layernorm",
        f"model.layers.{layer}.post_attention_layernorm",
    )
    C.MODEL_TYPE_SPECIFIC_HF_TO_OLMO_CORE_WEIGHT_MAPPINGS.setdefault(
        "olmoe", {f"{post}.weight": f"{ffn_norm}.weight"}
    )
    C.MODEL_TYPE_SPECIFIC_HF_TO_OLMO_CORE_MODULE_MAPPINGS.setdefault("olmoe", {post: ffn_norm})
    C.MODEL_TYPE_SPECIFIC_OLMO_CORE_TO_HF_TEMPLATE_MAPPINGS.setdefault(
        "olmoe",
        {
            f"{attn_norm}.weight": StateMappingTemplate(
                f"{attn_norm}.weight", f"{pre}.weight", state_type=StateType.weight
            ),
            f"{ffn_norm}.weight": StateMappingTemplate(
                f"{ffn_norm}.weight", f"{post}.weight", state_type=StateType.weight
            ),
        },
    )


def _rope_theta(cfg: dict[str, Any]) -> float:
    if "rope_theta" in cfg and cfg["rope_theta"] is not None:
        return float(cfg["rope_theta"])
    params = cfg.get("rope_parameters") or {}
    if "full_attention" in params:
        params = params["full_attention"]
    if params.get("rope_type", "default") != "default" or cfg.get("rope_scaling"):
        raise UnsupportedHFModel("RoPE scaling in HF checkpoints is not supported yet")
    return float(params.get("rope_theta", 10_000.0))


def _sliding(cfg: dict[str, Any], n_layers: int) -> SlidingWindowAttentionConfig | None:
    if cfg.get("model_type") != "olmo3" or not cfg.get("sliding_window"):
        return None
    layer_types = cfg.get("layer_types") or ["full_attention"] * n_layers
    window = int(cfg["sliding_window"])
    pattern = [window if t == "sliding_attention" else -1 for t in layer_types]
    if all(p == -1 for p in pattern):
        return None
    return SlidingWindowAttentionConfig(
        pattern=pattern,
        force_full_attention_on_first_layer=False,
        force_full_attention_on_last_layer=False,
    )


def _moe(cfg: dict[str, Any]) -> MoEConfig:
    experts, top_k = int(cfg["num_experts"]), int(cfg["num_experts_per_tok"])
    return MoEConfig(
        name=MoEType.default,
        num_experts=experts,
        hidden_size=int(cfg["intermediate_size"]),
        capacity_factor=experts / top_k,  # never drops a token: same outputs as HF
        router=MoERouterConfig(
            top_k=top_k, normalize_expert_weights=1.0 if cfg.get("norm_topk_prob") else None
        ),
        shared_mlp=None,
        lb_loss_weight=float(cfg.get("router_aux_loss_coef") or 0.01),
        z_loss_weight=_MOE_Z_LOSS,
    )


def check_hf_config(cfg: dict[str, Any]) -> str:
    """The family of an HF ``config.json`` dict, or ``UnsupportedHFModel`` with the reason."""
    model_type = cfg.get("model_type")
    if model_type in REFUSED_HF_TYPES:
        raise UnsupportedHFModel(REFUSED_HF_TYPES[str(model_type)])
    if model_type not in HF_FAMILIES:
        raise UnsupportedHFModel(
            f"HF model_type {model_type!r} is not supported; supported: {SUPPORTED_HF_TYPES}"
        )
    if cfg.get("attention_bias"):
        raise UnsupportedHFModel("attention_bias=true is not supported")
    if cfg.get("clip_qkv") is not None:
        raise UnsupportedHFModel("clip_qkv is not supported")
    if model_type == "olmo_hybrid":
        from .olmo_hybrid import check_hybrid_config

        check_hybrid_config(cfg)
    else:
        _rope_theta(cfg)
    return HF_FAMILIES[str(model_type)]


def hf_config_to_olmo_core(
    cfg: dict[str, Any], *, attn_backend: str = "torch"
) -> tuple[str, TransformerConfig]:
    """Map an HF ``config.json`` dict to ``(family, TransformerConfig)``."""
    family = check_hf_config(cfg)
    model_type = cfg["model_type"]
    if model_type == "olmo_hybrid":
        from .olmo_hybrid import hybrid_config_to_olmo_core

        return family, hybrid_config_to_olmo_core(cfg, attn_backend=attn_backend)
    n_layers = int(cfg["num_hidden_layers"])
    common: dict[str, Any] = dict(
        d_model=int(cfg["hidden_size"]),
        vocab_size=int(cfg["vocab_size"]),
        n_layers=n_layers,
        n_heads=int(cfg["num_attention_heads"]),
        n_kv_heads=cfg.get("num_key_value_heads"),
        qk_norm=True,
        rope_theta=_rope_theta(cfg),
        layer_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        attn_backend=AttentionBackendName(attn_backend),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
    )
    if family == "dense":
        config = TransformerConfig.llama_like(
            block_name=TransformerBlockType.reordered_norm,
            feed_forward=FeedForwardConfig(hidden_size=int(cfg["intermediate_size"]), bias=False),
            sliding_window=_sliding(cfg, n_layers),
            **common,
        )
    else:
        block = (
            TransformerBlockType.moe
            if model_type == "olmoe"
            else TransformerBlockType.moe_reordered_norm
        )
        config = TransformerConfig.llama_like(
            name=TransformerType.moe, block_name=block, feed_forward_moe=_moe(cfg), **common
        )
    return family, config


def load_hf_state(path: Path, config: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Read HF safetensors and convert the names/layouts to OLMo-core's."""
    from olmo_core.nn.hf import convert_state_from_hf
    from transformers import AutoConfig

    _register_olmoe_mappings()
    hf_state = load_safetensors(path)
    if config.get("model_type") == "olmo_hybrid":
        from .olmo_hybrid import hybrid_state_from_hf

        return hybrid_state_from_hf(hf_state, config)
    hf_config = AutoConfig.for_model(**config)
    return convert_state_from_hf(hf_config, hf_state, model_type=config["model_type"])


def _unwrap(model_or_loaded: Any) -> Transformer:
    model = getattr(model_or_loaded, "model", model_or_loaded)
    if not isinstance(model, Transformer):
        raise TypeError(f"expected an OLMo-core Transformer, got {type(model).__name__}")
    return model


def _olmoe_config(model: Any) -> Any:
    """An ``OlmoeConfig`` for a pre-norm MoE model (OLMo-core builds none for this block)."""
    from transformers import OlmoeConfig

    block = next(iter(model.blocks.values()))
    attn, moe = block.attention, block.feed_forward_moe
    return OlmoeConfig(
        vocab_size=model.vocab_size,
        hidden_size=model.d_model,
        intermediate_size=moe.experts.mlp.hidden_size,
        num_hidden_layers=model.n_layers,
        num_attention_heads=attn.n_heads,
        num_key_value_heads=attn.n_kv_heads,
        rope_parameters={"rope_type": "default", "rope_theta": float(attn.rope.theta)},
        rms_norm_eps=block.feed_forward_norm.eps,
        num_experts=moe.router.num_experts,
        num_experts_per_tok=moe.router.top_k,
        norm_topk_prob=moe.router.normalize_expert_weights is not None,
        router_aux_loss_coef=0.01,
        tie_word_embeddings=model.tie_word_embeddings,
        pad_token_id=None,
        bos_token_id=None,
        eos_token_id=None,
    )


def hf_config_for(model: Transformer) -> Any:
    """The transformers config that reproduces ``model``, or ``UnsupportedHFModel``."""
    from olmo_core.nn.hf import get_hf_config
    from olmo_core.nn.transformer import MoETransformer
    from olmo_core.nn.transformer import block as B

    blocks = list(model.blocks.values())
    kinds = {type(b) for b in blocks}
    if kinds & {B.MoEHybridTransformerBlock, B.MoEHybridReorderedNormTransformerBlock}:
        raise UnsupportedHFModel(
            "no transformers architecture has OLMo-core's parallel dense+MoE (hybrid MoE) "
            "blocks; the native checkpoint is the export of this model"
        )
    if not isinstance(model, MoETransformer):
        return get_hf_config(model)
    if any(b.feed_forward_moe.shared_mlp is not None for b in blocks):
        raise UnsupportedHFModel(
            "no transformers architecture has OLMo-core's shared-expert MoE (olmoe and "
            "flex_olmo have no shared MLP); the native checkpoint is the export of this model"
        )
    routers = [b.feed_forward_moe.router for b in blocks]
    if any(r.normalize_expert_weights not in (None, 1.0) for r in routers):
        raise UnsupportedHFModel("HF MoE routers normalise top-k weights with the L1 norm only")
    if kinds == {B.MoETransformerBlock}:
        return _olmoe_config(model)
    cfg = get_hf_config(model)  # FlexOlmo for reordered-norm MoE blocks
    cfg.norm_topk_prob = routers[0].normalize_expert_weights is not None
    return cfg


def _dropless_to_default_layout(model: Transformer, state: dict[str, torch.Tensor]) -> None:
    """OLMo-core's converter assumes the capacity MoE's ``w1``/``w3`` layout (as its own
    checkpoint converter does, reshape dropless experts first)."""
    from olmo_core.nn.moe.mlp import DroplessMoEMLP

    for name, module in model.named_modules():
        if isinstance(module, DroplessMoEMLP):
            e, h = module.num_experts, module.hidden_size
            for w in ("w1", "w3"):
                key = f"{name}.{w}"
                state[key] = state[key].reshape(e, h, -1).permute(0, 2, 1).reshape(-1, h)


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
    from olmo_core.nn.hf import convert_state_to_hf

    model = _unwrap(model_or_loaded)
    from .olmo_hybrid import export_hybrid_hf, is_hybrid

    if is_hybrid(model):
        return export_hybrid_hf(
            model, tokenizer, out_dir, state_dict=state_dict, dtype=dtype,
            max_position_embeddings=max_position_embeddings,
        )  # fmt: skip
    hf_config = hf_config_for(model)
    _register_olmoe_mappings()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    hf_config.max_position_embeddings = max_position_embeddings
    hf_config.eos_token_id = tokenizer.eos_token_id
    hf_config.pad_token_id = tokenizer.pad_token_id
    hf_config.bos_token_id = None
    state = export_state(model, state_dict, dtype)
    _dropless_to_default_layout(model, state)
    hf_state = convert_state_to_hf(hf_config, state)
    if hf_config.tie_word_embeddings:
        hf_state.pop("lm_head.weight", None)
    hf_config.architectures = [type(hf_config).__name__.replace("Config", "ForCausalLM")]
    torch_dtype = dtype or next(iter(state.values())).dtype
    hf_config.dtype = str(torch_dtype).removeprefix("torch.")
    save_safetensors(hf_state, out)
    hf_config.save_pretrained(str(out))
    write_generation_files(out, tokenizer)
    return out
