"""Supervision of server subprocesses (embedded engines, SGLang servers, the router).

A server is started in its own process group with stdout/stderr going to a log file; we
wait for an HTTP health URL with a deadline (failing fast if the process dies), can ask
whether it is still alive, and stop it with SIGTERM, then SIGKILL after a grace period.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runtime import control_http
from runtime.node.failure import cause_from_log, describe_exit, shown_path


class ServerStartError(RuntimeError):
    """A server process died or did not become healthy in time (cause and log path)."""


def free_port(host: str = "127.0.0.1") -> int:
    """An unused TCP port on ``host`` (racy by nature; fine for loopback tests)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def log_tail(path: Path | None, lines: int = 30) -> str:
    if path is None or not path.exists():
        return ""
    text = path.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:])


@dataclass
class ServerProcess:
    """One supervised server: argv, health URL, log file and the live ``Popen``."""

    name: str
    argv: list[str]
    health_url: str
    log_path: Path
    env: dict[str, str] | None = None
    cwd: str | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _log_file: object | None = field(default=None, repr=False)

    def start(self) -> ServerProcess:
        if self.proc is not None:
            raise RuntimeError(f"{self.name} already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._log_file = log
        env = dict(os.environ)
        if self.env:
            env.update(self.env)
        self.proc = subprocess.Popen(
            self.argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=self.cwd,
            start_new_session=True,
        )
        return self

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def healthy(self, timeout: float = 2.0) -> bool:
        return control_http.answers_ok(self.health_url, timeout)

    def wait_healthy(self, timeout: float, interval: float = 0.25) -> None:
        """Poll the health URL until 200; raise ``ServerStartError`` on death or timeout."""
        deadline = time.monotonic() + timeout
        while True:
            if not self.alive():
                raise ServerStartError(describe_exit(self.name, self.returncode(), self.log_path))
            if self.healthy(timeout=min(2.0, max(0.1, deadline - time.monotonic()))):
                return
            if time.monotonic() >= deadline:
                raise ServerStartError(
                    f"{self.name} not healthy at {self.health_url} after {timeout:.0f}s; "
                    f"last said: {cause_from_log(self.log_path)}; "
                    f"full log: {shown_path(self.log_path)}"
                )
            time.sleep(interval)

    def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM the process group, SIGKILL after ``grace`` seconds; return the exit code."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait(timeout=10)
        # reap any stragglers left in the group
        _signal_group(proc, signal.SIGKILL)
        if self._log_file is not None:
            self._log_file.close()  # type: ignore[attr-defined]
            self._log_file = None
        return proc.returncode

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def start_server(
    name: str,
    argv: Sequence[str],
    health_url: str,
    log_path: Path,
    *,
    timeout: float,
    env: dict[str, str] | None = None,
) -> ServerProcess:
    """Start and wait until healthy; on failure the process is stopped before raising."""
    server = ServerProcess(name=name, argv=list(argv), health_url=health_url, log_path=log_path)
    server.env = env
    server.start()
    try:
        server.wait_healthy(timeout)
    except BaseException:
        server.stop(grace=2.0)
        raise
    return server
