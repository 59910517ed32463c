"""Child-process supervision: start engines/router, notice deaths, always clean up.

Every child runs in its own process group so that a shutdown reaches its descendants
(the router and engine servers spawn workers); shutdown is SIGTERM, a grace period, then
SIGKILL. Output goes to a log file per child under the run's output root, so a
failure message can give the cause read from it (`runtime.node.failure`) and the log's path.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runtime.node.failure import cause_from_log, describe_exit, shown_path


class ChildDied(RuntimeError):
    """A supervised child exited while the run still needed it.

    The message is one line: the cause read from the child's log, then where that log is.
    """

    def __init__(self, name: str, returncode: int | None, log_path: Path | None) -> None:
        super().__init__(describe_exit(name, returncode, log_path))
        self.name = name
        self.returncode = returncode
        self.log_path = log_path


@dataclass
class Child:
    name: str
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes]
    critical: bool = True
    expected_exit: bool = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class Supervisor:
    """Owns the run's child processes."""

    log_dir: Path
    grace_s: float = 10.0
    # extra environment per child name (e.g. its private compiler-cache directories)
    env_for: Callable[[str], Mapping[str, str]] | None = None
    # called at every poll of ``wait_ready``: raises to end the wait early (work done
    # beside the children, such as the trainer's start, failed)
    watch: Callable[[], None] | None = None
    children: list[Child] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(
        self,
        name: str,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        critical: bool = True,
        cwd: str | Path | None = None,
    ) -> Child:
        """Spawn ``argv`` in a new session with stdout+stderr to ``<log_dir>/<name>.log``."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name.replace(':', '-')}.log"
        full_env = dict(os.environ)
        if self.env_for is not None:
            full_env.update(self.env_for(name))
        full_env.update(env or {})
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                list(argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=full_env,
                cwd=None if cwd is None else str(cwd),
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        child = Child(name=name, argv=list(argv), log_path=log_path, proc=proc, critical=critical)
        with self._lock:
            self.children.append(child)
            self._write_index()
        return child

    def _write_index(self) -> None:
        """``<log_dir>/children.json``: name -> pid, for operators (and the kill tests)."""
        index = {c.name: c.pid for c in self.children}
        tmp = self.log_dir / "children.json.tmp"
        tmp.write_text(json.dumps(index, sort_keys=True) + "\n")
        tmp.replace(self.log_dir / "children.json")

    def get(self, name: str) -> Child | None:
        for c in self.children:
            if c.name == name:
                return c
        return None

    def dead(self) -> list[Child]:
        """Critical children that exited without being asked to."""
        return [c for c in self.children if c.critical and not c.expected_exit and not c.alive()]

    def first_death(self, grace_s: float = 0.0) -> ChildDied | None:
        """The first critical child that died unasked, as its one-line `ChildDied`, else None.

        Waits up to ``grace_s`` for one: a request to a killed server fails (connection
        reset) a moment before its exit can be seen, and the exit is the cause to tell."""
        deadline = time.monotonic() + grace_s
        while True:
            for c in self.dead():
                return ChildDied(c.name, c.proc.returncode, c.log_path)
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)

    def check(self) -> None:
        """Raise `ChildDied` for the first critical child that is gone."""
        died = self.first_death()
        if died is not None:
            raise died

    def start_servers(
        self,
        servers: Sequence[tuple[str, Sequence[str], Mapping[str, str], int]],
        health_timeout_s: float,
        startup_timeout_s: float,
        after_spawn: Callable[[], None] | None = None,
    ) -> list[str]:
        """Start every ``(name, argv, env, port)`` HTTP server, then wait until each answers
        ``/health`` on loopback (they start in parallel); returns their loopback URLs.
        ``after_spawn`` runs once every process exists, before the wait (work to overlap
        with their start-up)."""
        from runtime.node.health import healthy

        for name, argv, env, _ in servers:
            self.start(name, argv, env=env)
        if after_spawn is not None:
            after_spawn()
        urls = []
        for name, _, _, port in servers:
            url = f"http://127.0.0.1:{port}"
            self.wait_ready(name, lambda url=url: healthy(url, health_timeout_s), startup_timeout_s)
            urls.append(url)
        return urls

    def wait_ready(
        self,
        name: str,
        probe: Callable[[], bool],
        timeout_s: float,
        interval_s: float = 0.25,
    ) -> None:
        """Poll ``probe`` until it is true; fail fast if the child dies, or on timeout."""
        child = self.get(name)
        deadline = time.monotonic() + timeout_s
        while True:
            if child is not None and not child.alive():
                raise ChildDied(name, child.proc.returncode, child.log_path)
            if self.watch is not None:
                self.watch()
            try:
                if probe():
                    return
            except Exception:  # not up yet
                pass
            if time.monotonic() > deadline:
                where = (
                    f"; last said: {cause_from_log(child.log_path)}; full log: "
                    f"{shown_path(child.log_path)}"
                    if child is not None
                    else ""
                )
                raise TimeoutError(f"{name} was not ready after {timeout_s:.0f}s{where}")
            time.sleep(interval_s)

    def stop(self, name: str, sig: int = signal.SIGTERM) -> None:
        """Stop one child on purpose (e.g. replacing an engine)."""
        c = self.get(name)
        if c is not None:
            c.expected_exit = True
            _signal_group(c.proc, sig)

    def shutdown(self) -> None:
        """Terminate every child (its whole process group); SIGKILL after the grace period."""
        with self._lock:
            children = list(self.children)
        for c in children:
            c.expected_exit = True
            if c.alive():
                _signal_group(c.proc, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        for c in children:
            remaining = max(0.0, deadline - time.monotonic())
            with contextlib.suppress(subprocess.TimeoutExpired):
                c.proc.wait(timeout=remaining)
            _signal_group(c.proc, signal.SIGKILL)  # also reaps stragglers in the group
            try:
                c.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                print(f"rlc: could not reap {c.name} (pid {c.pid})", file=sys.stderr)


def _resolve_prctl() -> Callable[..., int] | None:
    """libc's ``prctl``, looked up here in the parent: a child between fork and exec must
    not load a library (another thread of the parent, such as the trainer compiling beside
    the engines, may hold the loader's lock at the fork, and the child would wait forever)."""
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6", use_errno=True).prctl  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


_PRCTL = _resolve_prctl()


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the runtime dies, even by SIGKILL (Linux)."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


class StopRequested(Exception):
    """Raised in the main thread by the SIGINT/SIGTERM handler (a graceful stop)."""


def install_stop_handlers() -> Callable[[], None]:
    """First SIGINT/SIGTERM -> `StopRequested` (save and stop); a second one -> exit at once.

    Returns a function that restores the previous handlers.
    """
    count = {"n": 0}

    def handler(signum: int, frame: object) -> None:
        count["n"] += 1
        if count["n"] > 1:
            raise SystemExit(130)
        raise StopRequested(signal.Signals(signum).name)

    prev_int = signal.signal(signal.SIGINT, handler)
    prev_term = signal.signal(signal.SIGTERM, handler)

    def restore() -> None:
        signal.signal(signal.SIGINT, prev_int)
        signal.signal(signal.SIGTERM, prev_term)

    return restore
