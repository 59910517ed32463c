"""The Python heap of a long-running process: freeze it after start-up, and time GC pauses.

CPython's cyclic garbage collector walks every tracked object of the oldest generation in a
full collection. After start-up a run's processes hold millions of long-lived objects
(OLMo-core's modules, torch.compile's graphs and guards, captured decode graphs), so a
full collection, triggered by whichever thread allocates next (an engine admitting a
collection, the trainer packing rows), stops every thread for a long pause. Freezing the
heap once start-up is done (``gc.freeze``, as SGLang and vLLM do after their warm-up)
moves everything alive into a permanent generation the collector never walks; objects
freed by reference counting are still freed at once. ``GcPauses`` times the pauses that
remain, so a run can report them beside its phases.
"""

from __future__ import annotations

import atexit
import collections
import gc
import threading
import time
from typing import Any

_lock = threading.Lock()
_pauses: GcPauses | None = None
_unfreeze_at_exit = False


class GcPauses:
    """Process-wide GC pause totals from ``gc.callbacks`` (seconds, counts, longest)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = 0
        self.full_collections = 0  # the oldest generation's: the long pauses
        self.longest_s = 0.0
        self._started: dict[int, float] = {}
        self._recent: collections.deque[tuple[float, float]] = collections.deque(maxlen=4096)
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        ident = threading.get_ident()
        if phase == "start":
            self._started[ident] = time.perf_counter()
            return
        began = self._started.pop(ident, None)
        if began is None:
            return
        now = time.perf_counter()
        pause = now - began
        self._recent.append((now, pause))
        self.seconds += pause
        self.collections += 1
        if info.get("generation") == 2:
            self.full_collections += 1
        self.longest_s = max(self.longest_s, pause)

    def snapshot(self) -> dict[str, float]:
        """The totals so far (``since`` turns two of them into one window's figures)."""
        return {
            "at": time.perf_counter(),
            "gc_pause_s": self.seconds,
            "gc_collections": float(self.collections),
            "gc_full_collections": float(self.full_collections),
            "gc_longest_pause_s": self.longest_s,
        }

    def since(self, before: dict[str, float]) -> dict[str, float]:
        """Pauses after the ``snapshot`` ``before``: seconds, counts, the longest one."""
        now = self.snapshot()
        keys = ("gc_pause_s", "gc_collections", "gc_full_collections")
        out = {k: now[k] - before[k] for k in keys}
        out["gc_longest_pause_s"] = max(
            (p for end, p in list(self._recent) if end >= before["at"]), default=0.0
        )
        return out


def gc_pauses() -> GcPauses:
    """This process's pause clock (installed on first use)."""
    global _pauses
    with _lock:
        if _pauses is None:
            _pauses = GcPauses()
        return _pauses


def freeze_heap() -> int:
    """Collect once, then move every live object out of the collector's reach; returns how
    many objects are frozen. Call it when start-up (loading, compiling, capturing) is done:
    what it allocated lives as long as the process. At exit the objects are handed back, so
    the interpreter's last collection still finalizes them (extension modules that count
    their live objects at exit would otherwise report leaks)."""
    global _unfreeze_at_exit
    gc.collect()
    gc.freeze()
    if not _unfreeze_at_exit:
        atexit.register(gc.unfreeze)
        _unfreeze_at_exit = True
    return gc.get_freeze_count()
