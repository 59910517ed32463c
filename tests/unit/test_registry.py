"""The leader's role registry (a real c10d TCPStore on loopback): registration, lookup from
another node, the startup timeout naming the missing role and its node, the end of the run
and its acknowledgement; simulated-node launcher argument errors."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from runtime.engines.process import free_port  # noqa: E402
from runtime.node.registry import Registry, RegistryError  # noqa: E402


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

    from compiler.manifest.manifest import write_manifest
    from compiler.pipeline import compile_spec
    from runtime.launch.local_nodes import main

    spec = str(Path(__file__).resolve().parents[2] / "specs" / "examples" / "multinode-cpu.toml")
    manifest = compile_spec(spec, [f'output.root="{tmp_path / "run"}"']).manifest()
    path = write_manifest(manifest, tmp_path / "m.json")
    assert main([str(path), "--nodes", "3"]) == 2
    assert "--local-nodes 3, but the plan has 2 node(s)" in capsys.readouterr().err


def _wait(cond, timeout: float) -> None:  # type: ignore[no-untyped-def]
    import time

    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.1)


NODE_1 = """
import sys, time
from runtime.node.heartbeat import Heartbeats, store_client
port = int(sys.argv[1])
Heartbeats(store_client("127.0.0.1", port, 2.0), 1, 2, 2.0, dict, print).start()
time.sleep(120)
"""


def test_a_stopped_node_is_declared_silent_by_the_leader() -> None:
    """Node 1 is a real process beating into the leader's store; SIGSTOP it (a hung node:
    no exit for a process watch to see) and the leader reports it with its silence."""
    import os
    import signal
    import subprocess
    import sys

    from runtime.node.heartbeat import Heartbeats, store_client

    port = free_port("127.0.0.1")
    host = Registry("127.0.0.1", port, node=0, is_leader=True, timeout_s=10)  # noqa: F841
    child = subprocess.Popen([sys.executable, "-c", NODE_1, str(port)])
    seen: list = []
    leader = Heartbeats(store_client("127.0.0.1", port, 2.0), 0, 2, 2.0, dict, seen.append)
    leader.interval_s = 0.2
    leader.start()
    try:
        probe = store_client("127.0.0.1", port, 5.0)
        _wait(lambda: probe.add("hb/1/node:1", 0) > 1, 30)
        assert not seen  # beating: nothing to report
        os.kill(child.pid, signal.SIGSTOP)
        _wait(lambda: bool(seen), 15)
        assert seen[0].name == "node:1" and seen[0].silent_s > 2.0
        assert str(seen[0]).startswith("node 1 sent no heartbeat for")
        assert "launch.coordination.heartbeat_timeout = 2s" in str(seen[0])
    finally:
        leader.stop()
        child.kill()
        os.kill(child.pid, signal.SIGCONT)
        child.wait()


def test_a_stopped_role_of_this_node_is_named_and_killed() -> None:
    """A role (here a real child process standing for an engine) beats through its node
    while it runs; stopped, it goes silent, is named, and the node kills it so nothing
    stays blocked on it."""
    import os
    import signal
    import subprocess

    from runtime.node.heartbeat import Heartbeats, MemoryStore, stop_hung

    child = subprocess.Popen(["sleep", "120"])
    seen: list = []

    def on_silent(s) -> None:  # type: ignore[no-untyped-def]
        seen.append(s)
        stop_hung(s.pid)

    hb = Heartbeats(MemoryStore(), 0, 1, 1.0, lambda: {"engine:1": child.pid}, on_silent)
    hb.interval_s = 0.2
    hb.start()
    try:
        _wait(lambda: hb.store.add("hb/0/engine:1", 0) > 2, 10)
        assert not seen
        os.kill(child.pid, signal.SIGSTOP)
        _wait(lambda: bool(seen), 10)
        assert str(seen[0]).startswith("engine:1 on node 0 sent no heartbeat for")
        assert seen[0].pid == child.pid
        assert child.wait(timeout=10) == -signal.SIGKILL
    finally:
        hb.stop()
        child.kill()
        child.wait()


def test_a_node_that_fails_is_named_by_its_own_cause_not_by_silence() -> None:
    """A node that ends with a failure tells the others its one-line cause: the run ends
    at once with that line, not after the heartbeat timeout with "no heartbeat"."""
    import time

    from runtime.node.heartbeat import Heartbeats, MemoryStore

    store = MemoryStore()
    seen: list = []
    leader = Heartbeats(store, 0, 2, 60.0, dict, seen.append)
    node = Heartbeats(store, 1, 2, 60.0, dict, lambda s: None)
    for hb in (leader, node):
        hb.interval_s = 0.1
        hb.start()
    try:
        _wait(lambda: store.add("hb/1/node:1", 0) > 2, 10)
        t0 = time.monotonic()
        node.stop(cause="engine:0 exited with code 1 (log: logs/engine-0.log)")
        _wait(lambda: bool(seen), 10)
        assert time.monotonic() - t0 < 30  # long before the 60 s heartbeat timeout
        assert str(seen[0]) == "node 1 failed: engine:0 exited with code 1 (log: logs/engine-0.log)"
        assert len(seen) == 1  # named once
    finally:
        leader.stop()
        node.stop()


LEADER = """
import sys, time
from runtime.node.heartbeat import Heartbeats, store_client
from runtime.node.registry import Registry
port = int(sys.argv[1])
reg = Registry("127.0.0.1", port, node=0, is_leader=True, timeout_s=10)
Heartbeats(store_client("127.0.0.1", port, 2.0), 0, 2, 2.0, dict, print).start()
time.sleep(120)
"""


def test_a_stopped_leader_is_declared_silent_by_a_node() -> None:
    """The leader (hosting the store) is a real process; SIGSTOP it: store calls to it
    block for good, and node 1 still names the leader's silence (timed, not awaited)."""
    import os
    import signal
    import subprocess
    import sys

    from runtime.node.heartbeat import Heartbeats, store_client

    port = free_port("127.0.0.1")
    child = subprocess.Popen([sys.executable, "-c", LEADER, str(port)])
    seen: list = []
    node = None
    try:
        store = store_client("127.0.0.1", port, 30.0)  # waits for the leader to listen
        node = Heartbeats(store, 1, 2, 2.0, dict, seen.append)
        node.interval_s = 0.2
        node.start()
        _wait(lambda: node._seen != {}, 30)  # the leader's beats are seen
        assert not seen
        os.kill(child.pid, signal.SIGSTOP)
        _wait(lambda: bool(seen), 15)
        assert seen[0].name == "node:0" and str(seen[0]).startswith("node 0 sent no heartbeat")
    finally:
        child.kill()
        os.kill(child.pid, signal.SIGCONT)
        child.wait()
        if node is not None:  # its thread would beat into the dead store for the session
            node.stop()
