"""Extras and light commands: a command whose extra is missing says which `pip install` to
run (one line, exit 2); the commands that only read specs, manifests or receipts never
import torch; `rlc launch` refuses an uncommitted or unpushed checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "specs" / "examples" / "quickstart.toml"

# Runs `rlc ARGV...` in a fresh interpreter with some modules made unimportable (as on an
# install without the extra), then reports whether torch was imported.
_DRIVER = """
import json, sys
for name in json.loads(sys.argv[1]):
    sys.modules[name] = None  # `import name` now raises ModuleNotFoundError
from rlc_cli.main import cli
code = 0
try:
    cli(args=json.loads(sys.argv[2]), prog_name="rlc")
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else 1
print("TORCH_IMPORTED=%s" % ("torch" in sys.modules and sys.modules["torch"] is not None),
      file=sys.stderr)
sys.exit(code)
"""


def rlc(
    argv: list[str], *, block: tuple[str, ...] = (), cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("BEAKER_TOKEN", None)
    return subprocess.run(
        [sys.executable, "-c", _DRIVER, json.dumps(list(block)), json.dumps(argv)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith("TORCH_")]


def test_run_without_the_runtime_extra_is_one_line_exit_2() -> None:
    res = rlc(["run", str(QUICKSTART), "--no-progress"], block=("torch",))
    assert res.returncode == 2, res.stderr
    lines = _lines(res.stderr)
    assert len(lines) == 1, res.stderr
    assert "runtime extra" in lines[0] and "pip install -e '.[runtime]'" in lines[0]
    assert "Traceback" not in res.stderr


def test_export_without_the_runtime_extra_is_one_line_exit_2(tmp_path: Path) -> None:
    (tmp_path / "checkpoints" / "step-000001" / "model").mkdir(parents=True)
    (tmp_path / "checkpoints" / "step-000001" / "COMPLETE").write_text("")
    res = rlc(["export", str(tmp_path), "--out", str(tmp_path / "hf")], block=("torch",))
    assert res.returncode == 2, res.stderr
    assert _lines(res.stderr) == [
        "rlc: error: `rlc export` needs the runtime extra (torch not installed): "
        "pip install -e '.[runtime]' (in the rlc checkout)"
    ]


def test_launch_without_beaker_is_one_line_exit_2(tmp_path: Path) -> None:
    build = tmp_path / "build"
    assert rlc(["compile", str(QUICKSTART), "-o", str(build)]).returncode == 0
    manifest = next(build.glob("*/manifest.json"))
    res = rlc(["launch", str(manifest)], block=("beaker",))
    assert res.returncode == 2, res.stderr
    lines = _lines(res.stderr)
    assert len(lines) == 1 and "pip install -e '.[launch]'" in lines[0], res.stderr
    # a dry run needs no beaker-py
    assert (
        rlc(
            ["launch", str(manifest), "--dry-run", "--receipts-dir", str(tmp_path / "r")],
            block=("beaker",),
        ).returncode
        == 0
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["validate", str(QUICKSTART)],
        ["plan", str(QUICKSTART)],
        ["plan", str(QUICKSTART), "--effective"],
        ["compile", str(QUICKSTART), "-o", "{tmp}/build"],
        ["explain", "trainer.expert_parallel"],
        ["explain", "trainer.expert_parallel", "--format", "json"],
        ["lint", "{tmp}/none"],
        ["status", "--receipts-dir", "{tmp}/receipts"],
        ["schema"],
        ["export", "{tmp}", "--out", "{tmp}/hf"],  # no checkpoint: refused before torch
    ],
    ids=lambda a: " ".join(a[:1]),
)
def test_light_commands_do_not_import_torch(argv: list[str], tmp_path: Path) -> None:
    res = rlc([a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert "TORCH_IMPORTED=False" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_print_effective_does_not_import_torch(tmp_path: Path) -> None:
    """``execute MANIFEST --print-effective`` shows every component's settings (the
    trainer's too) from plain data: no tensor library is loaded."""
    from compiler.manifest.manifest import write_manifest
    from compiler.pipeline import compile_spec

    manifest = write_manifest(compile_spec(str(QUICKSTART), []).manifest(), tmp_path / "m.json")
    script = (
        "import sys\n"
        "from runtime.entrypoints.execute import main\n"
        "code = main([sys.argv[1], '--print-effective'])\n"
        "print('TORCH_IMPORTED=%s' % ('torch' in sys.modules), file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", script, str(manifest)],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert "TORCH_IMPORTED=False" in res.stderr, res.stderr
    assert '"trainer"' in res.stdout


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def test_launch_refuses_a_dirty_or_unpushed_checkout(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(
        repo,
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@e",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "x",
    )
    text = QUICKSTART.read_text().replace('root = "../../runs/quickstart"', 'root = "runs/q"')
    (repo / "spec.toml").write_text(text)  # untracked: not a change of the checkout
    assert rlc(["compile", "spec.toml", "-o", "build"], cwd=repo).returncode == 0
    manifest = str(next((repo / "build").glob("*/manifest.json")))
    (repo / "a.txt").write_text("1")
    _git(repo, "add", "a.txt")
    receipts = ["--receipts-dir", str(tmp_path / "r")]

    dirty = rlc(["launch", manifest, *receipts], cwd=repo)
    assert dirty.returncode == 2
    assert "uncommitted changes (a.txt)" in dirty.stderr and "--allow-dirty" in dirty.stderr

    _git(repo, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", "y")
    unpushed = rlc(["launch", manifest, *receipts], cwd=repo)
    assert unpushed.returncode == 2
    assert "on no remote branch" in unpushed.stderr

    # allowed: it gets as far as Beaker's credentials (none here), still a user error
    allowed = rlc(["launch", manifest, "--allow-dirty", *receipts], cwd=repo)
    assert allowed.returncode == 2
    assert "remote branch" not in allowed.stderr and "Beaker" in allowed.stderr
    assert not (tmp_path / "r").exists() or not list((tmp_path / "r").iterdir())


def test_run_needs_sglang_router_only_where_the_plan_runs_one(tmp_path, monkeypatch, capsys):
    """``inference.router = false`` runs without sglang-router installed; a plan with a
    router and no sglang-router is refused with one line and exit 2 before anything starts."""
    import json

    from rlc_cli import extras
    from rlc_cli.commands.run import _require_router_if_planned

    monkeypatch.setattr(extras, "installed", lambda name: name != "sglang_router")
    without = tmp_path / "without.json"
    without.write_text(json.dumps({"plan": {"placement": {"router": None}}}))
    _require_router_if_planned(without)  # returns: nothing to check
    with_router = tmp_path / "with.json"
    with_router.write_text(json.dumps({"plan": {"placement": {"router": {"node": 0}}}}))
    with pytest.raises(SystemExit) as stop:
        _require_router_if_planned(with_router)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sglang-router" in err[0] and "inference.router = false" in err[0]
    assert extras.missing_modules("runtime", skip=("sglang_router",)) == []
