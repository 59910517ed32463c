"""GatedDeltaNet layers in the embedded engine: per-slot recurrent state beside the KV cache.

A GatedDeltaNet layer (``olmo_hybrid`` checkpoints) has no keys and values to cache: a
sequence's past is its recurrent state, ``(n_v_heads, head_k_dim, head_v_dim)`` in fp32,
plus the last ``conv_size - 1`` inputs of the three short convolutions. Both live here,
one row per engine slot, like the attention layers' KV rows: prefill writes a slot's row
(from a zero state), decode advances rows ``0..B-1`` in place (static shapes, so a decode
step stays compilable and graph-capturable), compaction moves a row with its request.

Prefill runs OLMo-core's own delta-rule dispatch (fla's chunked kernel on GPU, its torch
reference elsewhere, ``runtime.models.gdn_cpu``) with ``output_final_state``; decode runs
one step of the recurrence that fla's ``fused_recurrent`` kernel computes.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from runtime.models.gdn_cpu import gated_delta_step, install_cpu_gdn_fallbacks, l2norm


def is_gdn(mixer: Any) -> bool:
    return type(mixer).__name__ == "GatedDeltaNet"


class RecurrentState:
    """Conv and recurrent state rows of every GatedDeltaNet layer, ``slots`` rows each."""

    def __init__(self, mixers: dict[int, Any], slots: int, dtype: torch.dtype, device: Any):
        install_cpu_gdn_fallbacks()
        self.mixers = mixers
        self.conv: dict[int, torch.Tensor] = {}
        self.state: dict[int, torch.Tensor] = {}
        for li, m in mixers.items():
            channels = 2 * m.key_dim + m.value_dim
            self.conv[li] = torch.zeros(
                slots, channels, m.conv_size - 1, dtype=dtype, device=device
            )
            shape = (slots, m.n_v_heads, m.head_k_dim, m.head_v_dim)
            self.state[li] = torch.zeros(shape, dtype=torch.float32, device=device)

    def tensors(self) -> list[torch.Tensor]:
        return [*self.conv.values(), *self.state.values()]

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors())

    def move(self, src: int, dst: int) -> None:
        for t in self.tensors():
            t[dst] = t[src]

    def snapshot(self, rows: int) -> list[torch.Tensor]:
        """Rows ``0..rows-1`` (a graph capture's warm-up advances them: put them back)."""
        return [t[:rows].clone() for t in self.tensors()]

    def restore(self, kept: list[torch.Tensor]) -> None:
        for t, k in zip(self.tensors(), kept, strict=True):
            t[: k.shape[0]].copy_(k)

    # ---- forward ---------------------------------------------------------------------------

    @staticmethod
    def _gates(m: Any, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        beta = m.w_b(x).sigmoid()
        if m.allow_neg_eigval:
            beta = beta * 2.0
        g = -m.A_log.float().exp() * F.softplus(m.w_a(x).float() + m.dt_bias)
        return g, beta

    @staticmethod
    def _heads(m: Any, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if m.n_v_heads > m.n_heads:
            rep = m.n_v_heads // m.n_heads
            q, k = q.repeat_interleave(rep, dim=-2), k.repeat_interleave(rep, dim=-2)
        return q, k

    @staticmethod
    def _out(m: Any, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        bsz, t, _ = x.shape
        gate = m.w_g(x).view(bsz, t, -1, m.head_v_dim)
        return m.w_out(m.o_norm(o.contiguous(), gate).reshape(bsz, t, -1))

    def prefill(self, li: int, x: torch.Tensor, lens: list[int], slots: list[int]) -> torch.Tensor:
        """``x (B, T, d)`` right-padded rows; fill each row's slot, return ``(B, T, d)``
        (zeros past a row's length)."""
        from olmo_core.nn.attention import recurrent

        m = self.mixers[li]
        out = torch.zeros_like(x)
        width = m.conv_size - 1
        for b, (n, slot) in enumerate(zip(lens, slots, strict=True)):
            xb = x[b : b + 1, :n]
            qkv = [m.w_q(xb), m.w_k(xb), m.w_v(xb)]
            tail = torch.cat(qkv, dim=-1)[0, -width:].transpose(0, 1)  # (C, <=width)
            self.conv[li][slot].zero_()
            self.conv[li][slot, :, width - tail.shape[1] :] = tail
            q, k, v = (
                conv(x=t).view(1, n, -1, d)
                for conv, t, d in zip(
                    (m.q_conv1d, m.k_conv1d, m.v_conv1d),
                    qkv,
                    (m.head_k_dim, m.head_k_dim, m.head_v_dim),
                    strict=True,
                )
            )
            q, k = self._heads(m, q, k)
            g, beta = self._gates(m, xb)
            o, final = recurrent.dispatch_chunk_gated_delta_rule(
                q=q, k=k, v=v, g=g, beta=beta, output_final_state=True,
                use_qk_l2norm_in_kernel=True,
            )  # fmt: skip
            self.state[li][slot] = final[0].float()
            out[b : b + 1, :n] = self._out(m, xb, o)
        return out

    def decode(self, li: int, x: torch.Tensor) -> torch.Tensor:
        """One token for slots ``0..B-1``: ``x (B, 1, d)``; advances their rows in place."""
        m = self.mixers[li]
        bsz = x.shape[0]
        cur = torch.cat([m.w_q(x), m.w_k(x), m.w_v(x)], dim=-1)[:, 0]  # (B, C)
        conv = self.conv[li][:bsz]
        window = torch.cat([conv, cur.unsqueeze(-1).to(conv.dtype)], dim=-1)  # (B, C, W)
        weight = torch.cat([m.q_conv1d.weight, m.k_conv1d.weight, m.v_conv1d.weight])[:, 0]
        y = (window.to(weight.dtype) * weight).sum(-1)
        biases = [c.bias for c in (m.q_conv1d, m.k_conv1d, m.v_conv1d)]
        if biases[0] is not None:
            y = y + torch.cat(biases)
        y = F.silu(y).to(x.dtype)
        conv.copy_(window[..., 1:])
        q, k, v = torch.split(y, [m.key_dim, m.key_dim, m.value_dim], dim=-1)
        q = l2norm(q.float().view(bsz, -1, m.head_k_dim))
        k = l2norm(k.float().view(bsz, -1, m.head_k_dim))
        q, k = self._heads(m, q, k)
        g, beta = self._gates(m, x[:, 0])
        state = self.state[li][:bsz]
        o, new = gated_delta_step(q, k, v.view(bsz, -1, m.head_v_dim), g, beta, state)
        state.copy_(new)
        return self._out(m, x, o.to(x.dtype).unsqueeze(1))
