"""Heartbeats in the run's registry: a hung or cut-off node is seen, not only a dead one.

A process watch sees an exit; it cannot see a node that is stopped (SIGSTOP, a hung
kernel) or cut off from the others. So every node process beats into the leader's store
(``hb/node:K``, a counter) at a fixed interval, and beats for each of its roles (engines,
router, judges, trainer ranks) while that role's process runs (a stopped process gets no
beat). Each node lists its live roles under ``hb/roles/K``. Every node watches every other
node and every listed role: a counter that has not moved for ``heartbeat_timeout``
(``launch.coordination.heartbeat_timeout``) is a silent peer, reported once with how long
it was silent; a node whose own store calls fail that long has lost the leader. The clocks
of the nodes are never compared: each watcher times what it sees with its own clock.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol


class BeatStore(Protocol):
    """The store operations heartbeats need (a c10d TCPStore, or a dict on one node)."""

    def add(self, key: str, amount: int) -> int: ...
    def set(self, key: str, value: str) -> None: ...
    def get(self, key: str) -> bytes: ...
    def check(self, keys: list[str]) -> bool: ...


class MemoryStore:
    """A one-node run: the same keys in this process (only local roles to watch)."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.lock = threading.Lock()

    def add(self, key: str, amount: int) -> int:
        with self.lock:
            self.data[key] = int(self.data.get(key, 0)) + amount
            return int(self.data[key])

    def set(self, key: str, value: str) -> None:
        with self.lock:
            self.data[key] = value.encode()

    def get(self, key: str) -> bytes:
        with self.lock:
            return bytes(self.data[key])

    def check(self, keys: list[str]) -> bool:
        with self.lock:
            return all(k in self.data for k in keys)


def store_client(leader: str, port: int, timeout_s: float, is_master: bool = False) -> BeatStore:
    """A connection to the leader's c10d store (``is_master``: host it); every call gives
    up after ``timeout_s``, so a hung leader is noticed in time. The heartbeat thread keeps
    its own connection beside the registry's."""
    from torch.distributed import TCPStore

    return TCPStore(  # type: ignore[no-any-return]
        leader,
        port,
        is_master=is_master,
        wait_for_workers=False,
        timeout=timedelta(seconds=timeout_s),
        use_libuv=True,
    )


def _state(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return b"X"
    end = stat.rfind(b")")
    return stat[end + 2 : end + 3]


def alive(pid: int) -> bool:
    """The process exists (exited ones are the process watch's business)."""
    return _state(pid) not in (b"Z", b"X")


def running(pid: int) -> bool:
    """Alive and not stopped (``T``) or traced: only a running process gets beats."""
    return alive(pid) and _state(pid) not in (b"T", b"t")


def interval_for(timeout_s: float) -> float:
    """Beats several times per timeout, at most every 5 s."""
    return max(0.2, min(5.0, timeout_s / 5.0))


@dataclass
class Silence:
    """A peer that stopped beating: what it is, how long it was silent, where it runs."""

    name: str  # "node:1", "engine:0", "trainer-rank:1"
    node: int
    silent_s: float
    timeout_s: float
    pid: int | None = None  # this node's process for the role, when it is local
    cause: str | None = None  # the node's own one-line cause, when it failed and said so

    def __str__(self) -> str:
        if self.cause is not None:
            return f"node {self.node} failed: {self.cause}"
        what = (
            f"node {self.node}"
            if self.name.startswith("node:")
            else f"{self.name} on node {self.node}"
        )
        return (
            f"{what} sent no heartbeat for {self.silent_s:.1f}s "
            f"(launch.coordination.heartbeat_timeout = {self.timeout_s:g}s): hung, gone or cut off"
        )


@dataclass
class Heartbeats:
    """One node's beating and watching thread (see the module docstring)."""

    store: BeatStore
    node: int
    nodes: int
    timeout_s: float
    local: Callable[[], dict[str, int]]  # this node's roles: name -> pid
    on_silent: Callable[[Silence], None]
    interval_s: float = 0.0
    _seen: dict[str, tuple[int, float]] = field(default_factory=dict)
    _reported: set[str] = field(default_factory=set)
    _listed: str | None = None
    _last_ok: float = field(default_factory=time.monotonic)
    _last_tick: float = field(default_factory=time.monotonic)
    _store_failed: bool = False
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Heartbeats:
        if not self.interval_s:
            self.interval_s = interval_for(self.timeout_s)
        self._thread = threading.Thread(target=self._run, name="rlc-heartbeat", daemon=True)
        self._thread.start()
        if self.node != 0:  # store calls to a stopped leader block for good: time them
            threading.Thread(
                target=self._watch_leader, name="rlc-leader-watch", daemon=True
            ).start()
        return self

    def stop(self, finished: bool = False, cause: str | None = None) -> None:
        """Stop beating; ``finished``: this node is done with the run (it is not watched
        any more, so a node that ends first is not taken for a silent one); ``cause``: this
        node failed, and the others name the run's end by this line rather than by silence."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 1.0)
        if finished or cause:
            with contextlib.suppress(Exception):
                if cause and not finished:
                    self.store.set(f"hb/failed/{self.node}", cause[:1000])
                self.store.set(f"hb/left/{self.node}", "done" if finished else "failed")

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.tick(time.monotonic())
            except Exception:  # the store did not answer: the leader may be gone
                self._store_failed = True

    def _watch_leader(self) -> None:
        """The leader's store answers every tick; a tick that has not completed (a call
        blocked on a stopped leader, or failing) for ``timeout_s`` is the leader's silence."""
        while not self._stop.wait(self.interval_s):
            silent = time.monotonic() - self._last_ok
            if silent > self.timeout_s:
                self._report(Silence("node:0", 0, silent, self.timeout_s))

    def tick(self, now: float) -> None:
        """Beat for this node and its running roles, then look at everyone's counters."""
        if now - self._last_tick > self.timeout_s:  # this node itself was stopped: re-base
            self._seen.clear()
        self._last_tick = now
        roles = {r: pid for r, pid in self.local().items() if alive(pid)}
        listed = ",".join(sorted(roles))
        if listed != self._listed:
            self.store.set(f"hb/roles/{self.node}", listed)
            self._listed = listed
        for name in [f"node:{self.node}", *(r for r, pid in roles.items() if running(pid))]:
            self.store.add(f"hb/{self.node}/{name}", 1)
        for node in range(self.nodes):
            failed = f"hb/failed/{node}"
            if node != self.node and self.store.check([failed]):
                cause = self.store.get(failed).decode(errors="replace")
                self._report(Silence(f"node:{node}", node, 0.0, self.timeout_s, cause=cause))
        for node, name in self._watched():
            key = f"hb/{node}/{name}"
            count = self.store.add(key, 0)
            if count == 0:  # not started yet: the coordinated start waits for it
                continue
            old = self._seen.get(key)
            if old is None or old[0] != count:
                self._seen[key] = (count, now)
                continue
            silent = now - old[1]
            if silent > self.timeout_s:
                pid = roles.get(name) if node == self.node else None
                self._report(Silence(name, node, silent, self.timeout_s, pid))
        self._last_ok = time.monotonic()

    def _watched(self) -> list[tuple[int, str]]:
        out: list[tuple[int, str]] = []
        for node in range(self.nodes):
            if node != self.node and self.store.check([f"hb/left/{node}"]):
                continue
            if node != self.node:
                out.append((node, f"node:{node}"))
            key = f"hb/roles/{node}"
            if self.store.check([key]):
                listed = self.store.get(key).decode()
                out.extend((node, r) for r in listed.split(",") if r)
        return out

    def _report(self, silence: Silence) -> None:
        key = f"{silence.node}/{silence.name}"
        if key in self._reported:
            return
        self._reported.add(key)
        self.on_silent(silence)


def stop_hung(pid: int | None) -> None:
    """A role of this node that stopped beating is killed, so that every call blocked on it
    (a collective, a request) ends at once and the run can stop with the cause."""
    if pid is None:
        return
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
