"""The README's quickstart, shortened: `rlc run` on the quickstart spec must LEARN.

Same spec, two engines behind the real sglang-router, CPU trainer; fewer collections so
it fits a CI budget. Mean reward over the last fifth must clearly exceed
the first fifth (a random-init model starts near 0.001).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rt_helpers import QUICKSTART, ROOT, env, records

pytestmark = pytest.mark.slow

# The run is seeded end to end (data order, per-sample sampling seeds, init), so these
# 30 collections follow the full 40-collection quickstart, which starts climbing ~20.
SHORT = ("training.num_rollouts=30", "checkpoint.interval=100")


def test_quickstart_learns(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("sglang_router")
    if not QUICKSTART.exists():
        pytest.skip("quickstart spec missing")
    root = tmp_path / "run"
    argv = [sys.executable, "-m", "compiler.cli", "run", str(QUICKSTART), "--no-progress"]
    argv += [a for s in (*SHORT, f'output.root="{root}"') for a in ("--set", s)]
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=400)
    wall = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    recs = records(root)
    assert len(recs) == 30 and summary["collections"] == 30
    first, last = summary["reward_first_fifth"], summary["reward_last_fifth"]
    assert last > first + 0.01, f"did not learn: first fifth {first:.4f}, last fifth {last:.4f}"
    assert (root / "report.png").read_bytes()[:4] == b"\x89PNG"
    assert wall < 400
