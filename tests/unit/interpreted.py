"""Run a cases script under Triton's CPU interpreter in a child process.

Triton reads ``TRITON_INTERPRET`` when a kernel is decorated, so the cases run in a fresh
process with it set; each script prints one JSON object that the tests assert on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run_interpreted(script: str) -> Any:
    """The JSON that ``tests/unit/<script>`` prints, run with ``TRITON_INTERPRET=1``."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).with_name(script))],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)
