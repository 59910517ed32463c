"""CLI conventions: one `--format json` spelling on every read command, `rlc schema`, the
`#:schema` line of examples and recipes, and click's shell completion."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from rlc_cli.main import cli

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = "specs/examples/quickstart.toml"


@pytest.mark.parametrize(
    "argv",
    [
        ["validate", QUICKSTART],
        ["plan", QUICKSTART],
        ["explain", "trainer.gpus"],
        ["explain", "trainer-parallelism"],
        ["recipes"],
        ["status", "--receipts-dir", "{tmp}"],
        ["lint", "{tmp}/build"],
    ],
    ids=lambda a: a[0],
)
def test_read_commands_speak_json(argv: list[str], tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    if argv[0] == "lint":
        built = CliRunner().invoke(cli, ["compile", QUICKSTART, "-o", str(tmp_path / "build")])
        assert built.exit_code == 0
    args = [a.replace("{tmp}", str(tmp_path)) for a in argv] + ["--format", "json"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    json.loads(res.stdout)


def test_schema_command_prints_the_spec_schema() -> None:
    res = CliRunner().invoke(cli, ["schema"])
    assert res.exit_code == 0
    assert json.loads(res.stdout) == json.loads((ROOT / "schemas" / "spec.schema.json").read_text())
    manifest = CliRunner().invoke(cli, ["schema", "manifest"])
    assert json.loads(manifest.stdout) == json.loads(
        (ROOT / "schemas" / "manifest.schema.json").read_text()
    )


@pytest.mark.parametrize(
    "spec",
    sorted((ROOT / "specs").glob("*/*.toml")),
    ids=lambda p: f"{p.parent.name}/{p.stem}",
)
def test_examples_and_recipes_name_their_schema(spec: Path) -> None:
    first = spec.read_text().splitlines()[0]
    assert first.startswith("#:schema "), spec
    assert (spec.parent / first.removeprefix("#:schema ")).resolve() == (
        ROOT / "schemas" / "spec.schema.json"
    )


def test_shell_completion_is_clicks() -> None:
    env = dict(os.environ, _RLC_COMPLETE="bash_source", PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", "from rlc_cli.main import main; main()"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "_rlc_completion" in out.stdout, out.stderr
