"""Token log-probs and entropies over a large vocabulary, a chunk of rows at a time.

``log_softmax`` over ``(N, 100k)`` logits in fp32 keeps an ``N x V`` fp32 tensor alive for
backward (1.6 GB per 4k response tokens) and another for the entropy. Here the forward keeps
only the logits (in their own dtype, bf16 under autocast) and one fp32 log-normaliser per
row; backward rebuilds the softmax chunk by chunk. The entropy's gradient is computed only
when the loss uses it (autograd hands ``None`` otherwise).
"""

from __future__ import annotations

import bisect
from typing import Any

import torch

CHUNK_ROWS = 1024  # logits rows per chunk; fp32 scratch 1024 x 100k x 4 B = 0.4 GB


def _spans(rows: list[int], total: int, chunk: int) -> list[tuple[int, int, int]]:
    """``(a, b, lo)``: selected rows ``a..b-1`` (sorted) lie in logits rows ``lo..lo+chunk-1``.

    Every gather then reads a ``chunk x V`` view, never the whole ``T x V`` logits, which at
    a 32K context hold more than 2**31 elements (a 32K GRPO step on one NVIDIA H200 hit a
    CUDA gather-kernel index assert with index_select over the whole tensor; that this is
    the cause is a hypothesis not yet checked on the GPU)."""
    out = []
    a = 0
    for lo in range(0, total, chunk):
        b = bisect.bisect_left(rows, lo + chunk, a)
        if b > a:
            out.append((a, b, lo))
        a = b
    return out


class _ChunkedLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        logits: torch.Tensor,
        rows: torch.Tensor,
        targets: torch.Tensor,
        spans: list[tuple[int, int, int]],
        chunk: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n = rows.shape[0]
        dt = torch.promote_types(logits.dtype, torch.float32)
        logp = torch.empty(n, dtype=dt, device=logits.device)
        lse = torch.empty_like(logp)
        ent = torch.empty_like(logp)
        for a, b, lo in spans:
            z = logits[lo : lo + chunk].index_select(0, rows[a:b] - lo).to(dt)
            norm = torch.logsumexp(z, dim=-1)
            lse[a:b] = norm
            logp[a:b] = z.gather(-1, targets[a:b, None]).squeeze(-1) - norm
            p = torch.exp(z - norm[:, None])
            ent[a:b] = norm - (p * z).sum(-1)
        ctx.save_for_backward(logits, rows, targets, lse, ent)
        ctx.spans, ctx.chunk = spans, chunk
        ctx.set_materialize_grads(False)
        return logp, ent

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, g_logp: torch.Tensor | None, g_ent: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, None, None, None, None]:
        logits, rows, targets, lse, ent = ctx.saved_tensors
        if g_logp is None and g_ent is None:
            return None, None, None, None, None
        grad = torch.zeros_like(logits)
        chunk = ctx.chunk
        for a, b, lo in ctx.spans:
            local = rows[a:b] - lo
            logp_all = logits[lo : lo + chunk].index_select(0, local).to(lse.dtype)
            logp_all = logp_all - lse[a:b, None]
            p = torch.exp(logp_all)
            g = torch.zeros_like(p)
            if g_logp is not None:
                g.sub_(p * g_logp[a:b, None])
                g.scatter_add_(-1, targets[a:b, None], g_logp[a:b, None].to(g.dtype))
            if g_ent is not None:  # dH/dz_j = -p_j (log p_j + H)
                g.sub_(p * (logp_all + ent[a:b, None]) * g_ent[a:b, None])
            grad[lo : lo + chunk].index_copy_(0, local, g.to(grad.dtype))
        return grad, None, None, None, None


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
    host = rows.tolist()
    if any(x > y for x, y in zip(host, host[1:], strict=False)):  # unsorted: sort, then undo
        order = torch.argsort(rows)
        lp, ent = token_logprobs(logits, targets[order], rows=rows[order], chunk=chunk)
        inv = torch.empty_like(order)
        inv[order] = torch.arange(order.numel(), device=order.device)
        return lp[inv], ent[inv]
    spans = _spans(host, logits.shape[0], chunk)
    out: tuple[torch.Tensor, torch.Tensor] = _ChunkedLogprobs.apply(
        logits, rows, targets, spans, chunk
    )
    return out
