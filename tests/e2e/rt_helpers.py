"""Helpers for the runtime end-to-end tests: compile the quickstart, run the runtime."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "specs" / "examples" / "quickstart.toml"

# a small, fast, deterministic variant of the quickstart
SMALL = (
    "inference.prompts_per_collection=4",
    "inference.samples_per_prompt=8",
    "inference.max_response_length=2",
    "checkpoint.interval=1",
)


def _need_runtime() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("olmo_core")
    pytest.importorskip("sglang_router")
    if not QUICKSTART.exists():
        pytest.skip("specs/examples/quickstart.toml is missing")


def compile_manifest(out: Path, overrides: Sequence[str] = ()) -> Path:
    """Compile the quickstart with ``overrides`` into ``out`` (output.root = out/run)."""
    _need_runtime()
    from compiler.manifest.manifest import write_manifest
    from compiler.pipeline import compile_spec

    sets = [*overrides, f'output.root="{out / "run"}"']
    result = compile_spec(str(QUICKSTART), sets)
    manifest = result.manifest()
    return write_manifest(manifest, out / "manifest.json")


def make_hf_checkpoint(out: Path, family: str, *args: str) -> Path:
    """A random-init HF checkpoint of ``family`` written by transformers
    (scripts/make_hf_checkpoint.py) into ``out``."""
    made = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_hf_checkpoint.py"), "--family", family]
        + ["--out", str(out), *args],
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    return out


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    return e


def start(manifest: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runtime.entrypoints.execute",
            str(manifest),
            "--no-progress",
            *args,
        ],
        cwd=ROOT,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def run(manifest: Path, *args: str, timeout: float = 150) -> tuple[int, str]:
    return finish(start(manifest, *args), timeout)


def finish(proc: subprocess.Popen[str], timeout: float) -> tuple[int, str]:
    """The run's exit code and output. One that overruns ``timeout`` is asked for its
    threads' stacks (``SIGUSR1``) before it is killed, so the failure says where it waited."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGUSR1)
        time.sleep(2.0)
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError(f"runtime did not finish in {timeout}s:\n{out[-8000:]}") from None
    return proc.returncode, out


def wait_for(
    cond: Callable[[], bool], timeout: float, proc: subprocess.Popen[str] | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(
                f"runtime exited early ({proc.returncode}):\n{proc.stdout.read()[-3000:] if proc.stdout else ''}"
            )
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.1)


def records(run_root: Path) -> list[dict[str, Any]]:
    from runtime.metrics import read_metrics

    return read_metrics(run_root / "metrics.jsonl")


def child_pids(run_root: Path) -> dict[str, int]:
    """name -> pid of the runtime's children (its ``logs/children.json``)."""
    import json

    path = run_root / "logs" / "children.json"
    return json.loads(path.read_text()) if path.exists() else {}


def kill9(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
