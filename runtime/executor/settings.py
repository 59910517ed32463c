"""The code executor's settings (``config.rewards.code``): one typed object.

The run builds it from the contract's ``rewards.code`` (`from_contract`); the ``code``
verifier (`runtime.rewards.code.CodeVerifier`) sends its limits and network flag with every
request and keeps ``concurrency`` requests in flight, and the executor service takes the
rest: the local one the verifier starts (`runtime.executor.client.LocalExecutor`) gets the
sandbox mode, ``network`` and ``allow_unsandboxed`` on its command line, and the service's
limits for a request that names none (`runtime.executor.sandbox.Limits`) are these
defaults. The spec fields' defaults are read from the contract (`contract.defaults`); no
other module keeps its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from contract.defaults import default_of
from contract.spec.rewards import CodeReward

ISOLATIONS = ("auto", "namespaces", "userns", "none")
# The fields that are ``[rewards.code]`` fields (the rest are the local executor's own).
SPEC_FIELDS = tuple(CodeReward.model_fields)


def _spec(name: str) -> Any:
    return field(default=default_of(CodeReward, name))


@dataclass(frozen=True)
class ExecutorSettings:
    endpoint: str | None = _spec("endpoint")  # an external executor; None: start one here
    time_limit_s: float = _spec("time_limit_s")  # wall-clock and CPU seconds per test run
    memory_limit_mb: int = _spec("memory_limit_mb")
    max_processes: int = _spec("max_processes")
    network: bool = _spec("network")  # programs may use the network
    allow_unsandboxed: bool = _spec("allow_unsandboxed")  # may fall back to rlimits only
    concurrency: int = _spec("concurrency")  # requests in flight
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
    def from_contract(cls, code: CodeReward) -> ExecutorSettings:
        """The run's settings: every spec field from the contract."""
        return cls(**{name: getattr(code, name) for name in SPEC_FIELDS})

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
