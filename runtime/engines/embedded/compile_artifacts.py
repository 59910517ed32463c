"""PyTorch's portable compile artifacts (``torch.compiler.save_cache_artifacts``) kept in
the Inductor cache directory, so that they travel with the compiler-cache generations
(``runtime.compiler_cache``) and a later engine loads them before its first compile.

``RLC_COMPILE_ARTIFACTS=0`` turns both sides off (to measure what they save).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch

log = logging.getLogger(__name__)

FILE_NAME = "rlc-compile-artifacts.bin"


def _path() -> Path | None:
    if os.environ.get("RLC_COMPILE_ARTIFACTS", "1") == "0":
        return None
    root = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    return Path(root) / FILE_NAME if root else None


def load_compile_artifacts() -> int:
    """Load the saved artifacts, if any, before anything compiles; returns their bytes."""
    path = _path()
    if path is None or not path.is_file():
        return 0
    data = path.read_bytes()
    try:
        torch.compiler.load_cache_artifacts(data)
    except Exception as exc:  # a stale or foreign file costs a compile, never the engine
        log.warning("compile artifacts %s not loaded: %s", path, exc)
        return 0
    return len(data)


def save_compile_artifacts() -> int:
    """Write what this process compiled so far (after the decode warm-up); returns bytes."""
    path = _path()
    if path is None:
        return 0
    try:
        saved = torch.compiler.save_cache_artifacts()
        if saved is None:
            return 0
        data = saved[0]
        tmp = path.with_suffix(".tmp")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        tmp.replace(path)
    except Exception as exc:  # the warm-up succeeded; only the next start pays
        log.warning("compile artifacts not saved to %s: %s", path, exc)
        return 0
    return len(data)
