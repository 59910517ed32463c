"""[checkpoint]: saves, retention, resume, export."""

from __future__ import annotations

from typing import Literal

from contract.spec._base import Section, fld


class CheckpointSection(Section):
    interval: int | None = fld(
        None,
        description="collections between checkpoints",
        aliases=("training.save_interval",),
        derived="training.num_rollouts (save only at the end) when saving, else none",
        ge=1,
    )
    keep_last: int = fld(
        1, description="newest checkpoints kept", aliases=("checkpoint.checkpoint_keep_last",), ge=1
    )
    keep_every: int | None = fld(
        None,
        description="also keep every N-th update's checkpoint",
        aliases=("checkpoint.checkpoint_keep_every",),
        ge=1,
    )
    resume: Literal["auto", "never", "required"] = fld(
        "auto", description="resume from the newest complete checkpoint in output.root"
    )
    export_hf_final: bool | None = fld(
        None, description="export HF weights at the end", derived="output.export_hf"
    )
