"""Real embedded engine servers on loopback for the tests that put them behind the router."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from runtime.engines.embedded.launch import embedded_argv
from runtime.engines.process import ServerProcess, free_port


def serve_engines(logs: Path, n: int = 2, max_running_requests: int = 4) -> Iterator[list[str]]:
    """Start ``n`` tiny dense engines, yield their base URLs, stop them afterwards."""
    procs: list[ServerProcess] = []
    try:
        for i in range(n):
            port = free_port()
            argv = embedded_argv(
                "engine-test:dense",
                port=port,
                max_running_requests=max_running_requests,
                context_length=128,
                threads=1,
                seed=0,
            )
            procs.append(
                ServerProcess(
                    f"engine{i}", argv, f"http://127.0.0.1:{port}/health", logs / f"e{i}.log"
                ).start()
            )
        for p in procs:
            p.wait_healthy(timeout=120)
        yield [p.health_url.rsplit("/", 1)[0] for p in procs]
    finally:
        for p in procs:
            p.stop(grace=5)
