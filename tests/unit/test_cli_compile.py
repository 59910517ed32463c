"""CLI: validate / plan / compile / recipes; every example and recipe compiles cleanly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from compiler.pipeline import compile_spec
from rlc_cli.main import cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "specs" / "examples").glob("*.toml"))
RECIPES = sorted((ROOT / "specs" / "recipes").glob("*.toml"))
# advisories the examples keep on purpose
EXPECTED_WARNINGS = {"multinode.toml": {"moe-ep-unqualified"}}


def test_catalog_complete() -> None:
    names = {"quickstart", "gsm8k-dense", "moe-async", "hybrid-moe", "long-context", "multinode"}
    assert {p.stem for p in EXAMPLES} >= names
    assert {p.stem for p in RECIPES} >= names


@pytest.mark.parametrize("path", EXAMPLES + RECIPES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_examples_and_recipes_compile_cleanly(path: Path) -> None:
    r = compile_spec(str(path))
    assert r.ok, [f"{d.code} {d.span} {d.message}" for d in r.errors]
    assert {d.code for d in r.warnings} <= EXPECTED_WARNINGS.get(path.name, set())
    r.manifest()


@pytest.fixture()
def in_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("RLC_CACHE_DIR", str(tmp_path / "cache"))


def test_validate_exit_codes(in_root: None, tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(cli, ["validate", "specs/examples/quickstart.toml"])
    assert ok.exit_code == 0, ok.output
    bad = runner.invoke(cli, ["validate", "tests/specs/many_mistakes.toml", "--format", "json"])
    assert bad.exit_code == 2
    diags = json.loads(bad.stdout)
    assert [(d["code"], d["line"]) for d in diags][:2] == [("unknown-key", 6), ("type-mismatch", 9)]
    over = runner.invoke(
        cli, ["validate", "specs/examples/quickstart.toml", "--set", "trainer.micro_batch_size=2"]
    )
    assert over.exit_code == 2 and "trainer-micro-batch" in over.output
    missing = runner.invoke(cli, ["validate", str(tmp_path / "nope.toml")])
    assert missing.exit_code == 2


def test_plan(in_root: None) -> None:
    runner = CliRunner()
    out = runner.invoke(cli, ["plan", "specs/examples/gsm8k-dense.toml"])
    assert out.exit_code == 0, out.output
    assert (
        "placement" in out.output and "engine:0-3" in out.output and "batch geometry" in out.output
    )
    js = runner.invoke(cli, ["plan", "specs/examples/gsm8k-dense.toml", "--json"])
    data = json.loads(js.stdout)
    assert data["plan"]["placement"]["gpus_per_replica"] == 8
    assert data["plan"]["batch"]["samples_per_collection"] == 256


def test_compile_writes_manifest(in_root: None, tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(cli, ["compile", "specs/examples/quickstart.toml", "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    path = tmp_path / "quickstart" / "manifest.json"
    digest = json.loads(path.read_text())["digest"]
    assert f"{path}  {digest}" in res.output
    again = runner.invoke(cli, ["compile", "specs/examples/quickstart.toml", "-o", str(tmp_path)])
    assert again.exit_code == 0
    changed = runner.invoke(
        cli,
        [
            "compile",
            "specs/examples/quickstart.toml",
            "-o",
            str(tmp_path),
            "--set",
            "training.num_rollouts=5",
        ],
    )
    assert changed.exit_code == 2 and "manifest-exists" in changed.output


def test_recipes_command() -> None:
    res = CliRunner().invoke(cli, ["recipes"])
    assert res.exit_code == 0
    assert "quickstart" in res.output and "single-digit addition" in res.output
    js = json.loads(CliRunner().invoke(cli, ["recipes", "--json"]).output)
    assert all(r["description"] for r in js)


def test_compiler_never_imports_torch() -> None:
    code = (
        "import sys; from compiler.pipeline import compile_spec;"
        "compile_spec('specs/examples/quickstart.toml').manifest();"
        "bad=[m for m in sys.modules if m.split('.')[0] in ('torch','runtime','olmo_core','numpy')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_compile_cache_replays_identical_files(in_root: None, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "b"
    first = runner.invoke(cli, ["compile", "specs/examples/quickstart.toml", "-o", str(out)])
    assert first.exit_code == 0, first.output
    files = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert list((tmp_path / "cache" / "compile").glob("*.json"))
    import shutil

    for p in out.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    shutil.rmtree(out)
    second = runner.invoke(cli, ["compile", "specs/examples/quickstart.toml", "-o", str(out)])
    assert second.exit_code == 0 and second.output == first.output
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == files
    assert oct((out / "quickstart" / "manifest.json").stat().st_mode & 0o777) == "0o444"
    # other inputs miss the cache and compile for real
    third = runner.invoke(
        cli,
        [
            "compile",
            "specs/examples/quickstart.toml",
            "-o",
            str(out),
            "--set",
            "training.num_rollouts=5",
        ],
    )
    assert third.exit_code == 2 and "manifest-exists" in third.output
