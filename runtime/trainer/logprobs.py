"""Token log-probs and entropies over a large vocabulary, a chunk of rows at a time.

``log_softmax`` over ``(N, 100k)`` logits in fp32 keeps an ``N x V`` fp32 tensor alive for
backward (1.6 GB per 4k response tokens) and another for the entropy. Here the forward keeps
only the logits (in their own dtype, bf16 under autocast) and one fp32 log-normaliser per
row; backward rebuilds the softmax chunk by chunk. The entropy's gradient is computed only
when the loss uses it (autograd hands ``None`` otherwise).
"""

from __future__ import annotations

from typing import Any

import torch

CHUNK_ROWS = 1024  # fp32 scratch per chunk: 1024 x 100k x 4 B = 0.4 GB


class _ChunkedLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, logits: torch.Tensor, rows: torch.Tensor, targets: torch.Tensor, chunk: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n = rows.shape[0]
        dt = torch.promote_types(logits.dtype, torch.float32)
        logp = torch.empty(n, dtype=dt, device=logits.device)
        lse = torch.empty_like(logp)
        ent = torch.empty_like(logp)
        for s in range(0, n, chunk):
            z = logits.index_select(0, rows[s : s + chunk]).to(dt)
            norm = torch.logsumexp(z, dim=-1)
            lse[s : s + chunk] = norm
            logp[s : s + chunk] = z.gather(-1, targets[s : s + chunk, None]).squeeze(-1) - norm
            p = torch.exp(z - norm[:, None])
            ent[s : s + chunk] = norm - (p * z).sum(-1)
        ctx.save_for_backward(logits, rows, targets, lse, ent)
        ctx.chunk = chunk
        ctx.set_materialize_grads(False)
        return logp, ent

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, g_logp: torch.Tensor | None, g_ent: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, None, None, None]:
        logits, rows, targets, lse, ent = ctx.saved_tensors
        if g_logp is None and g_ent is None:
            return None, None, None, None
        grad = torch.zeros_like(logits)
        chunk = ctx.chunk
        for s in range(0, rows.shape[0], chunk):
            sl = slice(s, s + chunk)
            logp_all = logits.index_select(0, rows[sl]).to(lse.dtype) - lse[sl, None]
            p = torch.exp(logp_all)
            g = torch.zeros_like(p)
            if g_logp is not None:
                g.sub_(p * g_logp[sl, None])
                g.scatter_add_(-1, targets[sl, None], g_logp[sl, None].to(g.dtype))
            if g_ent is not None:  # dH/dz_j = -p_j (log p_j + H)
                g.sub_(p * (logp_all + ent[sl, None]) * g_ent[sl, None])
            grad.index_copy_(0, rows[sl], g.to(grad.dtype))
        return grad, None, None, None


def token_logprobs(
    logits: torch.Tensor,
    targets: torch.Tensor,
    *,
    rows: torch.Tensor | None = None,
    chunk: int = CHUNK_ROWS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs of ``targets`` and entropies, in fp32 (or wider), for the logits rows
    ``rows`` of ``logits (T, V)`` (all rows when None; no copy of the selected rows is
    kept: backward scatters into a zero gradient of the full logits)."""
    if rows is None:
        rows = torch.arange(logits.shape[0], device=logits.device)
    if rows.shape[0] == 0:
        empty = logits.new_zeros(0, dtype=torch.float32)
        return empty + logits.sum() * 0, empty
    out: tuple[torch.Tensor, torch.Tensor] = _ChunkedLogprobs.apply(logits, rows, targets, chunk)
    return out
