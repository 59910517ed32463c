"""Where checkpoints lie on disk and which are complete: plain paths, no torch.

Kept apart from the manager so that `rlc export` can refuse a run without the asked-for
checkpoint before it imports torch (seconds).
"""

from __future__ import annotations

import re
from pathlib import Path

COMPLETE = "COMPLETE"
_STEP_RE = re.compile(r"^step-(\d{6,})$")


def step_dir_name(step: int) -> str:
    return f"step-{step:06d}"


def list_complete(root: str | Path) -> list[tuple[int, Path]]:
    """Complete checkpoints under ``root`` as ``(step, path)``, oldest first."""
    r = Path(root)
    if not r.is_dir():
        return []
    out = []
    for p in r.iterdir():
        m = _STEP_RE.match(p.name)
        if m and p.is_dir() and (p / COMPLETE).is_file():
            out.append((int(m.group(1)), p))
    return sorted(out)


def latest_complete(root: str | Path) -> Path | None:
    """The newest complete checkpoint directory, or None."""
    found = list_complete(root)
    return found[-1][1] if found else None
