"""Pure-torch fallbacks for OLMo-core's MoE token routing ops (CPU tests and CPU runs).

OLMo-core's MoEs route tokens with triton kernels (``binned_gather``/``binned_scatter`` for
the capacity-factor MLP, ``gather``/``scatter`` for the dropless one) that assert on CPU. These fallbacks implement the
same semantics (tokens beyond an expert's capacity are dropped, outputs are weighted and
summed over top-k) with differentiable index ops; CUDA tensors keep the original kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from olmo_core.ops import moe as moe_ops

_PATCHED = False


def _slots(bins: torch.Tensor, capacity: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(slot index into ``(E*capacity)``, position into the sorted ``indices``) of used slots."""
    bins = bins.long()
    starts = torch.cat([bins.new_zeros(1), bins[:-1]])
    counts = torch.clamp(bins - starts, max=capacity)
    num_experts = bins.shape[0]
    j = torch.arange(capacity, device=bins.device)
    valid = j[None, :] < counts[:, None]  # (E, C)
    slot = torch.arange(num_experts * capacity, device=bins.device).view(num_experts, capacity)
    src = starts[:, None] + j[None, :]
    return slot[valid], src[valid]


def binned_gather_torch(
    x: torch.Tensor, indices: torch.Tensor, bins: torch.Tensor, bin_size: int, top_k: int
) -> torch.Tensor:
    slot, src = _slots(bins, bin_size)
    token = indices.long()[src] // top_k
    out = x.new_zeros(bins.shape[0] * bin_size, x.shape[-1])
    out = out.index_copy(0, slot, x.index_select(0, token))
    return out.view(bins.shape[0], bin_size, x.shape[-1])


def binned_scatter_torch(
    x: torch.Tensor,
    indices: torch.Tensor,
    weights: torch.Tensor | None,
    bins: torch.Tensor,
    top_k: int,
) -> torch.Tensor:
    num_experts, capacity, hidden = x.shape
    slot, src = _slots(bins, capacity)
    dst = indices.long()[src]
    vals = x.reshape(num_experts * capacity, hidden).index_select(0, slot)
    if weights is not None:
        vals = vals * weights.index_select(0, dst).unsqueeze(-1).to(vals.dtype)
    tokens = indices.shape[0] // top_k
    out = x.new_zeros(tokens * top_k, hidden).index_copy(0, dst, vals)
    return out.view(tokens, top_k, hidden).sum(dim=1)


def gather_torch(
    x: torch.Tensor, indices: torch.Tensor, bin_ids: torch.Tensor, bins: torch.Tensor, top_k: int
) -> torch.Tensor:
    """Dropless routing: row i of the output is the token of sorted assignment i."""
    return x.index_select(0, indices.long() // top_k)


def scatter_torch(
    x: torch.Tensor,
    indices: torch.Tensor,
    bin_ids: torch.Tensor,
    weights: torch.Tensor | None,
    bins: torch.Tensor,
    top_k: int,
) -> torch.Tensor:
    """Dropless un-routing: assignment i goes back to its (token, k) slot, weighted, and the
    top-k slots of each token are summed."""
    dst = indices.long()
    vals = x
    if weights is not None:
        vals = vals * weights.index_select(0, dst).unsqueeze(-1).to(vals.dtype)
    tokens = indices.shape[0] // top_k
    out = x.new_zeros(tokens * top_k, x.shape[-1]).index_copy(0, dst, vals)
    return out.view(tokens, top_k, x.shape[-1]).sum(dim=1)


def _dispatch(original: Callable[..., Any], fallback: Callable[..., Any]) -> Callable[..., Any]:
    def op(x: torch.Tensor, *args: Any) -> Any:
        if x.is_cuda and moe_ops.kernels is not None:
            return original(x, *args)
        return fallback(x, *args)

    op.__name__ = getattr(original, "__name__", "op")
    return op


def install_cpu_moe_fallbacks() -> None:
    """Idempotently route non-CUDA calls of the binned MoE ops to the torch versions."""
    global _PATCHED
    if _PATCHED:
        return
    moe_ops.binned_gather = _dispatch(moe_ops.binned_gather, binned_gather_torch)  # type: ignore[assignment]
    moe_ops.binned_scatter = _dispatch(moe_ops.binned_scatter, binned_scatter_torch)  # type: ignore[assignment]
    moe_ops.gather = _dispatch(moe_ops.gather, gather_torch)  # type: ignore[assignment]
    moe_ops.scatter = _dispatch(moe_ops.scatter, scatter_torch)  # type: ignore[assignment]
    _PATCHED = True
