"""Decode attention through FlexAttention's block-sparse kernel (``--attention-backend
flex_attention``, SGLang's name for the same idea).

SDPA attends a dense ``cache[:B, :, :L]`` with a boolean mask, so every row reads ``L``
keys: the longest row's bucket. A decode step of a batch with ragged lengths reads up to
twice the K/V it needs, and K/V is most of a large batch's traffic. Here each row's own
KV blocks are listed in a ``BlockMask`` built from the step's positions, so the kernel
(flex decoding: split over the KV length when the batch is small) reads only the blocks
up to each row's position, and one graph per batch size serves every length. Built from
plain tensor ops, so it is traced into the compiled step and captured with it.

Opt-in: cuDNN's SDPA already reads the padded buckets at the copy rate, so this pays off
only where Inductor's decoding kernel reads the needed blocks as fast (it needs a static
batch size: ``InferenceModel.enable_compile`` compiles the block per batch size for it).
"""

from __future__ import annotations

import torch

KV_BLOCK = 128  # FlexAttention's sparse block size (its default)


def decode_blocks(
    positions: torch.Tensor, length: int, window: int | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What each row attends at ``positions`` (``(B,)``): its KV block counts ``(B, 1, 1)``
    and block indices ``(B, 1, 1, ceil(length / KV_BLOCK))`` (int32,
    ``BlockMask.from_kv_blocks``' layout), and its first attended position ``(B,)`` (a
    sliding window's start, else 0). The window lives in these tensors, not in the traced
    code, so one compiled block serves windowed and full layers."""
    nblk = -(-length // KV_BLOCK)
    bsz = positions.shape[0]
    if window is None:
        lo = torch.zeros_like(positions)
    else:
        lo = (positions - window + 1).clamp(min=0)
    first = torch.div(lo, KV_BLOCK, rounding_mode="floor")
    last = torch.div(positions, KV_BLOCK, rounding_mode="floor")
    num = (last - first + 1).to(torch.int32).view(bsz, 1, 1)
    idx = first.view(bsz, 1) + torch.arange(nblk, device=positions.device).view(1, -1)
    idx = idx.clamp(max=nblk - 1).to(torch.int32).view(bsz, 1, 1, nblk)
    return num, idx, lo


def flex_decode_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    positions: torch.Tensor,
    blocks: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    scale: float,
    gqa: bool,
) -> torch.Tensor:
    """``q`` ``(B, H, 1, D)`` against ``k``/``v`` ``(B, Hkv, L, D)``: row ``b`` attends
    entries ``lo[b] ..= positions[b]``. ``blocks``: ``decode_blocks``."""
    from torch.nn.attention.flex_attention import BlockMask, flex_attention

    num, idx, lo = blocks

    def attended(
        b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor
    ) -> torch.Tensor:
        return (kv_idx <= positions[b]) & (kv_idx >= lo[b])

    mask = BlockMask.from_kv_blocks(
        num,
        idx,
        BLOCK_SIZE=(KV_BLOCK, KV_BLOCK),
        mask_mod=attended,
        seq_lengths=(q.shape[-2], k.shape[-2]),
        compute_q_blocks=False,  # inference: no backward, no transposed block lists
    )
    out = flex_attention(q, k, v, block_mask=mask, scale=scale, enable_gqa=gqa)
    assert isinstance(out, torch.Tensor)
    return out
