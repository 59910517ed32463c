"""Freezing a process's heap after start-up, and timing the GC pauses that remain.

Each test runs in a fresh interpreter: ``gc.freeze`` is process-wide, and the test runner's
own heap must stay collectable."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_frozen_heap_is_not_walked_by_full_collections() -> None:
    """A million long-lived objects: a full collection walks them all until the heap is
    frozen; after ``freeze_heap`` they sit in the permanent generation, a full collection
    is far shorter, and the pause clock saw both."""
    got = _run(
        """
import gc, json, time
from runtime.heap import freeze_heap, gc_pauses
pauses = gc_pauses()
keep = [[i] for i in range(1_000_000)]  # tracked containers, alive for the process
def full():
    t = time.perf_counter(); gc.collect(); return time.perf_counter() - t
before = min(full() for _ in range(3))
mark = pauses.snapshot()
frozen = freeze_heap()
after = min(full() for _ in range(3))
print(json.dumps({"before": before, "after": after, "frozen": frozen,
                  "since": pauses.since(mark)}))
"""
    )
    assert got["frozen"] >= 1_000_000
    assert got["after"] < got["before"] / 5
    since = got["since"]
    assert since["gc_full_collections"] >= 4  # freeze_heap's own and the three after
    assert since["gc_pause_s"] >= since["gc_longest_pause_s"] > 0


def test_objects_freed_by_reference_count_still_go_after_a_freeze() -> None:
    """Freezing keeps the collector off start-up's objects; it does not keep anything
    alive: an object dropped later is freed at once (its weak reference dies)."""
    got = _run(
        """
import json, weakref
from runtime.heap import freeze_heap
class Box: pass
box = Box()
ref = weakref.ref(box)
freeze_heap()
del box
print(json.dumps({"alive": ref() is not None}))
"""
    )
    assert got == {"alive": False}


def test_frozen_cycles_are_still_finalized_at_exit() -> None:
    """The heap is handed back at exit, so the interpreter's last collection finalizes a
    cycle that start-up left behind (extension modules count leaked objects at exit and
    would print a warning on the run's output otherwise)."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            """
from runtime.heap import freeze_heap
class Node:
    def __del__(self):
        print("finalized", flush=True)
node = Node()
node.self = node
freeze_heap()
del node
print("exiting", flush=True)
""",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["exiting", "finalized"]
