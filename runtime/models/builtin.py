"""Builtin model configs (``builtin:NAME``): OLMo-core shapes that need no download.

Every dense builtin is OLMo 3 shaped (reordered norm, QK-norm, 3:1 sliding window pattern)
with the SDPA ("torch") attention backend so it runs without flash-attn. Names may carry
overrides, e.g. ``builtin:olmo3-1b?vocab_size=100352`` for benchmark-realistic LM heads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from olmo_core.nn.attention import AttentionBackendName, SlidingWindowAttentionConfig
from olmo_core.nn.feed_forward import FeedForwardConfig
from olmo_core.nn.moe import MoEConfig, MoERouterConfig, MoEType
from olmo_core.nn.transformer import TransformerBlockType, TransformerConfig, TransformerType

from contract.spec.constants import BUILTIN_OVERRIDE_KEYS

TORCH = AttentionBackendName.torch


def _swa(window: int) -> SlidingWindowAttentionConfig:
    return SlidingWindowAttentionConfig(
        pattern=[window, window, window, -1],
        force_full_attention_on_first_layer=False,
        force_full_attention_on_last_layer=True,
    )


def _olmo3_like(d_model: int, n_layers: int, n_heads: int, hidden: int, window: int):
    def build(vocab_size: int, **kw: Any) -> TransformerConfig:
        return TransformerConfig.llama_like(
            d_model=kw.pop("d_model", d_model),
            vocab_size=vocab_size,
            n_layers=kw.pop("n_layers", n_layers),
            n_heads=kw.pop("n_heads", n_heads),
            block_name=TransformerBlockType.reordered_norm,
            qk_norm=True,
            rope_theta=500_000,
            layer_norm_eps=1e-6,
            feed_forward=FeedForwardConfig(hidden_size=kw.pop("hidden_size", hidden), bias=False),
            sliding_window=_swa(kw.pop("window", window)),
            attn_backend=TORCH,
            **kw,
        )

    return build


def _moe_like(
    d_model: int,
    n_layers: int,
    n_heads: int,
    experts: int,
    top_k: int,
    hybrid: bool,
) -> Callable[..., TransformerConfig]:
    """Dropless experts, as the engines: OLMo-core's dropless MLP, whose grouped matrix
    product runs on ``torch.nn.functional.grouped_mm`` (``runtime.models.moe_grouped``).
    ``dropless=0`` builds OLMo-core's capacity MLP instead, with capacity E/top_k so that it
    drops no token either (the same outputs, padded batched matrix products)."""

    def build(vocab_size: int, **kw: Any) -> TransformerConfig:
        dm = kw.pop("d_model", d_model)
        n_exp, k = kw.pop("num_experts", experts), kw.pop("top_k", top_k)
        dropless = bool(kw.pop("dropless", 1))
        moe = MoEConfig(
            name=MoEType.dropless if dropless else MoEType.default,
            num_experts=n_exp,
            hidden_size=int(0.5 * dm),
            capacity_factor=None if dropless else n_exp / k,
            router=MoERouterConfig(top_k=k),
            shared_mlp=None if hybrid else FeedForwardConfig(hidden_size=dm * 2, bias=False),
            lb_loss_weight=0.01,
            z_loss_weight=0.001,
        )
        return TransformerConfig.llama_like(
            d_model=dm,
            vocab_size=vocab_size,
            n_layers=kw.pop("n_layers", n_layers),
            n_heads=kw.pop("n_heads", n_heads),
            name=TransformerType.moe,
            block_name=TransformerBlockType.moe_hybrid_reordered_norm
            if hybrid
            else TransformerBlockType.moe_reordered_norm,
            qk_norm=True,
            rope_theta=500_000,
            layer_norm_eps=1e-6,
            feed_forward=FeedForwardConfig(hidden_size=dm * 2, bias=False) if hybrid else None,
            feed_forward_moe=moe,
            attn_backend=TORCH,
            **kw,
        )

    return build


def _olmo_core_named(fn: Callable[..., TransformerConfig]) -> Callable[..., TransformerConfig]:
    def build(vocab_size: int, **kw: Any) -> TransformerConfig:
        return fn(vocab_size=vocab_size, attn_backend=TORCH, **kw)

    return build


BUILTINS: dict[str, tuple[str, Callable[..., TransformerConfig]]] = {
    "tiny": ("dense", _olmo3_like(64, 2, 4, 192, 16)),
    # the quickstart's model, over the 26-token digit tokenizer; twice tiny's width: in one
    # seeded comparison it reached a reward of 0.5 in about a third of the GRPO steps of d 64
    "tiny-digits": ("dense", _olmo3_like(128, 2, 4, 192, 16)),
    # tiny-digits' shape over the 22-token tool tokenizer (multi-turn tool-use runs)
    "tiny-tools": ("dense", _olmo3_like(128, 2, 4, 192, 16)),
    "small": ("dense", _olmo3_like(256, 4, 4, 704, 64)),
    "olmo3-190m": ("dense", _olmo_core_named(TransformerConfig.olmo3_190M)),
    "olmo3-1b": ("dense", _olmo_core_named(TransformerConfig.olmo3_1B)),
    "tiny-moe": ("moe", _moe_like(64, 2, 4, 4, 2, hybrid=False)),
    "tiny-hybrid-moe": ("hybrid_moe", _moe_like(64, 2, 4, 4, 2, hybrid=True)),
    # no dropped tokens: the engines are dropless, and a capacity-factor trainer that drops
    # a token's experts scores another sub-network than the one that sampled it (the
    # train/inference log-prob gap of gpu-moe.toml, 0.11 on one H200, came from this)
    "smallmoe": ("moe", _moe_like(768, 12, 12, 32, 4, hybrid=False)),
    "small-hybrid-moe": ("hybrid_moe", _moe_like(768, 12, 12, 32, 4, hybrid=True)),
}

_INT_OVERRIDES = frozenset(BUILTIN_OVERRIDE_KEYS)


def parse_builtin(name: str) -> tuple[str, dict[str, int]]:
    """``"tiny?n_layers=4"`` -> ``("tiny", {"n_layers": 4})`` with clear errors."""
    base, _, query = name.partition("?")
    if base not in BUILTINS:
        known = ", ".join(f"builtin:{k}" for k in BUILTINS)
        raise ValueError(f"unknown builtin model {base!r}; known: {known}")
    overrides: dict[str, int] = {}
    for part in filter(None, query.split("&")):
        key, sep, value = part.partition("=")
        if not sep or key not in _INT_OVERRIDES or not value.isdigit():
            raise ValueError(
                f"bad builtin override {part!r}; use key=int with key in {sorted(_INT_OVERRIDES)}"
            )
        overrides[key] = int(value)
    return base, overrides


def builtin_config(name: str, tokenizer_vocab: int, seed: int) -> tuple[str, TransformerConfig]:
    """Return ``(family, TransformerConfig)`` for a builtin name (with optional overrides)."""
    base, overrides = parse_builtin(name)
    family, build = BUILTINS[base]
    vocab = overrides.pop("vocab_size", tokenizer_vocab)
    if vocab < tokenizer_vocab:
        raise ValueError(f"vocab_size {vocab} is smaller than the tokenizer's {tokenizer_vocab}")
    config = build(vocab_size=vocab, **overrides)
    config.init_seed = seed
    return family, config
