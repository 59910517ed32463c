"""The spec fields a real quickstart run reads (``RLC_RECORD_READS``, runtime.record_reads).

The quickstart (tests/e2e/rt_helpers.py: its small variant, two collections) runs once per
test run with the recorder on; parallel test workers share it through a lock on pytest's
common temporary directory, so it runs once however many workers ask. It runs in the
background: `start` returns at once, and the returned function waits for the recording.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest

E2E = Path(__file__).resolve().parents[1] / "e2e"
# two collections, an evaluation and an export: every component of the quickstart runs
OVERRIDES = ("training.num_rollouts=2", "training.eval_interval=1")

Reads = dict[str, set[str]]


def start(tmp_path_factory: pytest.TempPathFactory) -> Callable[[], Reads]:
    """Start (or join) this test run's recorded quickstart; call the result for
    ``{"read": paths, "dump": paths}`` over every process of the run."""
    from runtime.record_reads import load

    base = tmp_path_factory.getbasetemp()
    # xdist workers' temporary directories share this test run's parent directory
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    root = shared / "recorded-quickstart"
    root.mkdir(parents=True, exist_ok=True)
    lock = (root / "lock").open("w")
    done = root / "done"
    outcome: list[BaseException] = []

    def finish(proc: subprocess.Popen[str] | None, lock: IO[str]) -> None:
        try:
            if proc is None:  # another worker records: wait for its lock
                fcntl.flock(lock, fcntl.LOCK_EX)
                if not done.exists():
                    raise AssertionError("the recorded quickstart run failed in another worker")
                return
            out, _ = proc.communicate(timeout=300)
            if proc.returncode != 0:
                raise AssertionError(f"recorded quickstart failed:\n{out[-3000:]}")
            done.write_text("ok")
        except BaseException as exc:
            outcome.append(exc)
        finally:
            lock.close()

    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        proc = None if done.exists() else _launch(root)
    except BlockingIOError:
        proc = None
    thread = threading.Thread(target=finish, args=(proc, lock), daemon=True)
    thread.start()

    def reads() -> Reads:
        thread.join()
        if outcome:
            raise outcome[0]
        return load(root / "reads")

    return reads


def _launch(root: Path) -> subprocess.Popen[str]:
    """Compile the small quickstart into ``root`` and start it with the recorder on."""
    from runtime.record_reads import ENV

    sys.path.insert(0, str(E2E))
    import rt_helpers

    manifest = rt_helpers.compile_manifest(root, (*rt_helpers.SMALL, *OVERRIDES))
    return subprocess.Popen(
        [sys.executable, "-m", "runtime.entrypoints.execute", str(manifest), "--no-progress"],
        cwd=rt_helpers.ROOT,
        env={**rt_helpers.env(), ENV: str(root / "reads")},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
