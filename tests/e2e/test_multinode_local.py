"""Simulated nodes: the multinode CPU example (trainer and router on node 0, two engines on
node 1, gloo publication) as simulated nodes; kill -9 of the engine node and then of the
trainer node, each followed by a resubmission that resumes from the newest checkpoint and
trains on exactly the prompts the killed runs drew, none lost or repeated; a hung (stopped)
engine node found by its silent heartbeat."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rt_helpers import ROOT, _need_runtime, env, records

pytestmark = pytest.mark.slow

SPEC = ROOT / "specs" / "examples" / "multinode-cpu.toml"
N = 8  # room for each killed run to overshoot its kill by a few fast collections


def sets_for(out: Path, *extra: str) -> list[str]:
    sets = [f"training.num_rollouts={N}", "checkpoint.interval=1", f'output.root="{out / "run"}"']
    return sets + list(extra)


def compile_at(out: Path, *extra: str) -> Path:
    _need_runtime()
    from compiler.manifest.manifest import write_manifest
    from compiler.pipeline import compile_spec

    manifest = compile_spec(str(SPEC), sets_for(out, *extra)).manifest()
    return write_manifest(manifest, out / "manifest.json")


def rlc_run(out: Path) -> subprocess.Popen[str]:
    """The resubmission as a user types it: ``rlc run SPEC --set ... --local-nodes 2``
    (the same compiled manifest, so the same run directory)."""
    argv = [sys.executable, "-m", "rlc_cli.main", "run", str(SPEC), "--local-nodes", "2"]
    for s in sets_for(out):
        argv += ["--set", s]
    return subprocess.Popen(
        argv, cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def launch(manifest: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "runtime.launch.local_nodes", str(manifest), "--nodes", "2"],
        cwd=ROOT,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 240) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()  # the launcher stops its nodes (their own sessions) on SIGTERM
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        raise AssertionError(f"nodes did not finish in {timeout}s:\n{out[-3000:]}") from None
    return proc.returncode, out


def logged(root: Path) -> int:
    """Collections in the run's metrics so far (a resumed run logs each once)."""
    if not (root / "metrics.jsonl").exists():
        return 0
    return len({r["collection"] for r in records(root)})


def signal_node_after(
    manifest: Path, root: Path, node: int, collections: int, sig: int = signal.SIGKILL
) -> tuple[int, str]:
    """Start the nodes, signal ``node`` once this launch has logged ``collections`` more
    (a killed run may have overshot its own kill by a few collections: counting from the
    run's total would signal the next launch before it did anything); the others stop."""
    start = logged(root)
    proc = launch(manifest)
    assert proc.stdout is not None
    pids: dict[int, int] = {}
    while len(pids) < 2:
        m = re.match(r"rlc: node (\d+) \S+: pid (\d+)", proc.stdout.readline())
        if m:
            pids[int(m.group(1))] = int(m.group(2))
    deadline = time.monotonic() + 200
    while logged(root) < start + collections:
        if proc.poll() is not None or time.monotonic() >= deadline:
            code, out = finish(proc, timeout=60)
            raise AssertionError(
                f"nodes ended (code {code}) before collection {collections}:\n{out[-4000:]}"
            )
        time.sleep(0.2)
    import os

    os.kill(pids[node], sig)
    return finish(proc)


def kill_node_after(manifest: Path, root: Path, node: int, collections: int) -> str:
    code, out = signal_node_after(manifest, root, node, collections)
    assert code != 0 and f"node {node} exited with code -9: killed by SIGKILL" in out, out
    return out


def test_multinode_run_survives_kill9_of_each_node(tmp_path: Path) -> None:
    manifest = compile_at(tmp_path)
    root = tmp_path / "run"
    kill_node_after(manifest, root, node=1, collections=1)  # the engine node
    before = {r["collection"]: r["prompt_ids"] for r in records(root)}
    kill_node_after(manifest, root, node=0, collections=2)  # the trainer (and leader) node
    before.update({r["collection"]: r["prompt_ids"] for r in records(root)})
    code, out = finish(rlc_run(tmp_path))
    assert code == 0, out
    logs = root / "logs"
    text = (logs / "node-0" / "execute.log").read_text()
    assert text.count("resumed from collection") >= 2
    assert "weight audit: 2 engine(s) match" in text
    assert (logs / "node-1" / "engine-0.log").exists() and (logs / "node-0" / "router.log").exists()
    got = records(root)
    assert [r["collection"] for r in got] == list(range(N)), out[-5000:]
    # no prompt lost or repeated: every collection trained on what it drew before the kills
    assert all(got[c]["prompt_ids"] == ids for c, ids in before.items() if c < N)
    seen = [pid for r in got for pid in r["prompt_ids"]]
    assert len(seen) == len(set(seen))
    assert [r["policy_version"] for r in got] == list(range(1, N + 1))


def test_hung_engine_node_is_named_by_its_silent_heartbeat(tmp_path: Path) -> None:
    """SIGSTOP of the engine node's process: nothing exits (its engines even keep serving),
    but its heartbeats stop; the leader ends the run with exit 3 naming the node and how
    long it was silent, and keeps the newest checkpoint for the resubmission."""
    from runtime.checkpoints import latest_complete

    # more collections than the run can finish within the timeout after the stop
    manifest = compile_at(
        tmp_path, "training.num_rollouts=2000", "launch.coordination.heartbeat_timeout=4"
    )
    root = tmp_path / "run"
    code, out = signal_node_after(manifest, root, node=1, collections=1, sig=signal.SIGSTOP)
    assert code == 3, out[-3000:]
    failed = next(ln for ln in out.splitlines() if "node 0 exited with code 3" in ln)
    assert "node 1 sent no heartbeat for" in failed and "heartbeat_timeout = 4s" in failed, out
    assert latest_complete(root / "checkpoints") is not None
    assert len(records(root)) < 2000
