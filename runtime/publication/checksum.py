"""Device-side weight checksum for the audit after every tensor publication.

The startup audit's ``sha256`` moves every byte to the CPU (3.4 s for 1B weights on the
H200 host). This digest stays on the tensors' device: each tensor's raw words (its bytes
viewed as integers, after an optional cast to the engine's dtype) are reduced to two
position-weighted sums mod 2**64, ``sum(w_i * m_i)`` and ``sum(w_i**2 * m'_i)`` with odd,
index-dependent multipliers. Integer arithmetic wraps exactly and is order independent, so
CPU and GPU agree bit for bit. Any single changed word always changes the first sum (an odd
multiplier times a nonzero difference below 2**32 is never 0 mod 2**64), and so does a swap
of two words; names, dtypes and shapes go into the final sha256 over the per-tensor sums.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

import torch

PREFIX = "wsum64:"
CHUNK_WORDS = 1 << 24  # bounds the int64 temporaries to 128 MB per chunk
_MIX1 = 0x9E3779B97F4A7C15 - (1 << 64)  # odd 64-bit constants, as signed int64
_MIX2 = 0xC2B2AE3D27D4EB4F - (1 << 64)
_SEED1 = 0x165667B19E3779F9
_SEED2 = 0x27D4EB2F165667C5

_WORD_DTYPE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_ramps: dict[tuple[str, int], tuple[torch.Tensor, torch.Tensor]] = {}


def _ramp(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``arange(CHUNK) * MIX`` per device, built once (the multipliers minus their offset)."""
    key = (device.type, -1 if device.index is None else device.index)
    if key not in _ramps:
        idx = torch.arange(CHUNK_WORDS, dtype=torch.int64, device=device)
        _ramps[key] = (idx * _MIX1, idx * _MIX2)
    return _ramps[key]


def _wrap(x: int) -> int:
    """A Python int as the signed int64 it wraps to."""
    x &= (1 << 64) - 1
    return x - (1 << 64) if x >= 1 << 63 else x


def _words(t: torch.Tensor) -> torch.Tensor:
    flat = t.detach().reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.view(torch.uint8)
    size = flat.element_size()
    if size not in _WORD_DTYPE:  # complex128 etc.: fall back to bytes
        return flat.view(torch.uint8)
    return flat.view(_WORD_DTYPE[size])


def tensor_sums(t: torch.Tensor) -> torch.Tensor:
    """The two int64 sums of one tensor, as a device tensor of shape (2,) (no sync)."""
    words = _words(t)
    ramp1, ramp2 = _ramp(words.device)
    acc = torch.zeros(2, dtype=torch.int64, device=words.device)
    for start in range(0, words.numel(), CHUNK_WORDS):
        w = words[start : start + CHUNK_WORDS].to(torch.int64)
        n = w.numel()
        m1 = ramp1[:n] + _wrap(start * _MIX1 + _SEED1)
        m2 = ramp2[:n] + _wrap(start * _MIX2 + _SEED2)
        acc[0] += (w * m1).sum()
        acc[1] += (w * w * m2).sum()
    return acc


def device_checksum(state: Mapping[str, torch.Tensor], dtype: torch.dtype | None = None) -> str:
    """``wsum64:<hex>`` of ``state``; floating tensors are first cast to ``dtype`` if given.

    The cast happens per tensor on its device, so the trainer (fp32) can check what a bf16
    engine should hold without a full bf16 copy of the model.
    """
    names = sorted(state)
    sums: list[torch.Tensor] = []
    meta: list[str] = []
    with torch.no_grad():
        for name in names:
            t = state[name]
            if dtype is not None and t.is_floating_point() and t.dtype != dtype:
                t = t.to(dtype)
            sums.append(tensor_sums(t))  # queued; the first .cpu() below waits once
            meta.append(
                f"{name}\0{str(t.dtype).removeprefix('torch.')}\0{json.dumps(list(t.shape))}"
            )
            del t  # a gathered (sharded trainer's) tensor goes before the next is gathered
    h = hashlib.sha256()
    for m, s in zip(meta, sums, strict=True):
        h.update(m.encode())
        h.update(b"\0")
        h.update(s.cpu().numpy().tobytes())
    return PREFIX + h.hexdigest()
