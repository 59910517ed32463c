"""The spec fields a real quickstart run reads (``RLC_RECORD_READS``, runtime.record_reads).

The quickstart (tests/e2e/rt_helpers.py: its small variant, two collections) runs once per
test run with the recorder on; parallel test workers share it through a lock on pytest's
common temporary directory, so it runs once however many workers ask.
"""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path

import pytest

E2E = Path(__file__).resolve().parents[1] / "e2e"
# two collections, an evaluation and an export: every component of the quickstart runs
OVERRIDES = ("training.num_rollouts=2", "training.eval_interval=1")


def recorded_reads(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """``{"read": paths, "dump": paths}`` over every process of a recorded quickstart run."""
    from runtime.record_reads import ENV, load

    base = tmp_path_factory.getbasetemp()
    # xdist workers' temporary directories share this test run's parent directory
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    root = shared / "recorded-quickstart"
    root.mkdir(parents=True, exist_ok=True)
    with (root / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = root / "done"
        if not done.exists():
            _record(root, ENV)
            done.write_text("ok")
    return load(root / "reads")


def _record(root: Path, env_name: str) -> None:
    sys.path.insert(0, str(E2E))
    import rt_helpers

    manifest = rt_helpers.compile_manifest(root, (*rt_helpers.SMALL, *OVERRIDES))
    os.environ[env_name] = str(root / "reads")
    try:
        code, out = rt_helpers.run(manifest)
    finally:
        del os.environ[env_name]
    assert code == 0, out[-3000:]
