"""kill -9 mid-run (and a torn save), resume, and reproduce the uninterrupted run.

The quickstart variant here is deterministic (seeded per-sample sampling, CPU trainer), so a
resumed run must train on exactly the prompts the uninterrupted one did, collection by
collection, and reach the same rewards.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from rt_helpers import SMALL, child_pids, compile_manifest, records, run, start, wait_for

pytestmark = pytest.mark.slow

N = 4


def test_kill9_then_resume_reproduces_the_run(tmp_path: Path) -> None:
    overrides = (*SMALL, f"training.num_rollouts={N}")
    ref_manifest = compile_manifest(tmp_path / "ref", overrides)
    code, out = run(ref_manifest, "--resume", "never")
    assert code == 0, out
    ref = records(tmp_path / "ref" / "run")
    assert [r["collection"] for r in ref] == list(range(N))

    manifest = compile_manifest(tmp_path / "b", overrides)
    root = tmp_path / "b" / "run"
    proc = start(manifest)
    # checkpoint.interval=1: once collection 1 is logged, step-000002 exists; kill mid-run
    wait_for(lambda: len(records(root)) >= 2, timeout=100, proc=proc)
    proc.kill()
    proc.wait(timeout=30)
    assert proc.returncode == -9
    # what a kill during a save leaves behind: a .tmp dir and a dir without COMPLETE
    ckpts = root / "checkpoints"
    # the newest complete save (the kill may also have cut a save short: a .tmp of its own)
    done = (p for p in ckpts.iterdir() if p.name.startswith("step-") and (p / "COMPLETE").exists())
    newest = sorted(done)[-1]
    shutil.copytree(newest, ckpts / "step-000099.tmp")
    torn = ckpts / "step-000098"
    shutil.copytree(newest, torn)
    (torn / "COMPLETE").unlink()

    code, out = run(manifest)
    assert code == 0, out
    assert "resumed from collection" in out
    got = records(root)
    assert [r["collection"] for r in got] == list(range(N))
    # no prompt lost or repeated, same order as the uninterrupted run
    assert [r["prompt_ids"] for r in got] == [r["prompt_ids"] for r in ref]
    seen = [pid for r in got for pid in r["prompt_ids"]]
    assert len(seen) == len(set(seen))
    assert [r["reward/mean"] for r in got] == pytest.approx(
        [r["reward/mean"] for r in ref], abs=1e-9
    )
    assert [r["policy_version"] for r in got] == list(range(1, N + 1))
    # continuous values that depend on the restored weights, optimizer state and samples
    for key in ("train/entropy", "response_length/mean", "tokens/generated"):
        assert [r[key] for r in got] == pytest.approx([r[key] for r in ref], rel=1e-5), key


def test_ctrl_c_finishes_the_collection_saves_and_stops(tmp_path: Path) -> None:
    import signal

    manifest = compile_manifest(
        tmp_path, (*SMALL, "training.num_rollouts=50", "checkpoint.interval=100")
    )
    root = tmp_path / "run"
    proc = start(manifest)
    wait_for(lambda: len(records(root)) >= 1, timeout=100, proc=proc)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=90)
    assert proc.returncode == 130, out  # saved and stopped, reported as a Ctrl-C is
    assert '"stopped": true' in out
    done = len(records(root))
    assert 1 <= done < 50
    step = sorted(p.name for p in (root / "checkpoints").iterdir() if (p / "COMPLETE").exists())
    assert step == [f"step-{done:06d}"]  # the save on the way out, at the boundary
    children = child_pids(root)
    assert children and all(not Path(f"/proc/{pid}").exists() for pid in children.values())
