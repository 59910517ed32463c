"""[output]: where the run writes."""

from __future__ import annotations

from contract.spec._base import Section, fld


class OutputSection(Section):
    root: str = fld(
        description="run directory (checkpoints, metrics, rollouts, exports)",
        note="a fresh directory per run; relative paths resolve against the spec file's "
        "directory. It is reused only by a manifest with the same digest (resume).",
        min_length=1,
    )
    allow_outside: bool = fld(
        False,
        description="let output.root lie outside the working directory, the declared mounts "
        "and the per-user scratch areas (/tmp/..., /home/<user>/...)",
        note="system directories are refused even then",
    )
    export_hf: bool = fld(False, description="export final HF weights (safetensors) after training")
    rollout_sample_rate: float = fld(
        0.0,
        description="fraction of whole prompt groups written to <root>/rollouts/ for inspection",
        ge=0.0,
        le=1.0,
    )
