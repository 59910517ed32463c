"""Inference forward over an OLMo-core ``Transformer`` with a preallocated KV cache.

The OLMo-core module's own forward recomputes the whole sequence; a rollout server must
prefill a prompt once and then decode one token per step for a whole batch. This module
reads the blocks' parameters and sub-modules (norms, feed-forwards, routers) and runs its
own attention over a per-slot KV cache. It must agree with ``model(input_ids)`` on logits
(see tests/unit/test_engine_forward.py).

Cache layout: one ``[slots, n_kv_heads, capacity, head_dim]`` tensor for keys and one for
values per layer. The scheduler keeps running requests in slots ``0..B-1`` (it compacts on
finish), so a decode step attends over the view ``cache[:B, :, :L]`` without gathering.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F


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


def _block_layer(block: Any) -> _Layer:
    from olmo_core.nn.attention import Attention
    from olmo_core.nn.rope import RotaryEmbedding
    from olmo_core.nn.transformer import block as B

    attn = block.attention
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


class InferenceModel:
    """Prefill/decode over an OLMo-core Transformer; owns the KV cache."""

    def __init__(
        self,
        model: Any,
        *,
        max_slots: int,
        capacity: int,
        device: torch.device | str = "cpu",
    ):
        self.model: Any = model.eval()
        self.device = torch.device(device)
        self.max_slots = max_slots
        self.capacity = capacity
        if getattr(model, "embeddings", None) is None or getattr(model, "lm_head", None) is None:
            raise UnsupportedModel("pipeline-split models are not supported")
        from olmo_core.nn.lm_head import LMHead

        if type(model.lm_head) is not LMHead:
            raise UnsupportedModel(f"LM head {type(model.lm_head).__name__} is not supported")
        self.layers = [_block_layer(b) for b in model.blocks.values()]
        for i, layer in enumerate(self.layers):
            layer.index = i
        self.moe_layers = [i for i, layer in enumerate(self.layers) if layer.moe is not None]
        self.top_k = self.layers[self.moe_layers[0]].moe.top_k if self.moe_layers else 0
        self.dtype = model.embeddings.weight.dtype
        self._rope_tables: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.k_cache: list[torch.Tensor] = []
        self.v_cache: list[torch.Tensor] = []
        for layer in self.layers:
            shape = (max_slots, layer.attn.n_kv_heads, capacity, layer.attn.head_dim)
            self.k_cache.append(torch.zeros(shape, dtype=self.dtype, device=self.device))
            self.v_cache.append(torch.zeros(shape, dtype=self.dtype, device=self.device))

    @property
    def is_moe(self) -> bool:
        return bool(self.moe_layers)

    # ---- pieces -------------------------------------------------------------------------

    def _rope(self, layer: _Layer) -> tuple[torch.Tensor, torch.Tensor]:
        key = id(layer.rope)
        if key not in self._rope_tables:
            sin, cos = layer.rope._get_rotary_embedding(self.capacity, self.device)
            self._rope_tables[key] = (sin.float(), cos.float())
        return self._rope_tables[key]

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

    def _qkv(
        self, layer: _Layer, x: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        attn = layer.attn
        bsz, t, _ = x.shape
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
            sin, cos = self._rope(layer)
            s = sin[positions].unsqueeze(2)
            c = cos[positions].unsqueeze(2)
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
        out = torch.zeros_like(flat)
        for e in torch.unique(idx).tolist():
            tok, slot = (idx == e).nonzero(as_tuple=True)
            h = flat[tok]
            y = (F.silu(h @ w1[e]) * (h @ w3[e])) @ w2[e]
            out.index_add_(0, tok, (y * w[tok, slot].unsqueeze(-1).to(y.dtype)).to(out.dtype))
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
                dense = h + layer.ffn(layer.ffn_norm(h))
            else:
                sparse = layer.moe_norm(self._moe(layer, x, routed))
                h = x + layer.attn_norm(attention(x))
                dense = h + layer.ffn_norm(layer.ffn(h))
            return sparse + dense

        def ff(inp: torch.Tensor) -> torch.Tensor:
            if layer.moe is not None:
                return self._moe(layer, inp, routed)
            return layer.ffn(inp)

        if layer.kind == "pre":
            h = torch.add(x, attention(layer.attn_norm(x)), alpha=layer.attn_alpha)
            return torch.add(h, ff(layer.ffn_norm(h)), alpha=layer.ffn_alpha)
        if layer.kind == "post":
            h = torch.add(x, layer.attn_norm(attention(x)), alpha=layer.attn_alpha)
            return torch.add(h, layer.ffn_norm(ff(h)), alpha=layer.ffn_alpha)
        h = torch.add(
            x, layer.post_attn_norm(attention(layer.attn_norm(x))), alpha=layer.attn_alpha
        )
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
        t = len(token_ids)
        if not 0 < t <= self.capacity:
            raise ValueError(f"prompt length {t} outside 1..{self.capacity}")
        ids = torch.tensor([token_ids], dtype=torch.long, device=self.device)
        positions = torch.arange(t, device=self.device).unsqueeze(0)
        masks: dict[int | None, torch.Tensor | None] = {}

        def attend(layer: _Layer, inp: torch.Tensor) -> torch.Tensor:
            q, k, v = self._qkv(layer, inp, positions)
            li = layer.index
            self.k_cache[li][slot, :, :t] = k[0].transpose(0, 1)
            self.v_cache[li][slot, :, :t] = v[0].transpose(0, 1)
            w = layer.window
            if w not in masks:
                if w is None or w >= t:
                    masks[w] = None
                else:
                    i = torch.arange(t, device=self.device)
                    d = i.unsqueeze(1) - i.unsqueeze(0)
                    masks[w] = (d >= 0) & (d < w)
            mask = masks[w]
            att = F.scaled_dot_product_attention(
                q.transpose(1, 2),
                k.transpose(1, 2),
                v.transpose(1, 2),
                attn_mask=mask,
                is_causal=mask is None,
                scale=layer.scale,
                enable_gqa=True,
            )
            return self._attn_out(layer, inp, att)

        routed: list[torch.Tensor] = []
        h = self._embed(ids)
        for layer in self.layers:
            h = self._block(layer, h, attend, routed)
        logits = self._head(h if all_logits else h[:, -1:])[0]
        experts = torch.stack(routed, dim=1) if routed else None  # (T, L, k)
        return (logits if all_logits else logits[-1]), experts

    @torch.inference_mode()
    def decode(
        self, tokens: torch.Tensor, positions: torch.Tensor, kv_len: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One step for slots ``0..B-1``: ``tokens[b]`` sits at ``positions[b]``.

        ``kv_len`` bounds the attended cache length (default: max position + 1); CUDA-graph
        capture passes the full capacity so shapes stay static.
        """
        bsz = tokens.shape[0]
        length = int(positions.max().item()) + 1 if kv_len is None else kv_len
        rows = torch.arange(bsz, device=self.device)
        pos2 = positions.view(bsz, 1)
        j = torch.arange(length, device=self.device).view(1, -1)
        dist = pos2 - j  # (B, L)
        masks: dict[int | None, torch.Tensor] = {}

        def attend(layer: _Layer, inp: torch.Tensor) -> torch.Tensor:
            q, k, v = self._qkv(layer, inp, pos2)
            li = layer.index
            kc, vc = self.k_cache[li], self.v_cache[li]
            kc[rows, :, positions] = k[:, 0]
            vc[rows, :, positions] = v[:, 0]
            w = layer.window
            if w not in masks:
                m = dist >= 0
                if w is not None:
                    m = m & (dist < w)
                masks[w] = m.view(bsz, 1, 1, length)
            att = F.scaled_dot_product_attention(
                q.transpose(1, 2),
                kc[:bsz, :, :length],
                vc[:bsz, :, :length],
                attn_mask=masks[w],
                scale=layer.scale,
                enable_gqa=True,
            )
            return self._attn_out(layer, inp, att)

        routed: list[torch.Tensor] = []
        h = self._embed(tokens.view(bsz, 1))
        for layer in self.layers:
            h = self._block(layer, h, attend, routed)
        logits = self._head(h)[:, 0]
        experts = torch.stack(routed, dim=1) if routed else None  # (B, L, k)
        return logits, experts

    # ---- CUDA graphs (optional, dense models on GPU) -----------------------------------------

    def enable_cuda_graphs(self, batch_sizes: list[int] | None = None) -> None:
        """Capture ``decode`` for batch-size buckets over the full cache length.

        MoE layers pick experts data-dependently (not capturable), so they are refused.
        Padded rows write into free slots beyond the batch, which no request reads.
        """
        if self.device.type != "cuda":
            raise UnsupportedModel("CUDA graphs need --device cuda")
        if self.is_moe:
            raise UnsupportedModel("CUDA graphs are not supported for MoE models")
        sizes = batch_sizes or sorted({min(2**i, self.max_slots) for i in range(16)})
        self._graphs: dict[int, tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        for bs in sorted(set(sizes)):
            tok = torch.zeros(bs, dtype=torch.long, device=self.device)
            pos = torch.zeros(bs, dtype=torch.long, device=self.device)
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    self.decode(tok, pos, kv_len=self.capacity)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out, _ = self.decode(tok, pos, kv_len=self.capacity)
            self._graphs[bs] = (graph, tok, pos, out)

    def decode_step(
        self, tokens: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``decode`` through a captured graph when one fits, else eagerly."""
        graphs = getattr(self, "_graphs", None)
        bsz = tokens.shape[0]
        if graphs:
            fits = [b for b in graphs if b >= bsz]
            if fits:
                graph, tok, pos, out = graphs[min(fits)]
                tok.zero_()
                pos.zero_()
                tok[:bsz].copy_(tokens)
                pos[:bsz].copy_(positions)
                graph.replay()
                return out[:bsz].clone(), None
        return self.decode(tokens, positions)

    def move_slot(self, src: int, dst: int, length: int) -> None:
        """Copy one request's cache to another slot (compaction after a finish)."""
        if src == dst or length <= 0:
            return
        for kc, vc in zip(self.k_cache, self.v_cache, strict=True):
            kc[dst, :, :length] = kc[src, :, :length]
            vc[dst, :, :length] = vc[src, :, :length]

    def kv_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k_cache + self.v_cache)
