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

import functools
import hashlib
import json
import logging
import os
import threading
from collections.abc import Mapping
from types import ModuleType

import numpy as np
import torch

log = logging.getLogger(__name__)

PREFIX = "wsum64:"
CHUNK_WORDS = 1 << 24  # bounds the int64 temporaries to 128 MB per chunk
_MIX1 = 0x9E3779B97F4A7C15 - (1 << 64)  # odd 64-bit constants, as signed int64
_MIX2 = 0xC2B2AE3D27D4EB4F - (1 << 64)
_SEED1 = 0x165667B19E3779F9
_SEED2 = 0x27D4EB2F165667C5

_warm_lock = threading.Lock()
_warm_threads: dict[str, threading.Thread] = {}
_TRITON_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
_WORD_DTYPE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_ramps: dict[tuple[str, int], tuple[torch.Tensor, torch.Tensor]] = {}


def _ramp(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``arange(CHUNK) * MIX`` per device, built once (the multipliers minus their offset)."""
    key = (device.type, -1 if device.index is None else device.index)
    if key not in _ramps:
        idx = torch.arange(CHUNK_WORDS, dtype=torch.int64, device=device)
        _ramps[key] = (idx * _MIX1, idx * _MIX2)
    return _ramps[key]


@functools.cache
def _kernel() -> ModuleType | None:
    """``checksum_triton`` where Triton imports (a runtime dependency); else None."""
    try:
        from . import checksum_triton
    except ImportError:
        return None
    return checksum_triton


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
    """The two int64 sums of one tensor, as a device tensor of shape (2,) (no sync): one
    Triton kernel on a GPU (``checksum_triton``), torch ops elsewhere; both give the same
    words' sums, so a CPU side and a GPU side of an audit agree."""
    words = _words(t)
    # Triton is imported only for a GPU tensor (or under its interpreter): not on a CPU run
    kernel = _kernel() if words.is_cuda or _TRITON_INTERPRET else None
    if kernel is not None:
        return kernel.word_sums(words, _MIX1, _SEED1, _MIX2, _SEED2)
    return torch_sums(words)


def warm_up_kernel(device: torch.device | str) -> threading.Thread | None:
    """Compile and load the kernel for ``device`` on a background thread, once per process
    and device (None off a GPU). A process's first Triton compile costs about a second even
    from Triton's disk cache; started early, it overlaps the rest of the start-up instead of
    adding to the weight audit. Its one launch may run beside a CUDA graph capture on
    another thread (the engine captures with ``capture_error_mode="thread_local"``, as it
    does beside an in-process trainer)."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    with _warm_lock:
        thread = _warm_threads.get(str(device))
        if thread is None:
            thread = threading.Thread(
                target=_warm_up, args=(device,), name="rlc-checksum-warm-up", daemon=True
            )
            _warm_threads[str(device)] = thread
            thread.start()
    return thread


def wait_warm_up() -> None:
    """Wait for this process's kernel warm-ups (a checksum does not compile the kernel on
    a second thread while the warm-up compiles it)."""
    with _warm_lock:
        threads = list(_warm_threads.values())
    for thread in threads:
        thread.join()


def _warm_up(device: torch.device) -> None:
    try:
        for words in (torch.int16, torch.int32):  # 16-bit weights, and 32-bit ones
            tensor_sums(torch.zeros(64, dtype=words, device=device))
    except Exception as exc:  # the first audit compiles it instead
        log.warning("the checksum kernel's warm-up failed: %s", exc)


def torch_sums(words: torch.Tensor) -> torch.Tensor:
    """``tensor_sums`` of a 1-D integer tensor in torch ops, chunked (the CPU's path)."""
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
    wait_warm_up()
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
    for m, row in zip(meta, _to_host(sums), strict=True):
        h.update(m.encode())
        h.update(b"\0")
        h.update(row.tobytes())
    return PREFIX + h.hexdigest()


def _to_host(sums: list[torch.Tensor]) -> list[np.ndarray]:
    """Every tensor's sums in one copy to the host (one wait, not one per tensor)."""
    if not sums:
        return []
    device = sums[0].device
    return list(torch.stack([s.to(device) for s in sums]).cpu().numpy())
