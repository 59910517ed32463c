"""Cases for ``test_publication_checksum_kernel``, run in a child process with
``TRITON_INTERPRET=1`` (read when the kernel is decorated). Prints one JSON object: for each
case, whether the kernel's two sums equal the torch path's."""

from __future__ import annotations

import json

import torch

from runtime.publication import checksum
from runtime.publication.checksum_triton import BLOCK, ITERS, word_sums


def cases() -> dict[str, bool]:
    g = torch.Generator().manual_seed(0)
    per_program = BLOCK * ITERS
    sizes = [0, 1, 7, BLOCK - 1, BLOCK, per_program - 1, per_program, per_program + 1, 40_001]
    out: dict[str, bool] = {}
    for dtype in (
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.bfloat16,
        torch.float16,
        torch.float32,
        torch.int64,
        torch.float64,
    ):
        for n in sizes:
            if dtype == torch.bool:
                t = torch.rand(n, generator=g) < 0.5
            elif dtype.is_floating_point:
                t = (torch.randn(n, generator=g) * 1e3).to(dtype)
            else:
                info = torch.iinfo(dtype)
                t = torch.randint(info.min, info.max, (n,), generator=g, dtype=torch.int64).to(
                    dtype
                )
            words = checksum._words(t)
            got = word_sums(words, checksum._MIX1, checksum._SEED1, checksum._MIX2, checksum._SEED2)
            want = checksum.torch_sums(words)
            out[f"{str(dtype).removeprefix('torch.')}-{n}"] = bool(torch.equal(got, want))
    # the extreme words of each width: products and sums wrap mod 2**64 alike
    for dtype in (torch.int16, torch.int32, torch.int64):
        info = torch.iinfo(dtype)
        t = torch.tensor([info.min, info.max, -1, info.max, info.min] * 999, dtype=dtype)
        got = word_sums(t, checksum._MIX1, checksum._SEED1, checksum._MIX2, checksum._SEED2)
        out[f"extremes-{str(dtype).removeprefix('torch.')}"] = bool(
            torch.equal(got, checksum.torch_sums(t))
        )
    # a non-contiguous tensor and a whole state, through device_checksum (the kernel here)
    state = {"w": torch.randn(64, 300, generator=g).t(), "b": torch.randn(300, generator=g)}
    kernel_digest = checksum.device_checksum(state, dtype=torch.bfloat16)
    original = checksum._kernel
    checksum._kernel = lambda: None  # type: ignore[assignment]
    try:
        torch_digest = checksum.device_checksum(state, dtype=torch.bfloat16)
    finally:
        checksum._kernel = original  # type: ignore[assignment]
    out["state"] = kernel_digest == torch_digest
    return out


if __name__ == "__main__":
    print(json.dumps(cases()))
