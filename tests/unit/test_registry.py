"""The leader's role registry (a real c10d TCPStore on loopback): registration, lookup from
another node, the startup timeout naming the missing role and its node, the end of the run
and its acknowledgement; simulated-node launcher argument errors."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from runtime.engines.process import free_port  # noqa: E402
from runtime.registry import Registry, RegistryError  # noqa: E402


def test_roles_register_and_missing_ones_are_named() -> None:
    port = free_port("127.0.0.1")
    leader = Registry("127.0.0.1", port, node=0, is_leader=True, timeout_s=10)
    other = Registry("127.0.0.1", port, node=1, is_leader=False, timeout_s=10)
    other.register("engine:0", "http://127.0.1.2:4000")
    owners = {"engine:0": 1, "engine:1": 1}
    assert leader.lookup(["engine:0"], owners, 2) == {"engine:0": "http://127.0.1.2:4000"}
    with pytest.raises(RegistryError, match=r"node 0: engine:1 on node 1 did not come up"):
        leader.lookup(["engine:0", "engine:1"], owners, 1)
    assert other.done() is None
    other.acknowledge()
    leader.finish("done", nodes=2, linger_s=5)  # returns at once: node 1 acknowledged
    assert other.done() == "done"


def test_unreachable_leader_is_one_line() -> None:
    with pytest.raises(RegistryError, match="node 1 could not reach the registry"):
        Registry("127.0.0.1", free_port("127.0.0.1"), node=1, is_leader=False, timeout_s=1)


def test_local_nodes_count_must_match_the_plan(tmp_path, capsys) -> None:
    from pathlib import Path

    from compiler.manifest import write_manifest
    from compiler.pipeline import compile_spec
    from runtime.launch.local_nodes import main

    spec = str(Path(__file__).resolve().parents[2] / "specs" / "examples" / "multinode-cpu.toml")
    manifest = compile_spec(spec, [f'output.root="{tmp_path / "run"}"']).manifest()
    path = write_manifest(manifest, tmp_path / "m.json")
    assert main([str(path), "--nodes", "3"]) == 2
    assert "--local-nodes 3, but the plan has 2 node(s)" in capsys.readouterr().err
