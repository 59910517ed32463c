"""Whether the checkout a launch is made from is committed and pushed.

A receipt records the git revision of the working directory; it describes what was launched
only when that revision holds every change and can be fetched by someone else. `rlc launch`
refuses otherwise unless ``--allow-dirty`` says the user knows.
"""

from __future__ import annotations

import subprocess
from pathlib import Path


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def checkout_problem(cwd: Path) -> str | None:
    """Why the checkout at ``cwd`` does not describe a launch, or None (clean and pushed,
    or not a git checkout at all: an installed rlc has no revision to record)."""
    top = _git(cwd, "rev-parse", "--show-toplevel")
    if top is None or top.returncode != 0:
        return None
    status = _git(cwd, "status", "--porcelain", "--untracked-files=no")
    changed = [line for line in (status.stdout if status else "").splitlines() if line.strip()]
    if changed:
        first = changed[0][3:]
        more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
        return f"the checkout {top.stdout.strip()} has uncommitted changes ({first}{more})"
    head = _git(cwd, "rev-parse", "--short=12", "HEAD")
    remote = _git(cwd, "branch", "-r", "--contains", "HEAD")
    if head is None or head.returncode != 0:
        return f"the checkout {top.stdout.strip()} has no commit yet"
    if remote is None or remote.returncode != 0 or not remote.stdout.strip():
        return f"commit {head.stdout.strip()} is on no remote branch (push it first)"
    return None
