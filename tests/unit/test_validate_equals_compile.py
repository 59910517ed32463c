"""`rlc validate` runs every check `rlc compile` runs, Beaker-level ones included."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from compiler.emit.beaker_checks import duration_seconds, go_duration
from compiler.pipeline import compile_spec

ROOT = Path(__file__).resolve().parents[2]
MULTINODE = ROOT / "specs" / "examples" / "multinode.toml"


@pytest.mark.parametrize(
    ("spec", "go"),
    [("2d", "48h"), ("1d12h", "36h"), ("1.5d", "36h"), ("0", "0s"), ("90m", "90m"), ("3h", "3h")],
)
def test_durations_are_emitted_in_go_form(spec: str, go: str) -> None:
    assert go_duration(spec) == go
    assert "d" not in go_duration(spec)


def test_day_durations_reach_beaker_as_hours(tmp_path: Path) -> None:
    spec = tmp_path / "d.toml"
    spec.write_text(
        'schema_version = 1\nname = "d"\n[model]\nsource = "builtin:tiny"\n'
        '[[data.tasks]]\ntask = "arithmetic"\n[output]\nroot = "out"\n'
        '[launch]\ntimeout = "2d"\nmin_runtime = "1d"\n'
    )
    out = tmp_path / "build"
    proc = subprocess.run(
        [sys.executable, "-m", "rlc_cli.main", "compile", str(spec), "-o", str(out), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    task = yaml.safe_load((out / "d" / "beaker" / "train.yaml").read_text())["tasks"][0]
    assert task["timeout"] == "48h" and task["context"]["minRuntime"] == "24h"
    assert duration_seconds(task["timeout"]) == 2 * 86400
    with pytest.raises(ValueError):
        duration_seconds("2d")  # the Beaker model itself only takes Go durations


def test_a_beaker_refusal_is_a_positioned_validate_error(tmp_path: Path) -> None:
    over = ["launch.coordination.startup_timeout=200000"]
    result = compile_spec(str(MULTINODE), over)
    [diag] = [d for d in result.errors if d.code == "beaker-spec"]
    assert "synchronizedStartTimeout" in diag.message
    assert diag.span is not None and diag.span.source == "override 1"
    for command in (["validate"], ["compile", "-o", str(tmp_path / "b"), "--no-cache"]):
        argv = [sys.executable, "-m", "rlc_cli.main", *command, str(MULTINODE), "--set", over[0]]
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
        assert proc.returncode == 2, (command, proc.stderr)
        assert "error[beaker-spec]" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "b").exists()  # compile wrote nothing
