"""Reach an executor service: start a local one (``--port 0``) or talk to a given URL."""

from __future__ import annotations

import atexit
import contextlib
import os
import selectors
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from runtime.executor.settings import ExecutorSettings
from runtime.node.failure import cause_from_text, exit_status

_READY_PREFIX = "rlc-executor listening on "


class ExecutorStartError(RuntimeError):
    """The local executor did not come up."""


class LocalExecutor:
    """A ``python -m runtime.executor`` subprocess on loopback, stopped by `close`."""

    def __init__(
        self,
        settings: ExecutorSettings | None = None,
        *,
        startup_timeout_s: float = 60.0,
        python: str | None = None,
        env: dict[str, str] | None = None,
        service_python: str | None = None,
        wrapper: Sequence[str] = (),
    ) -> None:
        """The service's options come from ``settings`` (workers, sandbox mode, site,
        allow_unsandboxed, network). ``wrapper`` prefixes its command line (e.g. to run it as
        another user with ``setpriv``); ``service_python`` runs the service (default: ours)."""
        self.settings = settings = settings or ExecutorSettings()
        repo_root = str(Path(__file__).resolve().parents[2])
        child_env = dict(os.environ if env is None else env)
        child_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (repo_root, child_env.get("PYTHONPATH", "")) if p
        )
        argv = [*wrapper, service_python or sys.executable, "-m", "runtime.executor"]
        argv += ["--host", "127.0.0.1", "--port", "0", *settings.service_args()]
        if python:
            argv += ["--python", python]
        # stderr goes to a file: an unread pipe would eventually block the server.
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (lives with the process)
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=child_env,
            text=True,
        )
        self.url = self._wait_ready(startup_timeout_s)

    def _wait_ready(self, timeout_s: float) -> str:
        assert self.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                    continue
                line = self.proc.stdout.readline()
                if not line:
                    break
                if line.startswith(_READY_PREFIX):
                    return line[len(_READY_PREFIX) :].strip()
        finally:
            sel.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=1)  # a child that closed its stdout is exiting
        rc = self.proc.poll()
        self._stop()
        err = ""
        with contextlib.suppress(Exception):
            self._stderr.seek(0)
            err = self._stderr.read()[-2000:]
        self.close()
        status = f"not ready after {timeout_s:g}s" if rc is None else exit_status(rc)
        raise ExecutorStartError(f"code executor did not start ({status}): {cause_from_text(err)}")

    def close(self) -> None:
        self._stop()
        for stream in (self.proc.stdout, self._stderr):
            if stream is not None:
                with contextlib.suppress(Exception):
                    stream.close()

    def _stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ExecutorEndpoint:
    """The URL of a configured executor, or of a local one started on first use (once,
    even from several threads) and stopped by `close` or at interpreter exit."""

    def __init__(self, settings: ExecutorSettings) -> None:
        self.settings = settings
        self._url = settings.endpoint
        self._local: LocalExecutor | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        with self._lock:
            if self._url is None:
                self._local = LocalExecutor(self.settings)
                atexit.register(self._local.close)
                self._url = self._local.url
            return self._url

    @property
    def started_locally(self) -> bool:
        """Whether a local executor is running for this endpoint."""
        return self._local is not None

    def close(self) -> None:
        """Stops a local executor; a later `url` starts a fresh one."""
        with self._lock:
            if self._local is not None:
                self._local.close()
                self._local = None
                self._url = self.settings.endpoint


def run_request(
    client: httpx.Client, url: str, payload: dict[str, Any], timeout_s: float
) -> dict[str, Any]:
    """POST one ``/run``; raises httpx errors and ValueError on a non-JSON answer."""
    resp = client.post(url.rstrip("/") + "/run", json=payload, timeout=timeout_s)
    if resp.status_code == 400:
        raise ValueError(resp.json().get("error", resp.text))
    resp.raise_for_status()
    data = resp.json()
    if not isinstance(data, dict) or "results" not in data:
        raise ValueError("executor answered without 'results'")
    return data
