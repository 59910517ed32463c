"""Per-collection metrics: one JSON object per line, plus a live progress bar.

The jsonl file is the run's record (the report, the resume tests and `rlc status` read
it); lines are flushed and fsynced as written so a killed run loses at most the line in
flight. On resume, lines for collections at or after the restored step are dropped first,
so the file always describes exactly one history.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


def json_safe(value: Any) -> Any:
    """``value`` as plain JSON: non-finite floats become null, tensor scalars numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # torch / numpy scalars
        return json_safe(value.item())
    return value


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """All complete records of a metrics file (a torn last line is ignored)."""
    p = Path(path)
    if not p.exists():
        return []
    out = []
    for line in p.read_text().splitlines():
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


class MetricsWriter:
    """Append-only jsonl writer with resume truncation.

    ``key`` names the step field records are ordered by: ``collection`` for the run's
    metrics, ``update`` for the evaluation log (``eval/metrics.jsonl``).
    """

    def __init__(self, path: str | Path, key: str = "collection") -> None:
        self.path = Path(path)
        self.key = key
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def truncate_from(self, collection: int, saved: dict[str, Any] | None = None) -> None:
        """Keep only records of steps before ``collection`` (on resume or fresh start).
        ``saved``: the record of step ``collection - 1`` kept in the checkpoint, written
        where the file lacks it (the run was killed between the save and the line)."""
        keep = [r for r in read_metrics(self.path) if int(r.get(self.key, -1)) < collection]
        last = collection - 1
        if saved is not None and int(saved.get(self.key, -1)) == last:
            keep += [] if any(int(r.get(self.key, -1)) == last for r in keep) else [saved]
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        with open(tmp, "w") as f:
            for r in keep:
                f.write(json.dumps(json_safe(r), sort_keys=True) + "\n")
        tmp.replace(self.path)

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(json_safe(record), sort_keys=True)
        with open(self.path, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())


def plain_every(total: int) -> int:
    """How often a run without a terminal prints a progress line: about 20 lines a run."""
    return max(1, total // 20)


def _clock(seconds: float) -> str:
    s = int(max(0.0, seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class ProgressView:
    """A rich progress bar over collections: reward, tokens/s, ETA. Without a terminal
    (``every`` > 0) a plain line every ``every`` collections instead, so a log shows the
    run advancing."""

    def __init__(self, total: int, start: int = 0, enabled: bool = True, every: int = 0) -> None:
        self.enabled = enabled
        self.every = 0 if enabled else every
        self.total = total
        self.start = start
        self.console = Console(stderr=True)
        self._progress = Progress(
            TextColumn("[bold]collection {task.completed}/{task.total}"),
            BarColumn(),
            TextColumn("reward {task.fields[reward]}"),
            TextColumn("{task.fields[tps]} tok/s"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=self.console,
            disable=not enabled,
            transient=False,
        )
        self._task = self._progress.add_task(
            "run", total=total, completed=start, reward="-", tps="-"
        )
        self.t0 = time.monotonic()

    def __enter__(self) -> ProgressView:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def update(self, collection: int, reward: float, tokens_per_s: float) -> None:
        done = collection + 1
        if self.every and (done % self.every == 0 or done == self.total):
            elapsed = time.monotonic() - self.t0
            rate = (done - self.start) / elapsed if elapsed > 0 else 0.0
            eta = (self.total - done) / rate if rate > 0 else 0.0
            print(
                f"rlc: collection {done}/{self.total}  reward {reward:.3f}  "
                f"{tokens_per_s:,.0f} tok/s  elapsed {_clock(elapsed)}  eta {_clock(eta)}",
                file=sys.stderr,
                flush=True,
            )
        self._progress.update(
            self._task,
            completed=collection + 1,
            reward=f"{reward:.3f}",
            tps=f"{tokens_per_s:,.0f}",
        )

    def log(self, message: str) -> None:
        self._progress.console.print(message)


def fifths(values: Iterable[float]) -> tuple[float, float]:
    """Mean of the first and of the last fifth of a series (at least one value each)."""
    vals = list(values)
    if not vals:
        return float("nan"), float("nan")
    k = max(1, len(vals) // 5)
    return sum(vals[:k]) / k, sum(vals[-k:]) / k
