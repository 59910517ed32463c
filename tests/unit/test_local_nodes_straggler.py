"""Simulated nodes: once the leader has finished, a node that never exits (hung, stopped) is
stopped after its heartbeat timeout and a grace, and the finished run keeps its result."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from runtime.launch import local_nodes

NODE = (
    "import os, time\n"
    "if os.environ['RLC_NODE_RANK'] == '0':\n"
    "    raise SystemExit(0)\n"
    "time.sleep(600)\n"
)


def test_a_node_still_running_after_the_run_finished_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_text(
        json.dumps(
            {
                "commands": {"trainer_argv": ["python", "-c", NODE]},
                "config": {"launch": {"coordination": {"heartbeat_timeout": 1}}},
            }
        )
    )
    monkeypatch.setattr(local_nodes, "node_argv", lambda m: [sys.executable, "-c", NODE])
    monkeypatch.setattr(local_nodes, "GRACE_S", 1.0)
    code = local_nodes.run_nodes(manifest, 2, tmp_path)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "rlc: node 1 was still running 2s after the run finished: stopped" in out
    assert "rlc: all 2 nodes finished" in out
