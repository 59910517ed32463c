"""Native checkpoints: atomic synchronous saves, retention, topology/spec validation, resume.

The manager (torch) loads on first use of one of its names; the on-disk layout
(`runtime.checkpoints.layout`) does not need torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from .layout import COMPLETE, latest_complete, list_complete, step_dir_name

_FROM_MANAGER = (
    "CheckpointData",
    "CheckpointManager",
    "CheckpointMismatch",
    "CheckpointWriteError",
    "load",
    "read_meta",
    "rng_state",
    "set_rng_state",
)


def __getattr__(name: str) -> Any:
    if name in _FROM_MANAGER:
        return getattr(importlib.import_module(".manager", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "COMPLETE",
    "CheckpointData",
    "CheckpointManager",
    "CheckpointMismatch",
    "CheckpointWriteError",
    "latest_complete",
    "list_complete",
    "load",
    "read_meta",
    "rng_state",
    "set_rng_state",
    "step_dir_name",
]
