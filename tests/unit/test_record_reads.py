"""``RLC_RECORD_READS``: a process records the spec fields it reads (runtime.record_reads).

The hook changes the section classes for the whole process, so each case runs in a fresh
interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_READER = """
import sys
from compiler.pipeline import compile_spec
from contract.run import parse
import runtime  # installs the hook when RLC_RECORD_READS is set
from runtime.config import RunConfig

cfg = RunConfig.from_contract(parse(compile_spec("specs/examples/quickstart.toml", []).manifest()))
cfg.training.num_rollouts
cfg.async_.enabled
cfg.data.tasks[0].task
cfg.optimizer.model_copy(update={"lr": 1.0}).warmup_steps
cfg.spec.environment.model_dump()
print("HOOKED=%s" % ("runtime.record_reads" in sys.modules))
"""


def _run(tmp_path: Path, record: bool) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("RLC_RECORD_READS", None)
    if record:
        env["RLC_RECORD_READS"] = str(tmp_path / "reads")
    res = subprocess.run(
        [sys.executable, "-c", _READER],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_reads_are_recorded_by_spec_path_and_dumps_apart(tmp_path: Path) -> None:
    from runtime.record_reads import load

    assert "HOOKED=True" in _run(tmp_path, record=True)
    got = load(tmp_path / "reads")
    reads = got["read"]
    assert {"training.num_rollouts", "async.enabled", "data.tasks.[].task"} <= reads
    assert "optimizer.warmup_steps" in reads  # through a copy
    assert "optimizer.lr" not in reads  # replaced in the copy, never read
    assert "environment" in got["dump"]
    assert not any(p.startswith("environment.") for p in reads)  # a dump is not a read
    assert not any(p.startswith("<") for p in reads)  # every section knew its path


def test_off_by_default_nothing_is_hooked(tmp_path: Path) -> None:
    assert "HOOKED=False" in _run(tmp_path, record=False)
    assert not (tmp_path / "reads").exists()
