"""Where a run's start-up goes: named phases from the command to the first collection.

``rlc run`` stamps its own start (``RLC_RUN_T0``, wall-clock seconds) and the moment the
manifest was written (``RLC_RUN_COMPILED``) into the runtime's environment; the runtime
marks each later phase as it ends. The breakdown is printed before the first collection and
kept as ``<output.root>/startup.json`` (``rlc run --bench`` reads it back).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

T0_ENV = "RLC_RUN_T0"
COMPILED_ENV = "RLC_RUN_COMPILED"
FILE = "startup.json"


def process_started_at() -> float | None:
    """Wall-clock seconds at which this process started (Linux ``/proc``; None elsewhere),
    so a child's start-up phases begin with its interpreter and imports, not its first
    line of code."""
    try:
        stat = Path("/proc/self/stat").read_text()
        ticks = int(stat[stat.rindex(")") + 2 :].split()[19])  # field 22: starttime
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def phase_line(phases: list[dict[str, Any]]) -> str:
    """``name 1.2s, name 3.4s`` from ``[{"name", "seconds"}]``."""
    return ", ".join(f"{p['name']} {float(p['seconds']):.1f}s" for p in phases)


class StartupClock:
    """Phases as (name, seconds), each ending at its ``mark``."""

    def __init__(self, t0: float, phases: list[tuple[str, float]] | None = None) -> None:
        self.t0 = t0
        self.phases: list[tuple[str, float]] = list(phases or [])
        self._last = t0 + sum(s for _, s in self.phases)
        self.details: dict[str, Any] = {}

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> StartupClock:
        """From ``rlc run``'s stamps; a runtime started by hand counts from now."""
        env = os.environ if env is None else env
        now = time.time()
        try:
            t0 = float(env[T0_ENV])
        except (KeyError, ValueError):
            return cls(now)
        phases: list[tuple[str, float]] = []
        try:
            compiled = float(env[COMPILED_ENV])
            phases = [("compile", max(compiled - t0, 0.0)), ("runtime import", now - compiled)]
        except (KeyError, ValueError):
            phases = [("compile + runtime import", now - t0)]
        return cls(t0, [(n, max(s, 0.0)) for n, s in phases])

    def mark(self, name: str) -> float:
        """End phase ``name`` now; returns its seconds."""
        now = time.time()
        secs = max(now - self._last, 0.0)
        self.phases.append((name, secs))
        self._last = now
        return secs

    @property
    def total_s(self) -> float:
        return sum(s for _, s in self.phases)

    def line(self) -> str:
        parts = ", ".join(f"{n} {s:.1f}s" for n, s in self.phases)
        return f"start-up {self.total_s:.1f}s to the first collection ({parts})"

    def to_json(self) -> dict[str, Any]:
        return {
            "phases": [{"name": n, "seconds": round(s, 3)} for n, s in self.phases],
            "total_s": round(self.total_s, 3),
            **self.details,
        }

    def write(self, root: Path) -> Path:
        path = Path(root) / FILE
        path.write_text(json.dumps(self.to_json(), indent=1, sort_keys=True) + "\n")
        return path


def read_startup(root: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((Path(root) / FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
