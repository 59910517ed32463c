"""The quickstart with several trainer ranks (gloo on CPU): FSDP over two processes, EP2 on
the tiny MoE, and kill -9 of one rank (the run stops with exit 3 naming it, then resumes)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from rt_helpers import SMALL, compile_manifest, finish, kill9, records, run, start, wait_for

pytestmark = pytest.mark.slow


def _follower(root: Path, timeout: float = 120) -> tuple[int, bytes, bytes]:
    """Trainer rank 1 (``python -m runtime.trainer.ranks``) of this run: its pid, and its
    ``/proc`` command line and environment."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["pgrep", "-f", "runtime.trainer.ranks"], capture_output=True, text=True
        ).stdout.split()
        for pid in out:
            try:
                env = Path(f"/proc/{pid}/environ").read_bytes()
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if str(root).encode() in cmd and b"RANK=1\0" in env:
                return int(pid), cmd, env
        time.sleep(0.2)
    raise AssertionError("trainer rank 1 did not start")


def _assert_runs_as_compiled(raw_cmd: bytes, raw_env: bytes, manifest: Path) -> None:
    """Rank 1 runs the manifest's ``commands.trainer_rank``: its argv and every variable of
    its environment, with only the documented run-time values substituted."""
    import json
    import os

    from runtime.trainer.ranks import rank_values

    compiled = json.loads(manifest.read_text())["commands"]["trainer_rank"]
    cmd = [a.decode() for a in raw_cmd.split(b"\0") if a]
    assert cmd == [sys.executable, *compiled["argv"][1:-1], str(manifest)]
    env = dict(a.decode().split("=", 1) for a in raw_env.split(b"\0") if b"=" in a)
    values = rank_values(0, 1, 2, "127.0.0.1", int(env["MASTER_PORT"]), os.cpu_count() or 1)
    want = {k: v.format(**values) for k, v in compiled["env"].items()}
    assert {k: env.get(k) for k in want} == want


def test_two_cpu_ranks_survive_kill9_of_a_rank_and_resume(tmp_path: Path) -> None:
    manifest = compile_manifest(
        tmp_path, (*SMALL, "training.num_rollouts=3", "trainer.cpu_processes=2")
    )
    root = tmp_path / "run"
    proc = start(manifest)
    wait_for(lambda: len(records(root)) >= 1, timeout=150, proc=proc)
    follower, cmd, env = _follower(manifest.parent)
    kill9(follower)
    _assert_runs_as_compiled(cmd, env, manifest)
    code, out = finish(proc, timeout=120)
    assert code == 3, out
    assert "trainer rank 1 died (signal 9)" in out, out[-2000:]
    assert all(r["trainer/world_size"] == 2 for r in records(root))

    code, out = run(manifest, timeout=200)
    assert code == 0, out[-3000:]
    assert "resumed from collection" in out
    got = records(root)
    assert [r["collection"] for r in got][-1] == 2
    assert {r["trainer/world_size"] for r in got} == {2.0}


def test_tiny_moe_expert_parallel_two_ranks(tmp_path: Path) -> None:
    manifest = compile_manifest(
        tmp_path,
        (
            *SMALL,
            "training.num_rollouts=2",
            'model.source="builtin:tiny-moe"',
            "trainer.cpu_processes=2",
            "trainer.expert_parallel=2",
            "output.export_hf=false",  # the builtin MoE has no HF architecture
            "checkpoint.export_hf_final=false",
        ),
    )
    code, out = run(manifest, timeout=200)
    assert code == 0, out[-3000:]
    got = records(tmp_path / "run")
    assert [r["collection"] for r in got] == [0, 1]
    assert all(r["trainer/expert_parallel"] == 2 and r["trainer/world_size"] == 2 for r in got)
    ckpt = tmp_path / "run" / "checkpoints"
    assert any((p / "dist").is_dir() for p in ckpt.iterdir())


def test_trainer_over_two_simulated_nodes(tmp_path: Path) -> None:
    """trainer.nodes = 2 (HSDP: one replica per node): node 1's rank finds rank 0 through
    the run's registry; three simulated nodes (the engines on the third)."""
    from rt_helpers import ROOT, _need_runtime, env

    _need_runtime()
    from compiler.manifest.manifest import write_manifest
    from compiler.pipeline import compile_spec

    spec = ROOT / "specs" / "examples" / "multinode-cpu.toml"
    sets = ["trainer.nodes=2", "training.num_rollouts=2", f'output.root="{tmp_path / "run"}"']
    manifest = write_manifest(compile_spec(str(spec), sets).manifest(), tmp_path / "m.json")
    proc = subprocess.run(
        [sys.executable, "-m", "runtime.launch.local_nodes", str(manifest), "--nodes", "3"],
        cwd=ROOT,
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    got = records(tmp_path / "run")
    assert [r["collection"] for r in got] == [0, 1]
    assert {r["trainer/world_size"] for r in got} == {2.0}
    step = sorted((tmp_path / "run" / "checkpoints").glob("step-*"))[-1]
    assert (step / "dist").is_dir() and (step / "rng-rank1.pt").is_file()


def test_follower_lost_at_startup_is_named_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower that exits before joining: rank 0 stops waiting for it (bounded by the
    start-up timeout, watching the rank processes) and the run ends with exit 3 naming
    the rank and its log, not after the 30-minute default of torch.distributed."""
    manifest = compile_manifest(
        tmp_path, (*SMALL, "training.num_rollouts=1", "trainer.cpu_processes=2")
    )
    monkeypatch.setenv("RLC_TEST_FAIL_RANK_AT", "startup")
    code, out = run(manifest, timeout=120)
    assert code == 3, out[-3000:]
    line = next(ln for ln in out.splitlines() if ln.startswith("rlc: run failed"))
    assert "trainer rank 1 died (exit code 3)" in line, line
    assert "injected failure at startup" in line and "full log:" in line, line
    assert not records(tmp_path / "run")
