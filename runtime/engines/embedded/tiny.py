"""Tiny random-init OLMo-core models and a byte tokenizer, for tests and benchmarks.

``runtime.models.load_model`` is the real loader (owned by the models part); the engine
also accepts ``engine-test:dense|moe|hybrid[:d_model=..,layers=..]`` sources built here so
the serving side can be tested on its own, in seconds, without any model files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

VOCAB = 128  # ASCII bytes; 0 is EOS/PAD


class ByteTokenizer:
    """ASCII byte tokenizer: id = byte value (non-ASCII replaced by '?'); 0 = EOS."""

    eos_token_id = 0
    pad_token_id = 0
    vocab_size = VOCAB

    def encode(self, text: str) -> list[int]:
        return [b if 0 < b < VOCAB else ord("?") for b in text.encode("ascii", "replace")]

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i) for i in ids if 0 < i < VOCAB)


@dataclass
class TinyLoaded:
    """Same attribute surface as ``runtime.models.LoadedModel``."""

    model: Any
    tokenizer: Any
    config: Any


def tiny_config(
    kind: str = "dense",
    *,
    d_model: int = 64,
    n_layers: int = 2,
    n_heads: int = 4,
    n_kv_heads: int | None = 2,
    window: int | None = 8,
    vocab_size: int = VOCAB,
) -> Any:
    """An Olmo-3-shaped config (post-norm blocks, QK-norm, RoPE, GQA, sliding window)."""
    from olmo_core.nn.attention import SlidingWindowAttentionConfig
    from olmo_core.nn.feed_forward import FeedForwardConfig
    from olmo_core.nn.moe import MoEConfig, MoERouterConfig, MoEType
    from olmo_core.nn.transformer import TransformerBlockType, TransformerConfig, TransformerType

    kwargs: dict[str, Any] = dict(
        d_model=d_model,
        vocab_size=vocab_size,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        qk_norm=True,
        rope_theta=500_000,
        layer_norm_eps=1e-6,
        hidden_size_multiple_of=16,
    )
    if window is not None and kind == "dense":
        kwargs["sliding_window"] = SlidingWindowAttentionConfig(
            pattern=[window, -1],
            force_full_attention_on_first_layer=False,
            force_full_attention_on_last_layer=True,
        )
    if kind == "dense":
        return TransformerConfig.llama_like(
            block_name=TransformerBlockType.reordered_norm, **kwargs
        )
    moe = MoEConfig(
        name=MoEType.dropless,
        num_experts=8,
        hidden_size=d_model // 2,
        router=MoERouterConfig(top_k=2),
        shared_mlp=FeedForwardConfig(hidden_size=d_model, bias=False) if kind == "moe" else None,
    )
    if kind == "moe":
        return TransformerConfig.llama_like(
            name=TransformerType.moe,
            block_name=TransformerBlockType.moe_reordered_norm,
            feed_forward_moe=moe,
            **kwargs,
        )
    if kind == "hybrid":
        return TransformerConfig.llama_like(
            name=TransformerType.moe,
            block_name=TransformerBlockType.moe_hybrid_reordered_norm,
            feed_forward=FeedForwardConfig(hidden_size=d_model * 2, bias=False),
            feed_forward_moe=moe,
            **kwargs,
        )
    raise ValueError(f"unknown tiny model kind {kind!r} (dense, moe, hybrid)")


def build_tiny(kind: str = "dense", *, seed: int = 0, **overrides: Any) -> TinyLoaded:
    """Build and deterministically initialize a tiny model on CPU."""
    config = tiny_config(kind, **overrides)
    torch.manual_seed(seed)
    model = config.build(init_device="cpu")
    model.init_weights(device=torch.device("cpu"))
    # Random init leaves norm gains at 1; perturb every parameter so tests see real weights.
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.02)
    return TinyLoaded(model=model.eval(), tokenizer=ByteTokenizer(), config=config)


def parse_test_source(source: str) -> tuple[str, dict[str, int]]:
    """``engine-test:moe:d_model=32,n_layers=1`` -> ("moe", {"d_model": 32, "n_layers": 1})."""
    parts = source.split(":", 2)
    kind = parts[1] if len(parts) > 1 and parts[1] else "dense"
    opts: dict[str, int] = {}
    if len(parts) > 2 and parts[2]:
        for item in parts[2].split(","):
            key, _, value = item.partition("=")
            opts[key.strip()] = int(value)
    return kind, opts
