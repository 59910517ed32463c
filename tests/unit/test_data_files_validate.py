"""A data file the spec names but that does not exist is an error at its line when the spec
is validated (exit 2), not a failure after the runtime started; cluster paths pass."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from compiler.pipeline import compile_spec

ROOT = Path(__file__).resolve().parents[2]

SPEC = """schema_version = 1
name = "d"

[model]
source = "builtin:tiny"

[data]
[[data.tasks]]
task = "gsm8k"
path = "{path}"
train_count = 4
eval_count = 2

[output]
root = "run"

[trainer]
gpus = 0

[inference]
engine = "embedded"
num_engines = 1
max_context_length = 256
max_response_length = 8
"""


def _write(tmp_path: Path, path: str, extra: str = "") -> Path:
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC.format(path=path) + extra)
    return spec


def test_missing_task_file_is_positioned_exit_2(tmp_path: Path) -> None:
    spec = _write(tmp_path, "data/train.jsonl")
    res = subprocess.run(
        [sys.executable, "-m", "rlc_cli.main", "validate", str(spec)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2, res.stderr
    assert f"{spec}:10:8: error[data-file-missing]" in res.stderr
    assert f"data.tasks[0].path: no such file or directory: {tmp_path}/data/train.jsonl" in (
        res.stderr
    )
    assert "Traceback" not in res.stderr


def test_present_and_cluster_files_pass(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text("{}\n")
    assert compile_spec(str(_write(tmp_path, "data/train.jsonl"))).ok
    # a Beaker mount is seen only on the cluster: checked there
    mount = '\n[launch]\nweka_mounts = [{weka = "oe-data", mount_path = "/weka/oe-data"}]\n'
    remote = compile_spec(str(_write(tmp_path, "/weka/oe-data/gsm8k/train.jsonl", mount)))
    assert remote.ok, [d.message for d in remote.errors]
    # the file appearing after a failed compile is picked up (the compile cache notices)
    spec = _write(tmp_path, "later.jsonl")
    assert not compile_spec(str(spec)).ok
    (tmp_path / "later.jsonl").write_text("{}\n")
    assert compile_spec(str(spec)).ok
