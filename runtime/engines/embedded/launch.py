"""Start stand-alone embedded engine processes (argv + supervision) for tests and tools.

A run never uses this: its engines start with the manifest's command lines
(``runtime.node.launch_argv``). The spellings are the ones the compiler emits."""

from __future__ import annotations

import sys
from pathlib import Path

from ..process import ServerProcess, start_server


def embedded_argv(
    model: str,
    *,
    port: int,
    host: str = "127.0.0.1",
    device: str = "cpu",
    max_running_requests: int | None = None,
    max_total_tokens: int | None = None,
    context_length: int | None = None,
    seed: int | None = None,
    threads: int | None = None,
    extra: list[str] | None = None,
    python: str | None = None,
) -> list[str]:
    """``python -m runtime.engines.embedded ...`` with only the flags that are set."""
    argv = [python or sys.executable, "-m", "runtime.engines.embedded", "--model-path", model]
    argv += ["--host", host, "--port", str(port), "--device", device]
    for flag, value in (
        ("--max-running-requests", max_running_requests),
        ("--max-total-tokens", max_total_tokens),
        ("--context-length", context_length),
        ("--random-seed", seed),
        ("--threads", threads),
    ):
        if value is not None:
            argv += [flag, str(value)]
    return argv + list(extra or [])


def start_embedded(
    model: str,
    *,
    port: int,
    log_path: Path,
    host: str = "127.0.0.1",
    timeout: float = 120.0,
    name: str | None = None,
    **kwargs: object,
) -> ServerProcess:
    """Start one engine and wait for ``/health``; the caller must ``stop()`` it."""
    argv = embedded_argv(model, port=port, host=host, **kwargs)  # type: ignore[arg-type]
    return start_server(
        name or f"engine:{port}",
        argv,
        f"http://{host}:{port}/health",
        log_path,
        timeout=timeout,
    )
