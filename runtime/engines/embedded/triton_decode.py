"""Decode attention as a split-KV Triton kernel (``--attention-backend triton``, SGLang's
name for its own Triton decode kernels; flash-decoding).

SDPA attends a dense ``cache[:B, :, :L]`` with a boolean mask, so every row reads the
batch's length bucket ``L``. In the decode benchmark at batch 256 on one NVIDIA H200 a
third of the K/V read was that padding, and K/V is most of a large batch's traffic. Here
each row reads exactly its own entries ``lo[b] .. hi[b] - 1`` of its cache row: the row is cut into ``splits``
equal chunks, one program per (row, head, chunk) streams its chunk with an online softmax,
and a second kernel merges the chunks by their log-sum-exp (with one chunk a row, the
first kernel writes the output and the second does not run). Nothing depends on the
lengths' values on the host, so one CUDA graph per batch size serves every length (no
length buckets), and the split count follows the batch so a small batch still fills the
GPU.

Registered as a torch custom op, so the compiled decode block calls it as one opaque node
(Inductor fuses around it) and the step's graph captures its launches. On the CPU it runs
only under Triton's interpreter (``TRITON_INTERPRET=1``, tests); the engine uses SDPA there.
"""

from __future__ import annotations

import functools
import math
import os

import torch
import triton
import triton.language as tl

# K/V entries a program loads per iteration, and its warps: the fastest of the sweeps in
# benchmarks/gpu/decode_attention.py (16 heads of 128, one NVIDIA H100). With 16-bit
# entries 64 a block: on rows of 16x8 GRPO groups (prompts shared or copied, 256 and 1024
# new tokens) 1.2-1.4x faster than 128, whose larger tile holds more registers a thread
BLOCK_N = 64
NUM_WARPS = 2
NUM_STAGES = 1  # software-pipelined loads of the loop (tl.range), 1: none
# an FP8 cache: a block of 128 one-byte entries loads what 64 16-bit ones do, and pipelining
# two blocks' loads was the fastest (rows of 240-1264 entries, batch 128 and 256)
FP8_BLOCK_N = 128
FP8_STAGES = 2
MAX_SPLITS = 16
_LOG2E = 1.4426950408889634


# Triton reads this when it decorates the kernels below, so it is read once, here, too
_INTERPRETING = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def interpreting() -> bool:
    """The kernels below run under Triton's CPU interpreter (``TRITON_INTERPRET=1`` at
    import)."""
    return _INTERPRETING


@triton.jit
def _split_kv_attention(
    q_ptr,
    k_ptr,
    v_ptr,
    lo_ptr,
    hi_ptr,
    src_ptr,
    shared_ptr,
    part_ptr,
    lse_ptr,
    out_ptr,
    stride_qb,
    stride_qh,
    stride_ob,
    stride_oh,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_vb,
    stride_vh,
    stride_vn,
    scale_log2,
    splits,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    D_PAD: tl.constexpr,
    BLOCK: tl.constexpr,
    STAGES: tl.constexpr,
    WHOLE: tl.constexpr,
):
    """One (row, head, chunk): the chunk's softmax-weighted V sum (normalised) and its
    log2-sum-exp, in float32; ``WHOLE`` (one chunk a row): the row's output itself, in the
    output's dtype, so no merge kernel runs. Entries below ``shared[b]`` are read from
    cache row ``src[b]`` (the slot holding the prompt that row shares with its group), the
    rest from row ``b``: a group's rows then read one copy of their prompt, which the
    programs of the group's rows, launched side by side, find in the L2."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    s = tl.program_id(2)
    n_heads = tl.num_programs(1)
    kvh = h // GROUP
    lo = tl.load(lo_ptr + b).to(tl.int32)
    hi = tl.load(hi_ptr + b).to(tl.int32)
    src = tl.load(src_ptr + b).to(tl.int64)
    shared = tl.load(shared_ptr + b).to(tl.int32)
    # equal chunks, each a whole number of blocks: aligned, coalesced loads
    chunk = tl.cdiv(tl.cdiv(hi - lo, splits), BLOCK) * BLOCK
    start = lo + s * chunk
    end = tl.minimum(start + chunk, hi)
    d = tl.arange(0, D_PAD)
    dmask = d < HEAD_DIM
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + d, mask=dmask, other=0.0)
    q = q.to(tl.float32) * scale_log2
    # row offsets in 64 bits: slots x heads x entries x dims passes 2^31 in large caches
    own = b.to(tl.int64)
    k_head = k_ptr + kvh * stride_kh
    v_head = v_ptr + kvh * stride_vh
    m = tl.full((), float("-inf"), tl.float32)
    total = tl.zeros((), tl.float32)
    acc = tl.zeros((D_PAD,), tl.float32)
    for n0 in tl.range(start, end, BLOCK, num_stages=STAGES):
        n = n0 + tl.arange(0, BLOCK)
        valid = n < end
        kv_mask = valid[:, None] & dmask[None, :]
        # each entry's row: the shared prompt's holder below ``shared``, else the row's own
        # (the same blocks and sums as without sharing: only the addresses differ)
        at = tl.where(n < shared, src, own)
        k_at = k_head + at[:, None] * stride_kb + n[:, None] * stride_kn + d[None, :]
        k = tl.load(k_at, mask=kv_mask, other=0.0)
        score = tl.sum(k.to(tl.float32) * q[None, :], axis=1)
        score = tl.where(valid, score, float("-inf"))
        m_new = tl.maximum(m, tl.max(score, axis=0))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(score - m_new)
        total = total * alpha + tl.sum(p, axis=0)
        v_at = v_head + at[:, None] * stride_vb + n[:, None] * stride_vn + d[None, :]
        v = tl.load(v_at, mask=kv_mask, other=0.0)
        acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), axis=0)
        m = m_new
    filled = total > 0
    out = tl.where(filled, acc / tl.where(filled, total, 1.0), 0.0)
    if WHOLE:
        ptr = out_ptr + b * stride_ob + h * stride_oh + d
        tl.store(ptr, out.to(out_ptr.dtype.element_ty), mask=dmask)
    else:
        lse = tl.where(filled, m + tl.log2(tl.where(filled, total, 1.0)), float("-inf"))
        row = (b * n_heads + h) * splits + s
        tl.store(part_ptr + row * D_PAD + d, out)
        tl.store(lse_ptr + row, lse)


@triton.jit
def _split_kv_merge(
    part_ptr,
    lse_ptr,
    out_ptr,
    stride_ob,
    stride_oh,
    splits,
    HEAD_DIM: tl.constexpr,
    D_PAD: tl.constexpr,
    S_PAD: tl.constexpr,
):
    """One (row, head): the chunks' outputs weighted by their share of the softmax."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    n_heads = tl.num_programs(1)
    s = tl.arange(0, S_PAD)
    d = tl.arange(0, D_PAD)
    base = (b * n_heads + h) * splits
    lse = tl.load(lse_ptr + base + s, mask=s < splits, other=float("-inf"))
    top = tl.max(lse, axis=0)
    w = tl.exp2(lse - top)
    part = tl.load(part_ptr + (base + s[:, None]) * D_PAD + d[None, :], mask=(s < splits)[:, None])
    out = tl.sum(w[:, None] * part, axis=0) / tl.sum(w, axis=0)
    ptr = out_ptr + b * stride_ob + h * stride_oh + d
    tl.store(ptr, out.to(out_ptr.dtype.element_ty), mask=d < HEAD_DIM)


@functools.cache
def _programs_per_wave(device_index: int) -> int:
    """Programs that fill the GPU about eight times over (its SMs x 8: at batch 64 with 16
    heads, two chunks a row measured faster than one); off a GPU (Triton's interpreter) a
    few, so small test batches still split their rows."""
    if not torch.cuda.is_available():
        return 64
    return 8 * torch.cuda.get_device_properties(device_index).multi_processor_count


def launch_config(entry_bytes: int) -> tuple[int, int]:
    """The block and the pipeline stages the op launches with for cache entries of
    ``entry_bytes`` (1: an FP8 cache)."""
    return (FP8_BLOCK_N, FP8_STAGES) if entry_bytes == 1 else (BLOCK_N, NUM_STAGES)


def split_count(rows: int, heads: int, device: torch.device) -> int:
    """Chunks per row: enough programs to fill the GPU at a small batch, one at a large."""
    index = device.index if device.type == "cuda" and device.index is not None else 0
    want = math.ceil(_programs_per_wave(index) / max(1, rows * heads))
    return max(1, min(MAX_SPLITS, triton.next_power_of_2(want)))


def _launch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lo: torch.Tensor,
    hi: torch.Tensor,
    scale: float,
    splits: int,
    block: int = BLOCK_N,
    num_warps: int = NUM_WARPS,
    stages: int = NUM_STAGES,
    src: torch.Tensor | None = None,
    shared: torch.Tensor | None = None,
) -> torch.Tensor:
    """Both kernels; the tuning knobs are open to ``benchmarks/gpu/decode_attention.py``.
    ``src``/``shared`` default to no shared entries (every row reads only its own)."""
    bsz, heads, head_dim = q.shape
    if src is None or shared is None:
        src = torch.arange(bsz, device=q.device)
        shared = torch.zeros(bsz, dtype=torch.long, device=q.device)
    group = heads // k.shape[1]
    d_pad = triton.next_power_of_2(head_dim)
    out = torch.empty_like(q)
    whole = splits == 1
    # one chunk a row writes the output directly (the chunk buffers are not read)
    part = (
        out
        if whole
        else torch.empty(bsz * heads * splits, d_pad, dtype=torch.float32, device=q.device)
    )
    lse = out if whole else torch.empty(bsz * heads * splits, dtype=torch.float32, device=q.device)
    _split_kv_attention[(bsz, heads, splits)](
        q,
        k,
        v,
        lo,
        hi,
        src,
        shared,
        part,
        lse,
        out,
        q.stride(0),
        q.stride(1),
        out.stride(0),
        out.stride(1),
        k.stride(0),
        k.stride(1),
        k.stride(2),
        v.stride(0),
        v.stride(1),
        v.stride(2),
        scale * _LOG2E,
        splits,
        GROUP=group,
        HEAD_DIM=head_dim,
        D_PAD=d_pad,
        BLOCK=block,
        STAGES=stages,
        WHOLE=whole,
        num_warps=num_warps,
    )
    if whole:
        return out
    _split_kv_merge[(bsz, heads)](
        part,
        lse,
        out,
        out.stride(0),
        out.stride(1),
        splits,
        HEAD_DIM=head_dim,
        D_PAD=d_pad,
        S_PAD=max(2, triton.next_power_of_2(splits)),
        num_warps=4,
    )
    return out


@torch.library.custom_op("rlc::split_kv_decode_attention", mutates_args=())
def decode_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lo: torch.Tensor,
    hi: torch.Tensor,
    src: torch.Tensor,
    shared: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """``q`` ``(B, H, D)`` (one query per row) against the cache rows ``k``/``v``
    ``(S, Hkv, L, D)``, ``S >= B`` (any strides but a contiguous last dim): row ``b``
    attends entries ``lo[b] <= i < hi[b]`` (``(B,)`` integer tensors on the device;
    ``hi > lo``), reading those below ``shared[b]`` from cache row ``src[b]`` and the rest
    from row ``b`` (``shared`` 0: only its own row). Returns ``(B, H, D)`` in ``q``'s dtype.
    The split count is picked here, at run time, from the concrete batch: inside a
    shape-dynamic compile it would otherwise guard on the batch."""
    if q.device.type != "cuda" and not interpreting():
        raise RuntimeError("Triton decode attention needs a GPU (or TRITON_INTERPRET=1)")
    splits = split_count(q.shape[0], q.shape[1], q.device)
    block, stages = launch_config(k.element_size())
    return _launch(
        q.contiguous(), k, v, lo, hi, scale, splits, block, stages=stages, src=src, shared=shared
    )


@decode_attention.register_fake
def _(q, k, v, lo, hi, src, shared, scale):  # type: ignore[no-untyped-def]
    return torch.empty_like(q, memory_format=torch.contiguous_format)
