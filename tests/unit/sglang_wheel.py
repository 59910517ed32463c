"""The pinned sglang wheel for the tests that read its source (never import it): named by
``RLC_SGLANG_WHEEL``, else fetched once with pip into a cache directory (under a file lock,
so parallel test workers download it once). Where it cannot be fetched the caller skips,
saying why."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PIN = json.loads((ROOT / "runtime.lock.json").read_text())["sources"]["sglang"]["version"]


def pinned_wheel() -> Path:
    """The wheel's path; ``pytest.skip`` with the reason when it cannot be had."""
    given = os.environ.get("RLC_SGLANG_WHEEL")
    if given:
        return Path(given)
    cache = Path(tempfile.gettempdir()) / f"rlc-sglang-wheel-{PIN}"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = sorted(cache.glob(f"sglang-{PIN}-*.whl"))
        if found:
            return found[0]
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", f"sglang=={PIN}"]
        try:
            proc = subprocess.run(
                [*cmd, "-d", str(cache)], capture_output=True, text=True, timeout=300
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            pytest.skip(f"the sglang {PIN} wheel could not be fetched: {exc}")
        found = sorted(cache.glob(f"sglang-{PIN}-*.whl"))
        if proc.returncode != 0 or not found:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:]
            pytest.skip(f"the sglang {PIN} wheel could not be fetched with pip: {tail}")
        return found[0]
