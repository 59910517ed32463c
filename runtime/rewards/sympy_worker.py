"""Sympy in a child process with a deadline per call.

Symbolic comparison of model output can take unbounded time (``10^{10^{10}}``, huge
polynomials). Each comparison is sent to a long-lived child process over a pipe as one
JSON line; when the answer does not come back within the deadline the child is killed
and a fresh one is started for the next call, so a pathological response costs at most
``timeout_s`` and can never hang a run.

Run as ``python -m runtime.rewards.sympy_worker`` (the client does this itself).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


def _limit_memory() -> None:
    """Cap the child's address space so a huge integer fails fast instead of eating RAM."""
    try:
        import resource

        mb = int(os.environ.get("RLC_SYMPY_MEM_MB", "2048"))
        resource.setrlimit(resource.RLIMIT_AS, (mb << 20, mb << 20))
    except (ImportError, ValueError, OSError):
        pass


def _serve() -> None:
    _limit_memory()
    from runtime.rewards.math_sympy import ConversionError, sympy_equal

    sympy_equal("1+2\\sqrt{3}x", "2\\sqrt{3}x+1")  # warm sympy's lazy imports and caches

    out = sys.stdout
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("ping"):
            if req.get("sleep_s"):  # lets the tests exercise the deadline
                time.sleep(float(req["sleep_s"]))
            out.write(json.dumps({"id": req["id"], "result": True}) + "\n")
            out.flush()
            continue
        try:
            res: dict[str, Any] = {"result": sympy_equal(req["a"], req["b"], req["rel_tol"])}
        except ConversionError as exc:
            res = {"result": None, "error": f"conversion: {exc}"}
        except (Exception, MemoryError, RecursionError) as exc:  # "could not decide"
            res = {"result": None, "error": f"{type(exc).__name__}: {exc}"[:300]}
        res["id"] = req["id"]
        out.write(json.dumps(res) + "\n")
        out.flush()


class SympyWorker:
    """Client side: one child process, restarted after a timeout or crash. Thread-safe."""

    def __init__(self, timeout_s: float = 5.0, startup_timeout_s: float = 60.0) -> None:
        self.timeout_s = float(timeout_s)
        self.startup_timeout_s = float(startup_timeout_s)
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._next_id = 0
        self._buf = b""
        self.timeouts = 0
        self.restarts = 0
        self._started = False

    def _start(self) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        env["PYTHONPATH"] = _PACKAGE_ROOT + os.pathsep + env.get("PYTHONPATH", "")
        proc = subprocess.Popen(
            [sys.executable, "-u", "-m", "runtime.rewards.sympy_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        self._buf = b""
        self._proc = proc
        # wait for the child's sympy import, so the first real call gets its full deadline
        got = self._request({"ping": True}, self.startup_timeout_s)
        if got[1] is not None:
            raise RuntimeError(f"sympy worker did not start: {got[1]}")
        return proc

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            proc.kill()
            proc.wait(timeout=5)
        except Exception:  # already gone
            pass
        for stream in (proc.stdin, proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except Exception:
                pass

    def equal(self, a: str, b: str, rel_tol: float = 1e-8) -> tuple[bool | None, str | None]:
        """(result, error): result None means undecided (timeout or unsupported input)."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._kill()
                if self._started:
                    self.restarts += 1
                self._started = True
                self._start()
            return self._request({"a": a, "b": b, "rel_tol": rel_tol}, self.timeout_s)

    def _request(self, payload: dict[str, Any], timeout_s: float) -> tuple[bool | None, str | None]:
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        self._next_id += 1
        rid = self._next_id
        try:
            proc.stdin.write((json.dumps({"id": rid, **payload}) + "\n").encode())
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._kill()
            return None, "sympy worker died"
        deadline = time.monotonic() + timeout_s
        fd = proc.stdout.fileno()
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line, self._buf = self._buf[:nl], self._buf[nl + 1 :]
                res = json.loads(line)
                if res.get("id") != rid:
                    continue  # cannot happen after a kill, but never mix answers up
                return res.get("result"), res.get("error")
            left = deadline - time.monotonic()
            if left <= 0:
                self.timeouts += 1
                self._kill()
                return None, f"sympy timed out after {timeout_s:g}s"
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                self._kill()
                return None, "sympy worker died"
            self._buf += chunk

    def close(self) -> None:
        with self._lock:
            self._kill()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._kill()


if __name__ == "__main__":
    _serve()
