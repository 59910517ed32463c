"""A GSM8K spec on the builtin model runs end to end on the real GSM8K file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "runtime" / "data" / "datasets" / "gsm8k" / "train.jsonl"

pytestmark = pytest.mark.slow


def test_gsm8k_spec_runs_with_real_files(tmp_path):
    if not DATA.exists():
        pytest.skip(f"{DATA} is absent (shipped in runtime/data/datasets)")
    pytest.importorskip("torch", reason="needs the runtime extra")
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlc_cli.main",
            "run",
            "specs/examples/gsm8k-builtin.toml",
            "--no-progress",
            "--set",
            f'output.root="{out}"',
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
        env={**os.environ, "RLC_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["collection"] for r in lines] == [0, 1]
    for r in lines:
        # 8 prompts x 4 samples, every one scored (zero-variance groups are refilled, so more)
        assert r["rewards/gsm8k/scored"] >= 32 and r["rewards/gsm8k/scored"] % 4 == 0
        assert r["rewards/gsm8k/failures"] == 0
        assert all(p.startswith("gsm8k:") for p in r["prompt_ids"])
