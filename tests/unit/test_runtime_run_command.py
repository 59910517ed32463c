"""`rlc run` error paths: bad spec -> positioned diagnostic + exit 2, misuse -> exit 2."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from rlc_cli.main import cli


def test_bad_spec_is_exit_2_without_traceback(tmp_path: Path) -> None:
    spec = tmp_path / "bad.toml"
    spec.write_text(
        'schema_version = 1\nname = "x"\n[model]\nsource = "builtin:tiny"\n[trainr]\ngpus = 0\n'
    )
    res = CliRunner().invoke(cli, ["run", str(spec), "--no-progress"])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    assert "trainr" in res.output


def test_missing_target_and_set_on_manifest_are_user_errors(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["run", str(tmp_path / "nope.toml")])
    assert res.exit_code == 2 and "no such file" in res.output
    m = tmp_path / "m.json"
    m.write_text("{}\n")
    res = CliRunner().invoke(cli, ["run", str(m), "--set", "a.b=1"])
    assert res.exit_code == 2 and "immutable" in res.output
