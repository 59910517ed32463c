"""The weight checksum's two sums in one pass over a tensor's words (a Triton kernel).

``checksum.tensor_sums`` in torch ops casts every word to int64, builds the two multipliers
and reduces each product: about ten kernels and 50 bytes of temporaries per word. For the
1.48B model that audit took 0.15 s of every publication on one NVIDIA H100, 6% of a 16x8x256
GRPO collection. Here one program reads a run of words once and keeps both sums in
registers; a second, tiny reduction adds the programs' partial sums. The arithmetic is the
same modular arithmetic (int64 products and sums wrap mod 2**64, in any order), so the
result equals the torch path's bit for bit, which the CPU side of an audit uses.

On the CPU the kernel runs only under Triton's interpreter (``TRITON_INTERPRET=1``, tests).
"""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl

BLOCK = 1024  # words a program loads per iteration
ITERS = 16  # iterations a program runs: 16,384 words, one partial pair, per program
NUM_WARPS = 4


# ``n`` unspecialized: one compiled variant per word width, whatever the tensors' lengths
@triton.jit(do_not_specialize=["n"])
def _word_sums(
    words_ptr,
    part_ptr,
    n,
    mix1,
    seed1,
    mix2,
    seed2,
    BLOCK: tl.constexpr,
    ITERS: tl.constexpr,
):
    """Program ``p`` adds ``w_i * (i * mix1 + seed1)`` and ``w_i**2 * (i * mix2 + seed2)``
    over its words ``i`` (int64, wrapping) and stores the pair at ``part[p]``."""
    pid = tl.program_id(0).to(tl.int64)
    acc1 = tl.zeros([BLOCK], dtype=tl.int64)
    acc2 = tl.zeros([BLOCK], dtype=tl.int64)
    base = pid * (BLOCK * ITERS)
    for it in tl.static_range(ITERS):
        idx = base + it * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
        w = tl.load(words_ptr + idx, mask=idx < n, other=0).to(tl.int64)
        acc1 += w * (idx * mix1 + seed1)
        acc2 += w * w * (idx * mix2 + seed2)
    tl.store(part_ptr + pid * 2, tl.sum(acc1, axis=0))
    tl.store(part_ptr + pid * 2 + 1, tl.sum(acc2, axis=0))


def word_sums(words: torch.Tensor, mix1: int, seed1: int, mix2: int, seed2: int) -> torch.Tensor:
    """The two int64 sums of the 1-D integer tensor ``words``, shape (2,), on its device
    (no sync). The constants are signed int64 values."""
    n = words.numel()
    if n == 0:
        return torch.zeros(2, dtype=torch.int64, device=words.device)
    programs = triton.cdiv(n, BLOCK * ITERS)
    part = torch.empty(programs, 2, dtype=torch.int64, device=words.device)
    # Triton launches on the calling thread's current device (0 on a new thread, such as
    # an HTTP handler's): make it the words' device
    on_device = torch.cuda.device(words.device) if words.is_cuda else contextlib.nullcontext()
    with on_device:
        _word_sums[(programs,)](
            words, part, n, mix1, seed1, mix2, seed2, BLOCK=BLOCK, ITERS=ITERS, num_warps=NUM_WARPS
        )
    return part.sum(dim=0)
