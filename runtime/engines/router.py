"""Run the real ``sglang-router`` (PyPI sglang-router 0.3.2) on loopback in front of engines.

The router answers ``/health`` before it has registered its workers (they are added by a
background job), so ``start_router`` waits until ``GET /workers`` lists every worker as
healthy. Known limitation of the pinned router (checked in tests): it does not forward
``return_routed_experts``, so MoE router replay must talk to the engines directly.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from contract.spec.inference import InferenceSection
from runtime import control_http
from runtime.node.failure import cause_from_log, describe_exit, shown_path

from .process import ServerProcess, ServerStartError

POLICIES = ("cache_aware", "round_robin", "random", "power_of_two", "manual")


@dataclass(frozen=True)
class RouterSettings:
    """The router knobs the compiler resolves (defaults are the router's own)."""

    policy: str = "cache_aware"
    cache_threshold: float = 0.3
    balance_abs_threshold: int = 64
    balance_rel_threshold: float = 1.5
    eviction_interval_secs: int = 60
    max_tree_size: int = 2**26
    request_timeout_secs: int = 1800
    disable_circuit_breaker: bool = True
    disable_health_check: bool = False
    health_check_interval_secs: int = 60
    extra_args: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"router policy {self.policy!r} not in {POLICIES}")

    @classmethod
    def from_contract(cls, inference: InferenceSection) -> RouterSettings:
        """The manifest's ``config.inference`` router fields; the rest keep the router's."""
        return cls(
            policy=inference.router_policy,
            cache_threshold=inference.router_cache_threshold,
            balance_abs_threshold=inference.router_balance_abs_threshold,
            balance_rel_threshold=inference.router_balance_rel_threshold,
        )


def router_argv(
    worker_urls: list[str],
    *,
    host: str = "127.0.0.1",
    port: int,
    settings: RouterSettings | None = None,
    python: str | None = None,
    log_level: str = "warn",
    prometheus_port: int | None = None,
) -> list[str]:
    """``python -m sglang_router.launch_router ...`` for these workers and settings.

    The router always starts a Prometheus exporter (default port 29000) and panics when
    that port is taken, so every router gets its own: ``prometheus_port`` or a free one.
    """
    s = settings or RouterSettings()
    if prometheus_port is None:
        from .process import free_port

        prometheus_port = free_port("127.0.0.1")
    argv = [
        python or sys.executable,
        "-m",
        "sglang_router.launch_router",
        "--host",
        host,
        "--port",
        str(port),
        "--worker-urls",
        *worker_urls,
        "--policy",
        s.policy,
        "--request-timeout-secs",
        str(s.request_timeout_secs),
        "--health-check-interval-secs",
        str(s.health_check_interval_secs),
        "--log-level",
        log_level,
        "--prometheus-host",
        "127.0.0.1",
        "--prometheus-port",
        str(prometheus_port),
    ]
    if s.policy == "cache_aware":
        argv += [
            "--cache-threshold",
            str(s.cache_threshold),
            "--balance-abs-threshold",
            str(s.balance_abs_threshold),
            "--balance-rel-threshold",
            str(s.balance_rel_threshold),
            "--eviction-interval-secs",
            str(s.eviction_interval_secs),
            "--max-tree-size",
            str(s.max_tree_size),
        ]
    if s.disable_circuit_breaker:
        argv.append("--disable-circuit-breaker")
    if s.disable_health_check:
        argv.append("--disable-health-check")
    argv += list(s.extra_args)
    return argv


@dataclass
class Router:
    """A running router: its URL and the supervised process."""

    url: str
    process: ServerProcess
    worker_urls: list[str]

    def workers(self, timeout: float = 5.0) -> list[dict[str, Any]]:
        r = control_http.get(f"{self.url}/workers", timeout=timeout)
        r.raise_for_status()
        return list(r.json().get("workers", []))

    def alive(self) -> bool:
        return self.process.alive()

    def stop(self, grace: float = 5.0) -> int | None:
        return self.process.stop(grace=grace)

    def __enter__(self) -> Router:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _workers_ready(url: str, expected: list[str]) -> bool:
    try:
        r = control_http.get(f"{url}/workers", timeout=2.0)
    except httpx.HTTPError:
        return False
    if r.status_code != 200:
        return False
    healthy = {
        w.get("url", "").rstrip("/") for w in r.json().get("workers", []) if w.get("is_healthy")
    }
    return all(u.rstrip("/") in healthy for u in expected)


def start_router(
    worker_urls: list[str],
    *,
    port: int,
    log_path: Path,
    host: str = "127.0.0.1",
    settings: RouterSettings | None = None,
    timeout: float = 60.0,
    python: str | None = None,
) -> Router:
    """Start the router and wait until it is healthy and routes to every worker."""
    if not worker_urls:
        raise ValueError("the router needs at least one worker URL")
    argv = router_argv(worker_urls, host=host, port=port, settings=settings, python=python)
    url = f"http://{host}:{port}"
    proc = ServerProcess(
        name="sglang-router", argv=argv, health_url=f"{url}/health", log_path=log_path
    )
    proc.start()
    deadline = time.monotonic() + timeout
    try:
        proc.wait_healthy(timeout)
        while not _workers_ready(url, worker_urls):
            if not proc.alive():
                raise ServerStartError(describe_exit("sglang-router", proc.returncode(), log_path))
            if time.monotonic() >= deadline:
                raise ServerStartError(
                    f"sglang-router did not register all workers {worker_urls} within "
                    f"{timeout:.0f}s; last said: {cause_from_log(log_path)}; "
                    f"full log: {shown_path(log_path)}"
                )
            time.sleep(0.25)
    except BaseException:
        proc.stop(grace=2.0)
        raise
    return Router(url=url, process=proc, worker_urls=list(worker_urls))
