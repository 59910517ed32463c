"""Native checkpoints: atomic synchronous saves, retention, topology/spec validation, resume."""

from .manager import (
    COMPLETE,
    CheckpointData,
    CheckpointManager,
    CheckpointMismatch,
    latest_complete,
    list_complete,
    load,
    read_meta,
    rng_state,
    set_rng_state,
    step_dir_name,
)

__all__ = [
    "COMPLETE",
    "CheckpointData",
    "CheckpointManager",
    "CheckpointMismatch",
    "latest_complete",
    "list_complete",
    "load",
    "read_meta",
    "rng_state",
    "set_rng_state",
    "step_dir_name",
]
