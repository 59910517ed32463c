"""Simulated nodes: the multinode CPU example (trainer and router on node 0, two engines on
node 1, gloo publication) as simulated nodes; kill -9 of the engine node and then of the
trainer node, each followed by a resubmission that resumes from the newest checkpoint and
trains on exactly the prompts the killed runs drew, none lost or repeated."""

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
N = 4


def compile_at(out: Path) -> Path:
    _need_runtime()
    from compiler.manifest import write_manifest
    from compiler.pipeline import compile_spec

    sets = [f"training.num_rollouts={N}", "checkpoint.interval=1", f'output.root="{out / "run"}"']
    return write_manifest(compile_spec(str(SPEC), sets).manifest(), out / "manifest.json")


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
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError(f"nodes did not finish in {timeout}s:\n{out[-3000:]}") from None
    return proc.returncode, out


def kill_node_after(manifest: Path, root: Path, node: int, collections: int) -> str:
    """Start the nodes, kill -9 ``node`` once ``collections`` are logged; the others stop."""
    proc = launch(manifest)
    assert proc.stdout is not None
    pids: dict[int, int] = {}
    while len(pids) < 2:
        m = re.match(r"rlc: node (\d+) \S+: pid (\d+)", proc.stdout.readline())
        if m:
            pids[int(m.group(1))] = int(m.group(2))
    deadline = time.monotonic() + 200
    while (
        len({r["collection"] for r in records(root)} if (root / "metrics.jsonl").exists() else ())
        < collections
    ):
        assert proc.poll() is None and time.monotonic() < deadline, "nodes ended early"
        time.sleep(0.2)
    import os

    os.kill(pids[node], signal.SIGKILL)
    code, out = finish(proc)
    assert code != 0 and f"node {node} exited with code -9: killed by SIGKILL" in out, out
    return out


def test_multinode_run_survives_kill9_of_each_node(tmp_path: Path) -> None:
    manifest = compile_at(tmp_path)
    root = tmp_path / "run"
    kill_node_after(manifest, root, node=1, collections=1)  # the engine node
    before = {r["collection"]: r["prompt_ids"] for r in records(root)}
    kill_node_after(manifest, root, node=0, collections=3)  # the trainer (and leader) node
    before.update({r["collection"]: r["prompt_ids"] for r in records(root)})
    code, out = finish(launch(manifest))
    assert code == 0, out
    logs = root / "logs"
    text = (logs / "node-0" / "execute.log").read_text()
    assert text.count("resumed from collection") >= 2
    assert "weight audit: 2 engine(s) match" in text
    assert (logs / "node-1" / "engine-0.log").exists() and (logs / "node-0" / "router.log").exists()
    got = records(root)
    assert [r["collection"] for r in got] == list(range(N))
    # no prompt lost or repeated: every collection trained on what it drew before the kills
    assert all(got[c]["prompt_ids"] == ids for c, ids in before.items() if c < N)
    seen = [pid for r in got for pid in r["prompt_ids"]]
    assert len(seen) == len(set(seen))
    assert [r["policy_version"] for r in got] == list(range(1, N + 1))
