"""Inference forward over an OLMo-core ``Transformer`` with a preallocated KV cache.

The OLMo-core module's own forward recomputes the whole sequence; a rollout server must
prefill a prompt once and then decode one token per step for a whole batch. This module
reads the blocks' parameters and sub-modules (norms, feed-forwards, routers) and runs its
own attention over a per-slot KV cache. It must agree with ``model(input_ids)`` on logits
(see tests/unit/test_engine_forward.py).

Cache layout: one ``[slots, n_kv_heads, cache_len, head_dim]`` tensor for keys and one for
values per layer (``cache_len``: the capacity rounded up to 64). The scheduler keeps running
requests in slots ``0..B-1`` (it compacts on finish), so a decode step attends over the view
``cache[:B, :, :L]`` without gathering. Prefill takes many ragged prompts in one forward;
decode can run from CUDA graphs bucketed by batch size and attended length ``L``.

The cache may hold K/V in a narrower type than the model computes in (``kv_dtype``,
SGLang's ``--kv-cache-dtype``): FP8 halves what a decode step reads at long contexts, where
K/V outweighs the weights. Values are stored saturated, with a scale of 1 (SGLang's default
without calibrated scales), and read back into the model's dtype; the prefill attends to the
same rounded values the decode steps will read, so a token's attention does not depend on
whether its keys came from this forward or from the cache.

GatedDeltaNet layers (``olmo_hybrid``) keep no KV rows: their per-slot recurrent and
convolution state lives in ``recurrent.RecurrentState``, moved and graph-captured with the
slots like the KV rows.
"""

from __future__ import annotations

import importlib.util
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from .flex_decode import decode_blocks, flex_decode_attention
from .recurrent import RecurrentState, is_gdn
from .sampling import SamplingBatch, sample_rows

log = logging.getLogger(__name__)

# prefill's attention kernels: every SDPA backend but cuDNN's, which builds an execution
# plan, with kernels compiled at run time, for each new shape. Prefill's shapes change with
# every admission; on one NVIDIA H200 whose driver JIT cache was empty, those builds held
# 0.7-0.8 s of a 16x8 collection's admission, on the attention call. Decode keeps cuDNN:
# its shapes are captured once per graph bucket.
PREFILL_SDPA_BACKENDS = (
    SDPBackend.FLASH_ATTENTION,
    SDPBackend.EFFICIENT_ATTENTION,
    SDPBackend.MATH,
)

COMPILE_KV_STEP = 256  # attended-length granularity of the compiled decode step
DECODE_ATTENTION = ("sdpa", "flex", "triton")
# decode attentions that read each row's own entries: one length bucket (the cache row)
ROW_EXACT_ATTENTION = ("flex", "triton")
# ``--kv-cache-dtype`` values the embedded engine stores (SGLang's names); "auto": the model's
KV_CACHE_DTYPES: dict[str, torch.dtype | None] = {
    "auto": None,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}
_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def kv_cache_dtype(name: str, model_dtype: torch.dtype) -> torch.dtype:
    """The cache's storage type for ``--kv-cache-dtype name`` with a model in ``model_dtype``."""
    if name not in KV_CACHE_DTYPES:
        raise ValueError(f"kv cache dtype must be one of {', '.join(KV_CACHE_DTYPES)}")
    return KV_CACHE_DTYPES[name] or model_dtype


# the fused step's samplers, each serving every row the ones before it serve
SAMPLER_MODES = ("greedy", "sample", "truncate")


class UnsupportedModel(ValueError):
    """The OLMo-core model uses a feature the embedded engine cannot serve."""


@dataclass(eq=False)
class _Layer:
    """How one block is wired: norm placement, attention module, feed-forward or MoE."""

    kind: str  # "pre" | "post" | "peri"
    attn: Any
    attn_norm: Any
    ffn_norm: Any
    attn_alpha: float
    ffn_alpha: float
    ffn: Any
    moe: Any
    hybrid: bool
    moe_norm: Any
    post_attn_norm: Any
    post_ffn_norm: Any
    window: int | None
    rope: Any
    scale: float
    index: int = 0
    gqa: bool = False  # fewer KV heads than query heads (SDPA's GQA path only then)
    gdn: bool = False  # a GatedDeltaNet mixer: recurrent state instead of KV rows
    qkv: FusedLinear | None = None  # q, k, v in one matrix product (``fuse_projections``)
    gate_up: FusedLinear | None = None  # the feed-forward's w1 and w3 in one


@dataclass(eq=False)
class FusedLinear:
    """Several ``nn.Linear`` of one input as one matrix product, SGLang's merged QKV and
    gate/up projections: one wider GEMM reads the same weights with fewer, fuller kernels
    (decode's small-M products). The modules' parameters become row slices of ``weight``,
    so every in-place weight load (``load_state_dict``, tensor and broadcast publication)
    updates it, and the model's own forward reads the same values."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    sizes: list[int]
    parts: list[Any]

    @classmethod
    def of(cls, mods: Sequence[Any]) -> FusedLinear | None:
        """Fuse ``mods`` (None unless all are plain ``nn.Linear`` of one input, one dtype,
        all with or all without a bias)."""
        if any(type(m) is not torch.nn.Linear for m in mods):
            return None
        if len({(m.in_features, m.weight.dtype, m.weight.device) for m in mods}) != 1:
            return None
        biased = {m.bias is not None for m in mods}
        if len(biased) != 1:
            return None
        with torch.no_grad():
            weight = torch.cat([m.weight for m in mods])
            bias = torch.cat([m.bias for m in mods]) if biased == {True} else None
        start = 0
        for m in mods:
            n = m.out_features
            m.weight.data = weight[start : start + n]
            if bias is not None:
                m.bias.data = bias[start : start + n]
            start += n
        return cls(weight, bias, [m.out_features for m in mods], list(mods))

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return F.linear(x, self.weight, self.bias).split(self.sizes, dim=-1)

    def intact(self) -> bool:
        """Whether every module's weight still views this fused one (a load that replaced
        a parameter instead of copying into it would leave the fused copy stale)."""
        base = self.weight.untyped_storage().data_ptr()
        return all(m.weight.untyped_storage().data_ptr() == base for m in self.parts)


def _block_layer(block: Any) -> _Layer:
    from olmo_core.nn.attention import Attention
    from olmo_core.nn.rope import RotaryEmbedding
    from olmo_core.nn.transformer import block as B

    attn = block.attention
    if is_gdn(attn) and type(block) is B.TransformerBlock:
        return _Layer(
            kind="pre", attn=attn, attn_norm=block.attention_norm,
            ffn_norm=block.feed_forward_norm,
            attn_alpha=float(block.attention_residual_stream.alpha),
            ffn_alpha=float(block.feed_forward_residual_stream.alpha),
            ffn=block.feed_forward, moe=None, hybrid=False, moe_norm=None,
            post_attn_norm=None, post_ffn_norm=None, window=None, rope=None, scale=1.0,
            gdn=True,
        )  # fmt: skip
    if type(attn) is not Attention:
        raise UnsupportedModel(f"sequence mixer {type(attn).__name__} is not supported")
    if getattr(attn, "sinks", None) is not None or getattr(attn, "scalable_softmax", False):
        raise UnsupportedModel("attention sinks / scalable softmax are not supported")
    if attn.rope is not None and type(attn.rope) is not RotaryEmbedding:
        raise UnsupportedModel(f"RoPE implementation {type(attn.rope).__name__} not supported")
    scale = attn.backend.scale if attn.backend.scale is not None else attn.head_dim**-0.5
    common: dict[str, Any] = dict(
        attn=attn,
        attn_norm=block.attention_norm,
        ffn_norm=block.feed_forward_norm,
        window=attn.window_size,
        rope=attn.rope,
        scale=float(scale),
        post_attn_norm=None,
        post_ffn_norm=None,
        moe_norm=None,
    )
    t = type(block)
    if t in (B.MoEHybridTransformerBlock, B.MoEHybridReorderedNormTransformerBlock):
        kind = "pre" if t is B.MoEHybridTransformerBlock else "post"
        return _Layer(
            kind=kind,
            attn_alpha=1.0,
            ffn_alpha=1.0,
            ffn=block.feed_forward,
            moe=block.feed_forward_moe,
            hybrid=True,
            **{**common, "moe_norm": block.feed_forward_moe_norm},
        )
    if t in (B.MoETransformerBlock, B.MoEReorderedNormTransformerBlock):
        kind = "pre" if t is B.MoETransformerBlock else "post"
        return _Layer(
            kind=kind,
            attn_alpha=1.0,
            ffn_alpha=1.0,
            ffn=None,
            moe=block.feed_forward_moe,
            hybrid=False,
            **common,
        )
    dense = {
        B.TransformerBlock: "pre",
        B.ReorderedNormTransformerBlock: "post",
        B.PeriNormTransformerBlock: "peri",
    }
    if t not in dense:
        raise UnsupportedModel(f"block type {t.__name__} is not supported")
    layer = _Layer(
        kind=dense[t],
        attn_alpha=float(block.attention_residual_stream.alpha),
        ffn_alpha=float(block.feed_forward_residual_stream.alpha),
        ffn=block.feed_forward,
        moe=None,
        hybrid=False,
        **common,
    )
    if layer.kind == "peri":
        layer.post_attn_norm = block.post_attention_norm
        layer.post_ffn_norm = block.post_feed_forward_norm
    return layer


def _through_region(
    regions: dict[str, Any], what: str, name: str, fn: Callable[..., Any], *args: Any
) -> Any:
    """``fn(*args)`` through ``regions[name]`` when compiled; on any dynamo/inductor failure
    ``fn`` reruns eagerly and ``regions`` is emptied (eager from then on)."""
    compiled = regions.get(name)
    if compiled is not None:
        try:
            return compiled(*args)
        except Exception as exc:  # any dynamo/inductor failure: stay eager from now on
            log.warning("torch.compile of the %s failed, running eagerly: %s", what, exc)
            regions.clear()
    return fn(*args)


def _expert_weights(experts: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Expert weights as ``(E, d, h)``, ``(E, d, h)``, ``(E, h, d)`` for both MLP layouts."""
    from olmo_core.nn.moe.mlp import DroplessMoEMLP

    mlp = experts.mlp
    e, d, h = mlp.num_experts, mlp.d_model, mlp.hidden_size
    if isinstance(mlp, DroplessMoEMLP):
        w1 = mlp.w1.view(e, h, d).transpose(1, 2)
        w3 = mlp.w3.view(e, h, d).transpose(1, 2)
    else:
        w1 = mlp.w1.view(e, d, h)
        w3 = mlp.w3.view(e, d, h)
    return w1, w3, mlp.w2.view(e, h, d)


def _routed_experts(
    flat: torch.Tensor,
    w: torch.Tensor,
    idx: torch.Tensor,
    w1: torch.Tensor,
    w3: torch.Tensor,
    w2: torch.Tensor,
) -> torch.Tensor:
    """Dropless top-k: each used expert runs on its tokens (data-dependent, eager only)."""
    out = torch.zeros_like(flat)
    for e in torch.unique(idx).tolist():
        tok, slot = (idx == e).nonzero(as_tuple=True)
        h = flat[tok]
        y = (F.silu(h @ w1[e]) * (h @ w3[e])) @ w2[e]
        out.index_add_(0, tok, (y * w[tok, slot].unsqueeze(-1).to(y.dtype)).to(out.dtype))
    return out


def _all_experts(
    flat: torch.Tensor,
    w: torch.Tensor,
    idx: torch.Tensor,
    w1: torch.Tensor,
    w3: torch.Tensor,
    w2: torch.Tensor,
) -> torch.Tensor:
    """Every expert on every token, combined with the router's top-k weights (zero
    elsewhere). Static shapes, so a decode step can be compiled and graph-captured; at
    decode batch sizes nearly every expert is hit anyway, so the step still reads each
    expert's weights once and stays bandwidth-bound. The router (and so the recorded
    experts) is the same as in the routed path."""
    combine = torch.zeros(flat.shape[0], w1.shape[0], dtype=torch.float32, device=flat.device)
    combine.scatter_(1, idx, w.float())  # (N, E)
    h = flat.unsqueeze(0)  # (1, N, d) against (E, d, h)
    y = torch.matmul(F.silu(torch.matmul(h, w1)) * torch.matmul(h, w3), w2)  # (E, N, d)
    return torch.einsum("end,ne->nd", y.float(), combine).to(flat.dtype)


class InferenceModel:
    """Prefill/decode over an OLMo-core Transformer; owns the KV cache."""

    def __init__(
        self,
        model: Any,
        *,
        max_slots: int,
        capacity: int,
        device: torch.device | str = "cpu",
        decode_attention: str | None = None,
        fuse_projections: bool = True,
        kv_dtype: torch.dtype | None = None,
    ):
        if decode_attention is None:
            decode_attention = default_decode_attention(torch.device(device))
        if decode_attention not in DECODE_ATTENTION:
            raise ValueError(f"decode attention must be one of {DECODE_ATTENTION}")
        self.model: Any = model.eval()
        # "triton": the split-KV kernel (``triton_decode``: each row reads exactly its own
        # entries, one graph per batch size); "flex": FlexAttention's block-sparse decode
        # (each row reads its own KV blocks); "sdpa": dense attention over the batch's
        # length bucket
        self.decode_attention = decode_attention
        self.device = torch.device(device)
        self._split_kv: Callable[..., torch.Tensor] | None = None
        if decode_attention == "triton":
            from .triton_decode import decode_attention as split_kv
            from .triton_decode import interpreting

            if self.device.type != "cuda" and not interpreting():
                raise ValueError("triton decode attention needs --device cuda")
            self._split_kv = split_kv
        self.max_slots = max_slots
        self.capacity = capacity
        # shared prompts (the split-KV kernel): for each slot, row 0 names the slot that
        # holds its prompt and row 1 the prompt's length (0: it reads only its own slot),
        # so a group's samples read one copy of their prompt; ``set_prompt_sources``
        self.shares_prompts = decode_attention == "triton"
        # (the host's copy of what the device holds: an unchanged set is not uploaded again)
        self._prompt_rows_host = torch.stack(
            [torch.arange(max_slots), torch.zeros(max_slots, dtype=torch.long)]
        )
        self._prompt_rows = self._prompt_rows_host.to(self.device)
        # cache rows rounded up to 64 entries: every graph length bucket (and the attention
        # mask's last dim) stays aligned for the fused SDPA kernels
        self.cache_len = -(-capacity // 64) * 64
        if getattr(model, "embeddings", None) is None or getattr(model, "lm_head", None) is None:
            raise UnsupportedModel("pipeline-split models are not supported")
        from olmo_core.nn.lm_head import LMHead

        if type(model.lm_head) is not LMHead:
            raise UnsupportedModel(f"LM head {type(model.lm_head).__name__} is not supported")
        self.layers = [_block_layer(b) for b in model.blocks.values()]
        for i, layer in enumerate(self.layers):
            layer.index = i
            layer.gqa = not layer.gdn and layer.attn.n_kv_heads != layer.attn.n_heads
            if fuse_projections:
                self._fuse(layer)
        self.moe_layers = [i for i, layer in enumerate(self.layers) if layer.moe is not None]
        self.top_k = self.layers[self.moe_layers[0]].moe.top_k if self.moe_layers else 0
        self.dtype = model.embeddings.weight.dtype
        # the cache's storage type (``kv_dtype``; default the model's), and the bound FP8
        # values saturate at (an unclamped cast of a larger value gives NaN in e4m3)
        self.kv_dtype = kv_dtype or self.dtype
        self._kv_cast = self.kv_dtype != self.dtype
        self._kv_max = torch.finfo(self.kv_dtype).max if self.kv_dtype in _FP8 else None
        self._rope_tables: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._rope_alias: dict[int, int] = {}  # id(layer.rope) -> its shared table's key
        # compiled regions of the decode step (``enable_compile``): "layer", "logits", "sample"
        self._regions: dict[str, Any] = {}
        # compiled regions of the prefill's blocks (``enable_compile_prefill``): "qkv", "tail"
        self._prefill_regions: dict[str, Any] = {}
        self.graph_batch_sizes: list[int] = []
        self.graph_kv_step = 0
        self._graphs: dict[tuple[int, int], tuple[Any, torch.Tensor, torch.Tensor, Any]] = {}
        self._graph_pool: Any = None
        # fused decode + sampling: per-batch-bucket input buffers, graphs, compiled step
        self._states: dict[int, StepState] = {}
        self._live: tuple[int, int] | None = None  # (state rows, live rows)
        self._step_graphs: dict[tuple[int, int, str], tuple[Any, Any]] = {}
        self.dense_moe = False  # all-experts MoE decode (static shapes: capturable, compilable)
        self.capture_s = 0.0  # time spent compiling + capturing decode graphs
        self.k_cache: list[torch.Tensor] = []
        self.v_cache: list[torch.Tensor] = []
        gdn = {layer.index: layer.attn for layer in self.layers if layer.gdn}
        self.recurrent = RecurrentState(gdn, max_slots, self.dtype, self.device) if gdn else None
        shapes = {
            (max_slots, layer.attn.n_kv_heads, self.cache_len, layer.attn.head_dim)
            for layer in self.layers
            if not layer.gdn
        }
        attn_layers = sum(1 for layer in self.layers if not layer.gdn)
        # every attention layer's K and V in one tensor when their shapes agree: a slot's
        # K/V is then one strided view, so the prefix cache reads, writes and moves it in
        # one kernel (and one Python call) rather than one per layer and per K/V
        self._kv_store: torch.Tensor | None = None
        if len(shapes) == 1:
            (shape,) = shapes
            self._kv_store = torch.zeros(
                (2 * attn_layers, *shape), dtype=self.kv_dtype, device=self.device
            )
        made = 0
        for layer in self.layers:
            if layer.gdn:  # keeps k_cache/v_cache indexed by layer
                self.k_cache.append(torch.zeros(0, dtype=self.kv_dtype, device=self.device))
                self.v_cache.append(torch.zeros(0, dtype=self.kv_dtype, device=self.device))
                continue
            if self._kv_store is not None:
                self.k_cache.append(self._kv_store[made])
                self.v_cache.append(self._kv_store[attn_layers + made])
                made += 1
                continue
            shape = (max_slots, layer.attn.n_kv_heads, self.cache_len, layer.attn.head_dim)
            self.k_cache.append(torch.zeros(shape, dtype=self.kv_dtype, device=self.device))
            self.v_cache.append(torch.zeros(shape, dtype=self.kv_dtype, device=self.device))

    def _to_cache(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` as the cache stores it: FP8 saturated at its largest finite value."""
        if not self._kv_cast:
            return x
        if self._kv_max is not None:
            x = x.clamp(-self._kv_max, self._kv_max)
        return x.to(self.kv_dtype)

    def _from_cache(self, x: torch.Tensor) -> torch.Tensor:
        """Cache entries in the model's dtype, for attention that cannot read the stored type."""
        return x.to(self.dtype) if self._kv_cast else x

    def _raw(self, x: torch.Tensor) -> torch.Tensor:
        """FP8 cache tensors as their bytes: torch's gathers, scatters and index copies do
        not all take FP8 (``index_copy``, ``index_select``, advanced indexing on the CPU or
        the GPU), and moving bytes is the same move."""
        return x.view(torch.uint8) if self._kv_max is not None else x

    def _gather_cache(self, cache: torch.Tensor, rows: torch.Tensor, end: int) -> torch.Tensor:
        """``cache[rows, :, :end]`` in the model's dtype."""
        got = self._raw(cache)[rows, :, :end]
        return self._from_cache(got.view(self.kv_dtype) if self._kv_max is not None else got)

    @property
    def is_moe(self) -> bool:
        return bool(self.moe_layers)

    @property
    def compiled(self) -> bool:
        return bool(self._regions)

    def graph_keys(self) -> list[tuple[int, int]]:
        return sorted(self._graphs)

    def captured_graphs(self) -> int:
        """Decode graphs held: plain decode steps and fused decode + sampling steps."""
        return len(self._graphs) + len(self._step_graphs)

    @staticmethod
    def _fuse(layer: _Layer) -> None:
        """Merge the layer's q/k/v and its feed-forward's w1/w3 projections (FusedLinear)."""
        from olmo_core.nn.feed_forward import FeedForward

        if not layer.gdn:
            a = layer.attn
            layer.qkv = FusedLinear.of([a.w_q, a.w_k, a.w_v])
        if type(layer.ffn) is FeedForward:
            layer.gate_up = FusedLinear.of([layer.ffn.w1, layer.ffn.w3])

    def fused_intact(self) -> bool:
        """Every fused projection still shares the model's parameters (weight loads copy
        in place; the engine checks this after each)."""
        return all(f.intact() for layer in self.layers for f in (layer.qkv, layer.gate_up) if f)

    def _ffn(self, layer: _Layer, x: torch.Tensor) -> torch.Tensor:
        """The dense feed-forward, ``w2(act(w1 x) * w3 x)``, w1 and w3 in one product."""
        if layer.gate_up is None:
            return layer.ffn(x)
        gate, up = layer.gate_up(x)
        return layer.ffn.w2(layer.ffn.activation_fn(gate) * up)

    # ---- pieces -------------------------------------------------------------------------

    def _rope(self, layer: _Layer) -> tuple[torch.Tensor, torch.Tensor]:
        return self._rope_tables[self._rope_key(layer)]

    def _rope_key(self, layer: _Layer) -> int:
        """The layer's RoPE table, shared by every layer whose table is equal: OLMo-core
        gives each block its own RoPE module, and a decode step gathered the same sin/cos
        rows once per layer (two index kernels a layer in the captured step) where once
        serves them all. Built on first use, which is a prefill or an eager warm-up step,
        never a capture (comparing tables syncs the device)."""
        rid = id(layer.rope)
        key = self._rope_alias.get(rid)
        if key is None:
            sin, cos = layer.rope._get_rotary_embedding(self.capacity, self.device)
            sin, cos = sin.float(), cos.float()
            key = next(
                (
                    k
                    for k, (s, c) in self._rope_tables.items()
                    if s.shape == sin.shape and torch.equal(s, sin) and torch.equal(c, cos)
                ),
                rid,
            )
            self._rope_tables.setdefault(key, (sin, cos))
            self._rope_alias[rid] = key
        return key

    @staticmethod
    def _rotate(t: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
        """Apply RoPE; ``t`` is ``(B, T, H, D)``, ``sin/cos`` broadcast as ``(B, T, 1, R)``."""
        rdim = sin.shape[-1]
        tf = t.float()
        rot, rest = tf[..., :rdim], tf[..., rdim:]
        half = rdim // 2
        rotated = torch.cat((-rot[..., half:], rot[..., :half]), dim=-1)
        out = rot * cos + rotated * sin
        if rest.shape[-1]:
            out = torch.cat([out, rest], dim=-1)
        return out.to(t.dtype)

    def _rope_rows(
        self, layer: _Layer, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The layer's RoPE sin/cos rows at ``positions`` (``(B, T)`` -> ``(B, T, 1, R)``,
        float32), or None without RoPE."""
        if layer.rope is None:
            return None
        sin, cos = self._rope(layer)
        return sin[positions].unsqueeze(2), cos[positions].unsqueeze(2)

    def _qkv(
        self,
        layer: _Layer,
        x: torch.Tensor,
        rope_rows: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Projected, normed, rotated ``q, k, v`` as ``(B, T, H, D)``; ``rope_rows``: the
        positions' sin/cos rows (``_rope_rows``, gathered once per step or prefill by the
        caller), None for a layer without RoPE."""
        attn = layer.attn
        bsz, t, _ = x.shape
        if layer.qkv is not None:
            q, k, v = layer.qkv(x)
        else:
            q, k, v = attn.w_q(x), attn.w_k(x), attn.w_v(x)
        if attn.clip_qkv is not None:
            c = attn.clip_qkv
            q, k, v = q.clamp(-c, c), k.clamp(-c, c), v.clamp(-c, c)
        if not attn.use_head_qk_norm:
            if attn.q_norm is not None:
                q = attn.q_norm(q)
            if attn.k_norm is not None:
                k = attn.k_norm(k)
        q = q.view(bsz, t, -1, attn.head_dim)
        k = k.view(bsz, t, -1, attn.head_dim)
        v = v.view(bsz, t, -1, attn.head_dim)
        if attn.use_head_qk_norm:
            if attn.q_norm is not None:
                q = attn.q_norm(q)
            if attn.k_norm is not None:
                k = attn.k_norm(k)
        if layer.rope is not None:
            assert rope_rows is not None  # the caller gathers them for every RoPE layer
            s, c = rope_rows
            if layer.rope.full_precision:
                q, k = self._rotate(q, s, c), self._rotate(k, s, c)
            else:
                q = self._rotate(q, s.to(q.dtype), c.to(q.dtype))
                k = self._rotate(k, s.to(k.dtype), c.to(k.dtype))
        return q, k, v

    def _attn_out(self, layer: _Layer, x: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        """``att`` is ``(B, H, T, D)``; gate, merge heads and project."""
        attn = layer.attn
        bsz, t, _ = x.shape
        att = att.transpose(1, 2)
        if attn.gate is not None:
            g = attn.w_g(x)
            if attn.gate.full_precision:
                g = g.float()
            gv = torch.sigmoid(g).to(att.dtype)
            if str(attn.gate.granularity) == "headwise":
                att = att * gv.unsqueeze(-1)
            else:
                att = (att.reshape(bsz, t, -1) * gv).view_as(att)
        return attn.w_out(att.reshape(bsz, t, -1))

    def _moe(self, layer: _Layer, x: torch.Tensor, routed: list[torch.Tensor]) -> torch.Tensor:
        """Dropless top-k experts (inference never drops tokens, unlike capacity MoE)."""
        moe = layer.moe
        shape = x.shape
        weights, indices, _, _ = moe.router(x)
        routed.append(indices.reshape(-1, indices.shape[-1]))
        xr = moe.prepare_routed_input(x)
        flat = xr.reshape(-1, xr.shape[-1])
        w = weights.reshape(-1, weights.shape[-1])
        idx = indices.reshape(-1, indices.shape[-1])
        w1, w3, w2 = _expert_weights(moe.experts)
        if self.dense_moe and shape[1] == 1:
            out = _all_experts(flat, w, idx, w1, w3, w2)
        else:
            out = _routed_experts(flat, w, idx, w1, w3, w2)
        res = moe.restore_routed_output(out.view(*shape[:-1], -1))
        if moe.shared_mlp is not None:
            k = moe.top_k
            res = (moe.shared_mlp(x) / (k + 1)).add(res, alpha=k / (k + 1))
        return res

    def _block(
        self,
        layer: _Layer,
        x: torch.Tensor,
        attend: Any,
        routed: list[torch.Tensor],
    ) -> torch.Tensor:
        def attention(inp: torch.Tensor) -> torch.Tensor:
            return attend(layer, inp)

        if layer.hybrid:
            if layer.kind == "pre":
                sparse = self._moe(layer, layer.moe_norm(x), routed)
                h = x + attention(layer.attn_norm(x))
                dense = h + self._ffn(layer, layer.ffn_norm(h))
            else:
                sparse = layer.moe_norm(self._moe(layer, x, routed))
                h = x + layer.attn_norm(attention(x))
                dense = h + layer.ffn_norm(self._ffn(layer, h))
            return sparse + dense

        a_in = x if layer.kind == "post" else layer.attn_norm(x)
        return self._residual_tail(layer, x, attention(a_in), routed)

    def _residual_tail(
        self, layer: _Layer, x: torch.Tensor, att_out: torch.Tensor, routed: list[torch.Tensor]
    ) -> torch.Tensor:
        """A non-hybrid block after its attention: ``att_out`` is the projected attention
        of the block's attention input (``x`` itself for post-norm blocks, else
        ``attn_norm(x)``); residual adds, norms by placement, feed-forward or MoE."""

        def ff(inp: torch.Tensor) -> torch.Tensor:
            if layer.moe is not None:
                return self._moe(layer, inp, routed)
            return self._ffn(layer, inp)

        if layer.kind == "pre":
            h = torch.add(x, att_out, alpha=layer.attn_alpha)
            return torch.add(h, ff(layer.ffn_norm(h)), alpha=layer.ffn_alpha)
        if layer.kind == "post":
            h = torch.add(x, layer.attn_norm(att_out), alpha=layer.attn_alpha)
            return torch.add(h, layer.ffn_norm(ff(h)), alpha=layer.ffn_alpha)
        h = torch.add(x, layer.post_attn_norm(att_out), alpha=layer.attn_alpha)
        return torch.add(h, layer.post_ffn_norm(ff(layer.ffn_norm(h))), alpha=layer.ffn_alpha)

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        m = self.model
        h = m.embeddings(ids)
        if m.embed_scale is not None:
            h = h * m.embed_scale
        if m.embedding_norm is not None:
            h = m.embedding_norm(h)
        return h

    def _head(self, h: torch.Tensor) -> torch.Tensor:
        head = self.model.lm_head
        if head.norm is not None:
            h = head.norm(h)
        return head.w_out(h)

    # ---- public -------------------------------------------------------------------------

    @torch.inference_mode()
    def prefill(
        self, token_ids: list[int], slot: int, *, all_logits: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Run the prompt once, fill ``slot``'s cache; return last (or all) logits and experts."""
        last, full, experts = self.prefill_batch([token_ids], [slot], want_all=[all_logits])
        ex = experts[0] if experts is not None else None
        return (full[0] if all_logits and full[0] is not None else last[0]), ex

    @torch.inference_mode()
    def prefill_batch(
        self,
        seqs: list[list[int]],
        slots: list[int],
        *,
        want_all: list[bool] | None = None,
        starts: list[int] | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor | None], list[torch.Tensor] | None]:
        """``_prefill_batch`` with prefill's attention kernels (``PREFILL_SDPA_BACKENDS``).

        When only some rows continue a cached prefix, those rows and the others are two
        forwards: one row whose first token happened to be cached must not send every
        fresh prompt through the continued path's masked attention over gathered caches
        (on a CPU that path took 1.6x as long for 64 fresh 128-token prompts)."""
        with sdpa_kernel(list(PREFILL_SDPA_BACKENDS)):
            if not starts or all(starts) or not any(starts):
                return self._prefill_batch(seqs, slots, want_all, starts)
            parts = [
                [i for i, s in enumerate(starts) if not s],
                [i for i, s in enumerate(starts) if s],
            ]
            outs = [
                self._prefill_batch(
                    [seqs[i] for i in rows],
                    [slots[i] for i in rows],
                    None if want_all is None else [want_all[i] for i in rows],
                    [starts[i] for i in rows],
                )
                for rows in parts
            ]
        order = [i for rows in parts for i in rows]
        back = torch.empty(len(order), dtype=torch.long)
        back[torch.tensor(order)] = torch.arange(len(order))
        last = torch.cat([o[0] for o in outs]).index_select(0, back.to(outs[0][0].device))
        full = [f for o in outs for f in o[1]]
        experts = [e for o in outs for e in o[2]] if outs[0][2] is not None else None
        at = back.tolist()
        return (
            last,
            [full[k] for k in at],
            None if experts is None else [experts[k] for k in at],
        )

    def _prefill_batch(
        self,
        seqs: list[list[int]],
        slots: list[int],
        want_all: list[bool] | None,
        starts: list[int] | None,
    ) -> tuple[torch.Tensor, list[torch.Tensor | None], list[torch.Tensor] | None]:
        """Prefill ragged prompts in ONE forward (right-padded, masked); fill each slot's cache.

        ``starts[b]`` > 0: the slot already holds the K/V of the sequence's first
        ``starts[b]`` tokens (a cached prefix) and ``seqs[b]`` continues it from that
        position, attending to the held prefix (attention-only models).

        Returns the last-position logits ``(B, V)``, all-position logits for the rows in
        ``want_all`` (others None; the LM head runs only on those rows), and per-request
        routed experts ``(len, moe_layers, top_k)`` for MoE models. Padded positions write
        cache entries past a request's length; decode overwrites each position before it
        attends to it, so they are never read.
        """
        bsz = len(seqs)
        lens = [len(s) for s in seqs]
        if bsz == 0 or len(slots) != bsz:
            raise ValueError("prefill_batch needs one slot per prompt")
        t = max(lens)
        starts = starts or [0] * bsz
        if min(lens) <= 0 or max(s + n for s, n in zip(starts, lens, strict=True)) > self.capacity:
            raise ValueError(f"prompt length outside 1..{self.capacity}")
        if any(starts):
            if self.recurrent is not None:
                raise ValueError("a cached prefix cannot resume a recurrent state")
            return self._prefill_continued(seqs, slots, starts, want_all)
        dev = self.device
        ragged = min(lens) != t
        rows = [s + [0] * (t - len(s)) for s in seqs]
        ids = torch.tensor(rows, dtype=torch.long, device=dev)
        positions = torch.arange(t, device=dev).unsqueeze(0).expand(bsz, t)
        s0 = slots[0]
        contiguous = slots == list(range(s0, s0 + bsz))
        slot_index = None if contiguous else torch.tensor(slots, dtype=torch.long, device=dev)
        i = torch.arange(t, device=dev)
        dist = i.unsqueeze(1) - i.unsqueeze(0)  # (T, T) query - key
        key_ok = None
        if ragged:
            lens_t = torch.tensor(lens, device=dev)
            key_ok = (i.unsqueeze(0) < lens_t.unsqueeze(1)).view(bsz, 1, 1, t)
        masks: dict[int | None, torch.Tensor | None] = {}

        def mask_for(w: int | None) -> torch.Tensor | None:
            if w not in masks:
                if not ragged and (w is None or w >= t):
                    masks[w] = None  # plain causal: let SDPA take its fastest path
                else:
                    m = dist >= 0
                    if w is not None:
                        m = m & (dist < w)
                    m = m.view(1, 1, t, t)
                    masks[w] = m & key_ok if key_ok is not None else m
            return masks[w]

        def core(layer: _Layer, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            li = layer.index
            kt, vt = k.transpose(1, 2), v.transpose(1, 2)  # (B, H, T, D)
            kq, vq = self._to_cache(kt), self._to_cache(vt)
            if slot_index is None:
                self.k_cache[li][s0 : s0 + bsz, :, :t] = kq
                self.v_cache[li][s0 : s0 + bsz, :, :t] = vq
            else:
                self._raw(self.k_cache[li])[slot_index, :, :t] = self._raw(kq)
                self._raw(self.v_cache[li])[slot_index, :, :t] = self._raw(vq)
            # a narrower cache: attend to the values the decode steps will read back
            kt, vt = self._from_cache(kq), self._from_cache(vq)
            mask = mask_for(layer.window)
            return F.scaled_dot_product_attention(
                q.transpose(1, 2),
                kt,
                vt,
                attn_mask=mask,
                is_causal=mask is None,
                scale=layer.scale,
                enable_gqa=layer.gqa,
            )

        return self._prefill_head(ids, positions, core, lens, want_all, slots)

    def _prefill_continued(
        self,
        seqs: list[list[int]],
        slots: list[int],
        starts: list[int],
        want_all: list[bool] | None,
    ) -> tuple[torch.Tensor, list[torch.Tensor | None], list[torch.Tensor] | None]:
        """``prefill_batch`` after cached prefixes: row ``b``'s tokens sit at positions
        ``starts[b]..``; each query attends to its slot's cache up to its own position."""
        dev = self.device
        lens = [len(s) for s in seqs]
        t = max(lens)
        ids = torch.tensor([s + [0] * (t - len(s)) for s in seqs], dtype=torch.long, device=dev)
        st = torch.tensor(starts, device=dev).unsqueeze(1)
        # padded queries take the last position (their rows are never read)
        positions = (st + torch.arange(t, device=dev).unsqueeze(0)).clamp(max=self.capacity - 1)
        ends = [s + n for s, n in zip(starts, lens, strict=True)]
        kv_t = max(ends)
        j = torch.arange(kv_t, device=dev).view(1, 1, -1)
        dist = positions.unsqueeze(2) - j  # (B, T, K) query position - key position
        key_ok = (j < torch.tensor(ends, device=dev).view(-1, 1, 1)) & (dist >= 0)
        slot_index = torch.tensor(slots, dtype=torch.long, device=dev)
        # the (row, column) of each real (unpadded) token, and the (slot, position) it fills
        write_rows = torch.tensor([b for b, n in enumerate(lens) for _ in range(n)], device=dev)
        write_cols = torch.tensor([i for n in lens for i in range(n)], device=dev)
        write_slot = slot_index[write_rows]
        write_pos = positions[write_rows, write_cols]
        masks: dict[int | None, torch.Tensor] = {}

        def core(layer: _Layer, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            li = layer.index
            kc, vc = self.k_cache[li], self.v_cache[li]
            # every row's new entries in one scatter per cache (not one per row)
            kq = self._to_cache(k[write_rows, write_cols])
            vq = self._to_cache(v[write_rows, write_cols])
            self._raw(kc)[write_slot, :, write_pos] = self._raw(kq)
            self._raw(vc)[write_slot, :, write_pos] = self._raw(vq)
            w = layer.window
            if w not in masks:
                m = key_ok if w is None else key_ok & (dist < w)
                masks[w] = m.unsqueeze(1)  # (B, 1, T, K)
            return F.scaled_dot_product_attention(
                q.transpose(1, 2),
                self._gather_cache(kc, slot_index, kv_t),
                self._gather_cache(vc, slot_index, kv_t),
                attn_mask=masks[w],
                scale=layer.scale,
                enable_gqa=layer.gqa,
            )

        return self._prefill_head(ids, positions, core, lens, want_all, slots)

    def _prefill_head(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        core: Callable[[_Layer, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
        lens: list[int],
        want_all: list[bool] | None,
        slots: list[int],
    ) -> tuple[torch.Tensor, list[torch.Tensor | None], list[torch.Tensor] | None]:
        """The blocks over ``ids`` (at ``positions``, ``(B, T)``), then last / all-position
        logits and experts. ``core(layer, q, k, v)`` writes the layer's cache and returns
        its attention ``(B, H, T, D)``; everything around it is the same for a fresh and a
        continued prefill, and runs through the compiled prefill regions when they are on
        (``enable_compile_prefill``)."""
        bsz, t = ids.shape
        dev = self.device
        routed: list[torch.Tensor] = []
        ropes: dict[int, tuple[torch.Tensor, torch.Tensor] | None] = {}

        def rope_rows(layer: _Layer) -> tuple[torch.Tensor, torch.Tensor] | None:
            """One gather of the positions' sin/cos rows per distinct table, not per layer."""
            if layer.rope is None:
                return None
            key = self._rope_key(layer)
            if key not in ropes:
                ropes[key] = self._rope_rows(layer, positions)
            return ropes[key]

        def attend(layer: _Layer, inp: torch.Tensor) -> torch.Tensor:
            if layer.gdn:
                assert self.recurrent is not None
                return self.recurrent.prefill(layer.index, inp, lens, slots)
            q, k, v = self._qkv(layer, inp, rope_rows(layer))
            return self._attn_out(layer, inp, core(layer, q, k, v))

        # size 1 in either dim would specialize the shape-dynamic regions: those stay eager
        compiled = bool(self._prefill_regions) and bsz >= 2 and t >= 2
        h = self._embed(ids)
        for layer in self.layers:
            if compiled and self._prefill_compilable(layer):
                h = self._compiled_prefill_layer(layer, h, rope_rows(layer), core)
            else:
                h = self._block(layer, h, attend, routed)
        last_idx = torch.tensor([n - 1 for n in lens], device=dev)
        last = self._head(h[torch.arange(bsz, device=dev), last_idx])  # (B, V)
        full: list[torch.Tensor | None] = [None] * bsz
        for b, want in enumerate(want_all or []):
            if want:
                full[b] = self._head(h[b : b + 1, : lens[b]])[0]
        experts = None
        if routed:
            ex = torch.stack(routed, dim=1).view(bsz, t, len(routed), -1)  # (B, T, L, k)
            experts = [ex[b, : lens[b]] for b in range(bsz)]
        return last, full, experts

    # ---- compiled prefill (``enable_compile_prefill``) --------------------------------------

    @staticmethod
    def _prefill_compilable(layer: _Layer) -> bool:
        """Attention blocks with a dense feed-forward: MoE routing is data-dependent and a
        GatedDeltaNet layer runs its own recurrence, so those stay eager."""
        return not layer.gdn and not layer.hybrid and layer.moe is None

    def _prefill_qkv(
        self,
        layer: _Layer,
        x: torch.Tensor,
        rows: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """A prefill block up to its attention: the attention input, then normed, rotated
        ``q, k, v`` ``(B, T, H, D)``. The norm, the q/k norms and RoPE fuse around the one
        projection (eagerly each is a kernel over whole fp32 activations)."""
        a_in = x if layer.kind == "post" else layer.attn_norm(x)
        q, k, v = self._qkv(layer, a_in, rows)
        return a_in, q, k, v

    def _prefill_tail(
        self, layer: _Layer, x: torch.Tensor, a_in: torch.Tensor, att: torch.Tensor
    ) -> torch.Tensor:
        """A prefill block after its attention ``att`` (``(B, T, H, D)``, contiguous):
        output projection, residual adds, norms and the feed-forward."""
        return self._residual_tail(layer, x, self._attn_out(layer, a_in, att.transpose(1, 2)), [])

    def _compiled_prefill_layer(
        self,
        layer: _Layer,
        x: torch.Tensor,
        rows: tuple[torch.Tensor, torch.Tensor] | None,
        core: Callable[[_Layer, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> torch.Tensor:
        """One prefill block as two compiled regions around the eager cache write and
        attention (``core``). Batch and length are dynamic from the first compile, so one
        trace serves every admission's shape and every layer wired the same way."""
        from torch import _dynamo

        for tensor in (x, *(rows or ())):
            _dynamo.maybe_mark_dynamic(tensor, 0)
            _dynamo.maybe_mark_dynamic(tensor, 1)
        a_in, q, k, v = self._prefill_region("qkv", self._prefill_qkv, layer, x, rows)
        # one layout whichever SDPA kernel ran (flash and efficient attention already give
        # it, so this copies nothing there): the tail's guards never see another stride
        att = core(layer, q, k, v).transpose(1, 2).contiguous()
        _dynamo.maybe_mark_dynamic(att, 0)
        _dynamo.maybe_mark_dynamic(att, 1)
        out: torch.Tensor = self._prefill_region("tail", self._prefill_tail, layer, x, a_in, att)
        return out

    def _prefill_region(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` through its compiled prefill region; neither region writes any
        state, so on a compile failure it reruns eagerly and prefill stays eager."""
        return _through_region(self._prefill_regions, "prefill", name, fn, *args)

    def enable_compile_prefill(self, mode: str | None = None, backend: str = "inductor") -> None:
        """Compile the prefill's blocks by region (``_compiled_prefill_layer``): eagerly,
        every norm, RoPE rotation, residual add and activation of a prefill is its own
        kernel over the whole batch's activations (at 64 prompts of 128 tokens on the
        1.48B model: 72.5 GB moved in 878 op calls beside 17.6 TFLOP of matrix products;
        ``benchmarks/prefill_traffic.py``)."""
        from runtime.compile_settings import prepare_compile

        if not any(self._prefill_compilable(layer) for layer in self.layers):
            return  # an all-MoE (or all-recurrent) model: nothing for the regions to serve
        prepare_compile(512)
        self._prefill_regions = {
            name: torch.compile(fn, mode=mode, backend=backend)
            for name, fn in (("qkv", self._prefill_qkv), ("tail", self._prefill_tail))
        }

    @property
    def compiled_prefill(self) -> bool:
        return bool(self._prefill_regions)

    def warm_prefill(self) -> int:
        """Compile the prefill regions now, on two padding prompts in slots 0 and 1 (call
        it with no request running), so no admission compiles mid-run. Batch 2 and length
        3: sizes that equal nothing else in the trace, so the one shape-dynamic compile
        assumes no relation between batch and length. Returns the prompts prefilled through
        the regions (0 when off or when their compile failed)."""
        if not self._prefill_regions or self.max_slots < 2 or self.capacity < 3:
            return 0
        self.prefill_batch([[0, 0, 0], [0, 0]], [0, 1])
        return 2 if self._prefill_regions else 0  # a failed compile leaves them eager

    @torch.inference_mode()
    def decode(
        self, tokens: torch.Tensor, positions: torch.Tensor, kv_len: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One step for slots ``0..B-1``: ``tokens[b]`` sits at ``positions[b]``.

        ``kv_len`` bounds the attended cache length (default: max position + 1, which costs a
        device sync); CUDA-graph capture passes its bucket length so shapes stay static.
        """
        length = int(positions.max().item()) + 1 if kv_len is None else kv_len
        if self.compiled:
            # few distinct shapes per compile: bucket the attended length (extra keys are masked)
            length = kv_bucket(length, COMPILE_KV_STEP, self.cache_len)
        return self._decode_impl(tokens, positions, length)

    def _decode_impl(
        self, tokens: torch.Tensor, positions: torch.Tensor, length: int
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        h, experts = self._decode_hidden(tokens, positions, length)
        return self._regional("logits", self._logits_tail, h), experts

    def _decode_hidden(
        self, tokens: torch.Tensor, positions: torch.Tensor, length: int
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The blocks of one decode step: the last hidden state ``(B, 1, d)`` and the routed
        experts ``(B, L, k)`` (MoE). Each block runs through ``_decode_layer``, compiled once
        for every layer of the same shape (``enable_compile``); masks and RoPE rows are built
        here, once per step, and handed in as tensors."""
        bsz = tokens.shape[0]
        pos2 = positions.view(bsz, 1)
        flex = self.decode_attention == "flex"
        exact = self.decode_attention in ROW_EXACT_ATTENTION
        if exact:  # each row's bounds limit what it reads: attend the whole cache row
            length = self.cache_len
        dist = None if exact else pos2 - torch.arange(length, device=self.device).view(1, -1)
        masks: dict[int | None, Any] = {}
        ropes: dict[int, tuple[torch.Tensor, torch.Tensor] | None] = {}
        routed: list[torch.Tensor] = []
        h = self._embed(tokens.view(bsz, 1))
        dynamic = self.compiled and bsz > 1
        # the block's compile: flex once per batch size (``enable_compile``), SDPA once for
        # every batch and length bucket
        layer_dynamic = dynamic and not flex
        if dynamic:
            from torch import _dynamo
        for layer in self.layers:
            w = layer.window
            if w not in masks and flex:
                masks[w] = decode_blocks(positions, length, w)
            elif w not in masks and exact:  # each row's first and past-the-last entry
                hi = positions + 1
                lo = torch.zeros_like(hi) if w is None else (hi - w).clamp(min=0)
                # and where each row's shared prompt lies (``set_prompt_sources``)
                masks[w] = (lo, hi, self._prompt_rows[0, :bsz], self._prompt_rows[1, :bsz])
            elif w not in masks:
                assert dist is not None  # (B, L): position minus key index
                m = dist >= 0
                if w is not None:
                    m = m & (dist < w)
                masks[w] = m.view(bsz, 1, 1, length)
            key = self._rope_key(layer) if layer.rope is not None else 0
            if key not in ropes:  # one gather of the step's rows per distinct table
                ropes[key] = self._rope_rows(layer, pos2)
            args = (h, self.k_cache[layer.index], self.v_cache[layer.index], positions)
            if layer_dynamic:  # one shape-dynamic compile serves every batch and length
                bounds = masks[w] if isinstance(masks[w], tuple) else (masks[w],)
                for t in (h, positions, *bounds, *(ropes[key] or ())):
                    _dynamo.maybe_mark_dynamic(t, 0)
                if not isinstance(masks[w], tuple):
                    _dynamo.maybe_mark_dynamic(masks[w], 3)
            h, ex = self._regional("layer", self._decode_layer, layer, *args, ropes[key], masks[w])
            if ex is not None:
                routed.append(ex)
        experts = torch.stack(routed, dim=1) if routed else None  # (B, L, k)
        if dynamic:
            _dynamo.maybe_mark_dynamic(h, 0)
        return h, experts

    def _decode_layer(
        self,
        layer: _Layer,
        x: torch.Tensor,
        kc: torch.Tensor,
        vc: torch.Tensor,
        positions: torch.Tensor,
        rope_rows: tuple[torch.Tensor, torch.Tensor] | None,
        mask: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One block of a decode step over its own cache rows ``kc``/``vc``. Everything that
        differs between layers comes in as a tensor, so the compiled block is traced once
        and reused by every layer wired the same way (regional compilation: a fraction of
        the whole step's trace and compile time, the same kernels). ``mask``: the boolean
        ``(B, 1, 1, L)`` mask (SDPA), ``decode_blocks``' block lists (flex) or each row's
        ``(lo, hi, src, shared)`` entry bounds and shared-prompt rows (triton)."""
        bsz = x.shape[0]
        flex = self.decode_attention == "flex"
        routed: list[torch.Tensor] = []

        def attend(lay: _Layer, inp: torch.Tensor) -> torch.Tensor:
            if lay.gdn:
                assert self.recurrent is not None
                return self.recurrent.decode(lay.index, inp)
            q, k, v = self._qkv(lay, inp, rope_rows)
            rows = torch.arange(bsz, device=inp.device)
            kc[rows, :, positions] = self._to_cache(k[:, 0])
            vc[rows, :, positions] = self._to_cache(v[:, 0])
            if flex:
                att = flex_decode_attention(
                    q.transpose(1, 2),
                    self._from_cache(kc[:bsz]),
                    self._from_cache(vc[:bsz]),
                    positions,
                    mask,
                    lay.scale,
                    lay.gqa,
                )
                return self._attn_out(lay, inp, att)
            if self.decode_attention == "triton":
                lo, hi, src, shared = mask
                assert self._split_kv is not None
                # the kernel reads the stored type (FP8 included) and converts as it loads
                att = self._split_kv(
                    q[:, 0], kc[:bsz], vc[:bsz], lo, hi, src, shared, float(lay.scale)
                )
                return self._attn_out(lay, inp, att.unsqueeze(2))
            length = mask.shape[-1]  # the batch's length bucket
            att = F.scaled_dot_product_attention(
                q.transpose(1, 2),
                self._from_cache(kc[:bsz, :, :length]),
                self._from_cache(vc[:bsz, :, :length]),
                attn_mask=mask,
                scale=lay.scale,
                enable_gqa=lay.gqa,
            )
            return self._attn_out(lay, inp, att)

        h = self._block(layer, x, attend, routed)
        return h, (routed[0] if routed else None)

    def _logits_tail(self, h: torch.Tensor) -> torch.Tensor:
        return self._head(h)[:, 0]

    def _regional(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` through its compiled region when compiling is on. Dynamo and
        Inductor fail before a region runs, so on any failure the region reruns eagerly
        (its cache writes happen once) and the engine stays eager from then on."""
        return _through_region(self._regions, "decode step", name, fn, *args)

    # ---- CUDA graphs (optional, dense models on GPU) -----------------------------------------

    def enable_cuda_graphs(
        self, batch_sizes: list[int] | None = None, kv_step: int = 256, max_bs: int | None = None
    ) -> None:
        """Serve ``decode`` from CUDA graphs bucketed over batch size and KV length.

        A graph for bucket ``(bs, L)`` attends ``cache[:bs, :, :L]``; buckets are captured
        lazily on first use (``warm_graphs`` captures ahead), sharing one memory pool.
        ``kv_step`` 0 means one length bucket, the whole cache row. MoE decode switches to
        the all-experts form (static shapes); the graphs return the routed experts too.
        Padded rows write into free slots beyond the batch, which no request reads.
        ``max_bs`` (``--cuda-graph-max-bs``): larger batches decode eagerly.
        """
        if self.device.type != "cuda":
            raise UnsupportedModel("CUDA graphs need --device cuda")
        self.dense_moe = self.is_moe
        # no batch-1 bucket by default: one request pads to 2, so every bucket shares one
        # shape-dynamic compile (size 1 always specializes, which cost a compile of its own)
        default = [2**i for i in range(1, 16)] if self.max_slots > 1 else None
        self.graph_batch_sizes = graph_batch_sizes(self.max_slots, batch_sizes or default, max_bs)
        # flex, triton: each row reads only its own entries, so one length bucket (the row)
        self.graph_kv_step = (
            0 if self.decode_attention in ROW_EXACT_ATTENTION else max(0, int(kv_step))
        )
        self._graphs = {}
        self._graph_pool = torch.cuda.graph_pool_handle()

    def warm_graphs(self, max_kv_len: int | None = None) -> int:
        """Capture every bucket up to ``max_kv_len`` now (keeps capture out of timed runs)."""
        if not self.graph_batch_sizes:
            return 0
        for bs in self.graph_batch_sizes:
            for length in self._kv_buckets(max_kv_len):
                self._graph(bs, length)
        return len(self._graphs)

    def warm_step_graphs(self, modes: Sequence[str], max_kv_len: int | None = None) -> int:
        """The fused step's ``warm_graphs``: every batch bucket x KV-length bucket up to
        ``max_kv_len`` x sampling mode, captured now over padding rows (greedy, position
        0), so a run never captures mid-collection. Returns the fused graphs held."""
        if not self.graph_batch_sizes:
            return 0
        # the step's regions are shape-dynamic from their first compile (``_run_step``):
        # one compile per sampling mode serves every bucket
        for bs in sorted(self.graph_batch_sizes, reverse=True):
            self._state(bs)
            for length in self._kv_buckets(max_kv_len):
                for mode in modes:
                    self._step_graph(bs, length, mode)
        return len(self._step_graphs)

    def _kv_buckets(self, max_kv_len: int | None) -> list[int]:
        top = min(self.cache_len, max_kv_len or self.cache_len)
        return sorted(
            {
                kv_bucket(n, self.graph_kv_step, self.cache_len)
                for n in range(1, top + 1, max(1, self.graph_kv_step or top))
            }
            | {kv_bucket(top, self.graph_kv_step, self.cache_len)}
        )

    def _graph(self, bs: int, length: int) -> tuple[Any, torch.Tensor, torch.Tensor, Any]:
        key = (bs, length)
        if key not in self._graphs:
            t0 = time.perf_counter()
            tok = torch.zeros(bs, dtype=torch.long, device=self.device)
            pos = torch.zeros(bs, dtype=torch.long, device=self.device)
            # the warm-up writes K/V at position 0 of slots 0..bs-1, which may be live
            # requests' (lazy capture mid-run): keep those entries and put them back
            kept = [c[:bs, :, 0].clone() for c in self.kv_rows()]
            kept_state = self.recurrent.snapshot(bs) if self.recurrent is not None else []
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    self.decode(tok, pos, kv_len=length)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            # thread_local: CUDA work on other threads (an in-process trainer) cannot
            # invalidate a capture that happens lazily on the scheduler thread
            with torch.cuda.graph(graph, pool=self._graph_pool, capture_error_mode="thread_local"):
                out = self.decode(tok, pos, kv_len=length)
            for c, k in zip(self.kv_rows(), kept, strict=True):
                c[:bs, :, 0] = k
            if self.recurrent is not None:
                self.recurrent.restore(kept_state)
            self._graphs[key] = (graph, tok, pos, out)
            torch.cuda.synchronize(self.device)
            dt = time.perf_counter() - t0
            self.capture_s += dt
            log.info("decode graph batch=%d kv=%d captured in %.2f s", bs, length, dt)
        return self._graphs[key]

    def decode_step(
        self, tokens: torch.Tensor, positions: torch.Tensor, kv_len: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``decode`` through a captured graph when one fits, else eagerly.

        ``kv_len`` (max position + 1) lets callers that know it skip a device sync.
        """
        bsz = tokens.shape[0]
        if kv_len is None:
            kv_len = int(positions.max().item()) + 1
        if self.graph_batch_sizes:
            bucket = graph_bucket(
                bsz, kv_len, self.graph_batch_sizes, self.graph_kv_step, self.cache_len
            )
            if bucket is not None:
                graph, tok, pos, out = self._graph(*bucket)
                if bucket[0] > bsz:
                    tok[bsz:].zero_()
                    pos[bsz:].zero_()
                tok[:bsz].copy_(tokens)
                pos[:bsz].copy_(positions)
                graph.replay()
                logits, experts = out
                return logits[:bsz].clone(), None if experts is None else experts[:bsz].clone()
        return self.decode(tokens, positions, kv_len=kv_len)

    def enable_compile(self, mode: str | None = None, backend: str = "inductor") -> None:
        """Compile the decode step by region: one block (reused by every layer wired the
        same way), the LM head, and the head with sampling. On any compile error the engine
        logs it once and stays eager."""
        from runtime.compile_settings import prepare_compile

        prepare_compile(512)

        def region(fn: Callable[..., Any], dynamic: bool | None = None) -> Any:
            return torch.compile(fn, dynamic=dynamic, mode=mode, backend=backend)

        # flex: Inductor picks its split-KV decoding kernel only for a static batch size
        # (the split count depends on it); a dynamic batch gets the prefill-shaped kernel,
        # whose attention took 1.7x SDPA's at batch 256 on one NVIDIA H200. So one compile
        # per batch bucket (the length is static already: the whole cache row)
        flex = self.decode_attention == "flex"
        self._regions = {
            "layer": region(self._decode_layer, False if flex else None),
            "logits": region(self._logits_tail),
            "sample": region(self._sample_tail),
        }

    # ---- fused decode + sampling (one graph replay per step) ---------------------------------

    def load_step(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        counters: torch.Tensor,
        sampling: SamplingBatch,
    ) -> None:
        """Put a new running set (slots ``0..n-1``) into the step buffers of its batch
        bucket; ``step_sampled`` then advances them on the device, step after step."""
        n = int(tokens.shape[0])
        bs = self._bucket(n)
        self._state(bs).load(tokens, positions, counters, sampling)
        self._live = (bs, n)

    def compact_step(self, rows: list[int]) -> None:
        """After requests finish: the live step buffers keep only ``rows`` (their old row
        indices, in the survivors' new slot order), gathered on the device into the bucket
        of the smaller batch; the rows after them become padding. One index upload instead
        of rebuilding every buffer from the host (which cost ~0.5 ms of host time at 256
        rows), on a step where a rollout's requests finish one by one."""
        assert self._live is not None, "load_step first"
        n, bs = len(rows), self._bucket(len(rows))
        src, st = self._states[self._live[0]], self._state(bs)
        index = torch.tensor(rows, dtype=torch.long)
        if self.device.type == "cuda":  # through pinned memory: no wait for a step in flight
            index = index.pin_memory().to(self.device, non_blocking=True)
        for dst, old in zip(st.tensors(), src.tensors(), strict=True):
            dst[:n] = old.index_select(0, index)  # a copy first: safe when st is src
        st.pad(n)
        self._live = (bs, n)

    def _bucket(self, n: int) -> int:
        """The step-buffer rows for ``n`` live rows: the smallest graph batch that fits."""
        fits = [b for b in self.graph_batch_sizes if b >= n]
        return min(fits) if fits else n

    def _state(self, bs: int) -> StepState:
        """The step buffers of batch bucket ``bs`` (made on first use, then kept: a captured
        graph reads them)."""
        if bs not in self._states:
            self._states[bs] = StepState.empty(bs, self.device)
        return self._states[bs]

    def step_sampled(
        self, kv_len: int, mode: str
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """One decode step with sampling inside (a single graph replay when a graph fits):
        the tokens and logprobs of the live rows, and their routed experts (MoE).

        ``kv_len``: max position + 1 over the live rows (the host tracks it); ``mode``:
        ``SamplingBatch.mode``. The returned tensors are overwritten by the next step."""
        assert self._live is not None, "load_step first"
        bs, n = self._live
        bucket = None
        if self.graph_batch_sizes and self.device.type == "cuda":  # CPU: padded rows, eager
            bucket = graph_bucket(
                bs, kv_len, self.graph_batch_sizes, self.graph_kv_step, self.cache_len
            )
        if bucket is not None and bucket[0] == bs:
            graph, out = self._step_graph(bs, bucket[1], self._graph_mode(bs, bucket[1], mode))
            graph.replay()
        else:
            out = self._run_step(self._states[bs], kv_len, mode)
        toks, lps, experts = out
        return toks[:n], lps[:n], None if experts is None else experts[:n]

    def _graph_mode(self, bs: int, length: int, mode: str) -> str:
        """``mode``, or a wider sampler already captured for the bucket: the ``sample`` step
        takes the argmax on greedy rows and ``truncate`` leaves untruncated rows alone, so
        the same tokens and log-probs come back without another compile."""
        if (bs, length, mode) in self._step_graphs:
            return mode
        for wider in SAMPLER_MODES[SAMPLER_MODES.index(mode) + 1 :]:
            if (bs, length, wider) in self._step_graphs:
                return wider
        return mode

    @torch.inference_mode()
    def _run_step(
        self, st: StepState, length: int, mode: str, *, exact: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """``exact``: attend exactly ``length`` entries (a graph's own bucket, which may be
        finer than the compiled step's default buckets: the compile is shape-dynamic, so
        finer graph buckets cost captures, not compiles)."""
        if self.compiled and not exact:
            length = kv_bucket(length, COMPILE_KV_STEP, self.cache_len)
        # forward, then sample and advance the inputs in place (token, position, counter)
        h, experts = self._decode_hidden(st.tokens, st.positions, length)
        state = st.tensors()
        if self.compiled and st.tokens.shape[0] > 1:
            from torch import _dynamo

            for t in state:  # one shape-dynamic compile serves every batch bucket
                _dynamo.maybe_mark_dynamic(t, 0)
        toks, lps = self._regional("sample", self._sample_tail, h, mode, *state)
        return toks, lps, experts

    def _sample_tail(
        self, h: torch.Tensor, mode: str, *state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """LM head, sampling, and the in-place advance of the step's inputs (``state``:
        ``StepState.tensors()``)."""
        tokens, positions, counters, temps, greedy, seeds, trunc, top_k, top_p, min_p = state
        logits = self._head(h)[:, 0]
        toks, lps = sample_rows(
            logits, temps, greedy, seeds, counters, trunc, top_k, top_p, min_p, mode
        )
        tokens.copy_(toks)
        # padding rows advance too; the clamp keeps their cache writes inside the rows
        positions.add_(1).clamp_(max=self.cache_len - 1)
        counters.add_(1)
        return toks, lps

    def _step_graph(self, bs: int, length: int, mode: str) -> tuple[Any, Any]:
        """Capture the fused step over the bucket's buffers; the warm-up runs advance the
        buffers, so they are restored (their cache writes are the ones the step makes)."""
        key = (bs, length, mode)
        if key not in self._step_graphs:
            t0 = time.perf_counter()
            st = self._states[bs]
            kept = [t.clone() for t in st.tensors()]
            kept_state = self.recurrent.snapshot(bs) if self.recurrent is not None else []
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    self._run_step(st, length, mode, exact=True)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._graph_pool, capture_error_mode="thread_local"):
                out = self._run_step(st, length, mode, exact=True)
            for t, k in zip(st.tensors(), kept, strict=True):
                t.copy_(k)
            if self.recurrent is not None:
                self.recurrent.restore(kept_state)
            self._step_graphs[key] = (graph, out)
            torch.cuda.synchronize(self.device)
            dt = time.perf_counter() - t0
            self.capture_s += dt
            log.info(
                "decode+sample graph batch=%d kv=%d %s captured in %.2f s", bs, length, mode, dt
            )
        return self._step_graphs[key]

    def set_prompt_sources(self, sources: list[tuple[int, int]]) -> None:
        """Slot ``b < len(sources)`` reads its entries below ``sources[b][1]`` from slot
        ``sources[b][0]`` (its group's prompt, held once); every later slot reads only its
        own. One upload when they changed, ordered on the stream after the work already
        queued (a decode step in flight still reads the sources it was launched with)."""
        if not self.shares_prompts:
            raise ValueError(f"{self.decode_attention} decode attention reads only its own rows")
        rows = torch.stack([torch.arange(self.max_slots), torch.zeros(self.max_slots).long()])
        if sources:
            rows[:, : len(sources)] = torch.tensor(sources, dtype=torch.long).T
        if torch.equal(rows, self._prompt_rows_host):
            return
        self._prompt_rows_host = rows
        if self.device.type == "cuda":  # through pinned memory: no wait for a step in flight
            rows = rows.pin_memory().to(self.device, non_blocking=True)
        self._prompt_rows.copy_(rows)

    def move_slots(self, srcs: list[int], dsts: list[int], length: int, kv: bool = True) -> None:
        """Copy slots ``srcs[i]`` to ``dsts[i]`` for positions ``0..length-1``: one gather
        and one scatter per cache tensor, however many pairs (a group's prompt copied to its
        samples' slots, survivors compacted after a finish), not a copy per pair per layer.
        Pass the longest pair's length: the entries past a shorter row's length are never
        read before a decode step writes them. ``kv`` False: the recurrent state alone (a
        sample that reads its prompt's K/V from the group's slot)."""
        pairs = [(s, d) for s, d in zip(srcs, dsts, strict=True) if s != d]
        if not pairs or (kv and length <= 0):
            return
        if kv:
            self._move_kv(pairs, length)
        if self.recurrent is not None:
            for s, d in pairs:
                self.recurrent.move(s, d)

    def copy_kv(self, srcs: list[int], dsts: list[int], length: int) -> None:
        """``move_slots`` for the K/V alone (a shared prompt handed to another slot)."""
        pairs = [(s, d) for s, d in zip(srcs, dsts, strict=True) if s != d]
        if pairs and length > 0:
            self._move_kv(pairs, length)

    def _move_kv(self, pairs: list[tuple[int, int]], length: int) -> None:
        """Each ``(src, dst)`` slot pair's K/V entries ``0..length-1``, every layer."""
        if len(pairs) == 1:  # one row: a direct copy, no gathered temporary
            ((s, d),) = pairs
            # the whole store in one copy, or each layer's K and V apart
            store = self._kv_store
            for c in [store] if store is not None else [r[None] for r in self.kv_rows()]:
                c = self._raw(c)
                c[:, d, :, :length] = c[:, s, :, :length]
        else:
            src = torch.tensor([s for s, _ in pairs], dtype=torch.long, device=self.device)
            dst = torch.tensor([d for _, d in pairs], dtype=torch.long, device=self.device)
            # layer by layer even with one store: the gathered temporary stays one layer's
            # (a group's 112 followers at 244 tokens gather 112 MB a layer, 3.6 GB at once)
            for c in self.kv_rows():
                head = self._raw(c)[:, :, :length]
                head.index_copy_(0, dst, head.index_select(0, src))  # gathered first

    def read_kv(self, slot: int, start: int, end: int) -> list[torch.Tensor]:
        """A copy of ``slot``'s K/V for positions ``start..end-1``, for the prefix cache: one
        ``(rows, heads, tokens, head_dim)`` tensor (each attention layer's K, then each
        one's V, as ``kv_rows``), so a sequence enters the tree in one copy, not one per
        layer."""
        if self._kv_store is not None:
            return [self._kv_store[:, slot, :, start:end].clone()]
        return [torch.stack([c[slot, :, start:end] for c in self.kv_rows()])]

    def write_kv(self, slot: int, start: int, kv: list[torch.Tensor]) -> int:
        """Copy ``read_kv``-shaped K/V into ``slot`` from position ``start``; its length."""
        n = int(kv[0].shape[-2]) if kv else 0
        store = self._kv_store
        if store is not None and len(kv) == 1 and kv[0].shape[0] == store.shape[0]:
            store[:, slot, :, start : start + n].copy_(kv[0])
            return n
        rows = self.kv_rows()
        parts = [p for t in kv for p in t.unbind(0)]
        if len(parts) != len(rows):
            raise ValueError(f"K/V for {len(parts)} cache rows, the model has {len(rows)}")
        torch._foreach_copy_(
            [self._raw(c[slot, :, start : start + n]) for c in rows], [self._raw(p) for p in parts]
        )
        return n

    def kv_rows(self) -> list[torch.Tensor]:
        """The attention layers' K and V caches (GatedDeltaNet layers have none)."""
        return [c for c in self.k_cache + self.v_cache if c.numel()]

    def kv_bytes(self) -> int:
        """KV cache plus the recurrent state rows: the engine's whole per-slot memory."""
        state = self.recurrent.nbytes() if self.recurrent is not None else 0
        return state + sum(t.numel() * t.element_size() for t in self.kv_rows())

    def kv_bytes_per_token(self) -> int:
        return self.kv_bytes() // max(1, self.max_slots * self.cache_len)


@dataclass(eq=False)
class StepState:
    """Inputs of the fused decode + sampling step for ``bs`` rows: fixed buffers that a
    captured graph reads and advances. Rows past the live ones are padding: greedy, at
    position 0 of free slots (no request reads them)."""

    tokens: torch.Tensor
    positions: torch.Tensor
    counters: torch.Tensor
    temps: torch.Tensor
    greedy: torch.Tensor
    seeds: torch.Tensor
    trunc: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor
    min_p: torch.Tensor

    @classmethod
    def empty(cls, bs: int, device: torch.device) -> StepState:
        def z(dtype: torch.dtype) -> torch.Tensor:
            return torch.zeros(bs, dtype=dtype, device=device)

        st = cls(
            z(torch.long), z(torch.long), z(torch.long), z(torch.float32), z(torch.bool),
            z(torch.long), z(torch.bool), z(torch.long), z(torch.float32), z(torch.float32),
        )  # fmt: skip
        st.pad(0)
        return st

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return (
            self.tokens, self.positions, self.counters, self.temps, self.greedy,
            self.seeds, self.trunc, self.top_k, self.top_p, self.min_p,
        )  # fmt: skip

    def pad(self, n: int) -> None:
        """Rows ``n..`` become padding."""
        for t, v in zip(self.tensors(), (0, 0, 0, 1.0, True, 0, False, -1, 1.0, 0.0), strict=True):
            t[n:] = v

    def load(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        counters: torch.Tensor,
        sampling: SamplingBatch,
    ) -> None:
        n = int(tokens.shape[0])
        rows = (sampling.row_trunc, sampling.row_top_k, sampling.row_top_p, sampling.row_min_p)
        assert all(r is not None for r in rows), "SamplingBatch.build fills the row tensors"
        src = (tokens, positions, counters, sampling.temps, sampling.greedy, sampling.seeds, *rows)
        for t, v in zip(self.tensors(), src, strict=True):
            t[:n].copy_(v)  # type: ignore[union-attr]
        self.pad(n)


def default_decode_attention(device: torch.device) -> str:
    """The split-KV Triton kernel on a GPU (each row reads only its own entries: on one
    NVIDIA H100 the decode steps ran 7-13% faster than with SDPA's length buckets at batch
    64 and 256), SDPA elsewhere (a CPU runs no Triton kernel)."""
    if device.type == "cuda" and importlib.util.find_spec("triton") is not None:
        return "triton"
    return "sdpa"


def graph_batch_sizes(
    max_slots: int, sizes: list[int] | None = None, max_bs: int | None = None
) -> list[int]:
    """Batch buckets: the given sizes (clipped to the slots) or powers of two, up to
    ``top`` = min(max_slots, max_bs) and always including ``top``; a batch above ``max_bs``
    has no graph and decodes eagerly (SGLang's ``--cuda-graph-max-bs``)."""
    top = max_slots if max_bs is None else max(1, min(max_slots, int(max_bs)))
    base = sizes or [2**i for i in range(16)]
    return sorted({min(int(b), top) for b in base if int(b) > 0} | {top})


def kv_pool_tokens(
    max_total_tokens: int | None,
    *,
    bytes_per_token: int,
    mem_fraction_static: float | None = None,
    total_bytes: int | None = None,
    used_bytes: int | None = None,
) -> int | None:
    """The KV token pool: ``mem_fraction_static`` of the device's memory holds the weights
    (already loaded: ``used_bytes``, this engine's own memory) and the pool, as in SGLang;
    ``max_total_tokens`` caps it. None: no bound from either (the slots x context length).
    SGLang counts the whole device's use instead, so what else holds the GPU at that moment
    (a colocated trainer) changes its pool; counting its own keeps this one fixed."""
    pool = max_total_tokens
    if mem_fraction_static is not None and total_bytes is not None and used_bytes is not None:
        room = int(total_bytes * mem_fraction_static) - used_bytes
        if room < bytes_per_token:
            raise ValueError(
                f"mem_fraction_static {mem_fraction_static} leaves no room for the KV cache "
                f"({used_bytes / 2**30:.2f} GiB of weights in "
                f"{total_bytes / 2**30:.2f} GiB)"
            )
        by_memory = room // max(1, bytes_per_token)
        pool = by_memory if pool is None else min(pool, by_memory)
    return pool


def prefix_cache_tokens(
    max_total_tokens: int,
    *,
    bytes_per_token: int,
    reserved_bytes: int | None = None,
    total_bytes: int | None = None,
    mem_fraction_static: float | None = None,
) -> int:
    """The radix tree's token budget. Its copies live outside the slots, so on a GPU they
    are bounded by memory as well as by ``max_total_tokens``: with ``mem_fraction_static``
    the engine's whole share (weights, slots, tree) stays inside that fraction of the device,
    as SGLang's tree stays inside its pool, so a trainer colocated on the GPU keeps the rest;
    without it, half of what the engine left unused. ``reserved_bytes`` is this engine's own
    memory after its slots are allocated."""
    budget = max(0, int(max_total_tokens))
    if reserved_bytes is None or total_bytes is None:
        return budget
    per = max(1, int(bytes_per_token))
    if mem_fraction_static is not None:
        room = int(total_bytes * mem_fraction_static) - reserved_bytes
    else:
        room = (total_bytes - reserved_bytes) // 2
    return min(budget, max(0, room) // per)


def kv_bucket(kv_len: int, step: int, capacity: int) -> int:
    """Attended length for a step whose longest request needs ``kv_len`` entries."""
    if step <= 0:
        return capacity
    return min(capacity, -(-kv_len // step) * step)


def graph_bucket(
    bsz: int, kv_len: int, batch_sizes: list[int], kv_step: int, capacity: int
) -> tuple[int, int] | None:
    """The ``(batch, length)`` graph serving a step, or None (run eagerly)."""
    fits = [b for b in batch_sizes if b >= bsz]
    if not fits or kv_len > capacity:
        return None
    return min(fits), kv_bucket(kv_len, kv_step, capacity)
