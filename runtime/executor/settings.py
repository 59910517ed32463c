"""The code executor's settings (``config.rewards.code``): one typed object.

`runtime.config.from_manifest` builds it once from the manifest; the ``code`` verifier
(`runtime.rewards.code.CodeVerifier`) sends its limits and network flag with every request
and keeps ``concurrency`` requests in flight, and the executor service takes the rest: the
local one the verifier starts (`runtime.executor.client.LocalExecutor`) gets the sandbox
mode, ``network`` and ``allow_unsandboxed`` on its command line, and the service's limits
for a request that names none (`runtime.executor.sandbox.Limits`) are these defaults. The
defaults are the spec's (``[rewards.code]``); no other module keeps its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

ISOLATIONS = ("auto", "namespaces", "userns", "none")


@dataclass(frozen=True)
class ExecutorSettings:
    endpoint: str | None = None  # an external executor's URL; None: start the local one
    time_limit_s: float = 10.0  # wall-clock and CPU seconds per test run
    memory_limit_mb: int = 1024
    max_processes: int = 16
    network: bool = False  # programs may use the network (the local executor allows it)
    allow_unsandboxed: bool = False  # the local executor may fall back to rlimits only
    concurrency: int = 8  # requests in flight
    # Not spec fields; for tools and tests that start a local executor themselves.
    isolation: str = "auto"  # the local executor's sandbox mode (ISOLATIONS)
    workers: int = 2  # the local executor's concurrent sandboxed processes
    site: bool = False  # programs may import the interpreter's site-packages

    def __post_init__(self) -> None:
        if self.isolation not in ISOLATIONS:
            raise ValueError(f"isolation must be one of {ISOLATIONS}, got {self.isolation!r}")
        if self.concurrency < 1 or self.workers < 1:
            raise ValueError("concurrency and workers must be at least 1")

    @classmethod
    def from_config(cls, code: Mapping[str, Any]) -> ExecutorSettings:
        """From a ``rewards.code`` mapping (``executor_url`` is accepted for ``endpoint``); a
        missing or null field keeps the default, which is the spec's."""
        raw = dict(code)
        if raw.get("endpoint") is None and raw.get("executor_url"):
            raw["endpoint"] = raw["executor_url"]
        kw: dict[str, Any] = {}
        for f in fields(cls):
            value = raw.get(f.name)
            if value is None:
                continue
            default = f.default
            kw[f.name] = value if default is None else type(default)(value)
        return cls(**kw)

    def limits(self) -> dict[str, Any]:
        """The per-run limits of a ``POST /run`` request (`runtime.executor.protocol`)."""
        return {
            "wall_s": float(self.time_limit_s),
            "cpu_s": float(self.time_limit_s),
            "memory_mb": int(self.memory_limit_mb),
            "max_processes": int(self.max_processes),
        }

    def service_args(self) -> list[str]:
        """The local service's options (``python -m runtime.executor``) these settings set."""
        argv = ["--workers", str(self.workers), "--isolation", self.isolation]
        if self.site:
            argv.append("--site")
        if self.allow_unsandboxed:
            argv.append("--allow-unsandboxed")
        if self.network:
            argv.append("--allow-network")
        return argv
