"""Relative paths: written in the spec they resolve against the spec's directory; given with
--set they resolve against the working directory (where the person typed them)."""

from __future__ import annotations

import os
from pathlib import Path

from compiler.pipeline import compile_spec

ROOT = Path(__file__).resolve().parents[2]


def _output_root(spec: str, overrides: list[str], cwd: Path) -> str:
    before = os.getcwd()
    os.chdir(cwd)
    try:
        manifest = compile_spec(spec, overrides).manifest()
    finally:
        os.chdir(before)
    return str(manifest["config"]["output"]["root"])


def test_spec_paths_follow_the_spec_and_set_paths_the_working_directory(tmp_path: Path) -> None:
    spec = "specs/examples/quickstart.toml"
    assert _output_root(spec, [], ROOT) == "runs/quickstart"  # "../../runs/quickstart"
    assert _output_root(spec, ['output.root="runs/mine"'], ROOT) == "runs/mine"
    assert _output_root(spec, ['output.root="./a/../b"'], ROOT) == "b"
    absolute = str(tmp_path / "abs")
    assert _output_root(spec, [f'output.root="{absolute}"'], ROOT) == absolute
    # from another directory, the spec's own relative path still follows the spec
    other = tmp_path / "elsewhere"
    (other / "specs").mkdir(parents=True)
    text = (ROOT / spec).read_text().replace('root = "../../runs/quickstart"', 'root = "../runs/q"')
    (other / "specs" / "q.toml").write_text(text)
    assert _output_root("specs/q.toml", [], other) == "runs/q"
    assert _output_root("specs/q.toml", ['output.root="here"'], other) == "here"
