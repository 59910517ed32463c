"""Where one thread's host time goes inside one function, by sampling its Python stack.

The engine's admission runs on its scheduler thread, which starts before any profiler
would, and ``torch.profiler`` does not record a thread started before it. The question
is host time anyway: which line the host sits on (a Python loop, a synchronous copy, an
allocation). A daemon thread reads ``sys._current_frames()`` every ``interval_s`` and,
while the target thread is inside a function named ``within``, counts the innermost
frame of our own code (``runtime/``) and the innermost frame overall (often torch's).
A C call (a kernel launch, a copy that waits for the device) shows as the line that
made it.
"""

from __future__ import annotations

import collections
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OWN = str(ROOT / "runtime")


def _where(frame: FrameType) -> str:
    code = frame.f_code
    path = code.co_filename
    for marker in ("/runtime/", "/torch/", "/olmo_core/"):
        i = path.rfind(marker)
        if i >= 0:
            path = path[i + 1 :]
            break
    else:
        path = Path(path).name
    return f"{path}:{code.co_name}:{frame.f_lineno}"


class StackSampler:
    """Samples ``thread_id``'s stack while it runs inside ``within``; ``stop()`` reports."""

    def __init__(self, thread_id: int, within: str, interval_s: float = 0.002) -> None:
        self.thread_id, self.within, self.interval_s = thread_id, within, interval_s
        self.own: collections.Counter[str] = collections.Counter()
        self.leaf: collections.Counter[str] = collections.Counter()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stack-sampler", daemon=True)

    def start(self) -> StackSampler:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            frame = sys._current_frames().get(self.thread_id)
            if frame is not None:
                self._take(frame)

    def _take(self, frame: FrameType) -> None:
        leaf = frame
        own = None
        inside = False
        f: FrameType | None = frame
        while f is not None:
            if own is None and f.f_code.co_filename.startswith(OWN):
                own = f
            if f.f_code.co_name == self.within:
                inside = True
                break
            f = f.f_back
        if not inside:
            return
        self.samples += 1
        self.leaf[_where(leaf)] += 1
        if own is not None:
            self.own[_where(own)] += 1

    def stop(self, top: int = 12) -> dict[str, Any]:
        """Stop sampling; about how many seconds were spent at each frame (count x interval)."""
        self._stop.set()
        self._thread.join(timeout=1.0)
        dt = self.interval_s

        def table(c: collections.Counter[str]) -> list[list[Any]]:
            return [[k, round(n * dt, 4)] for k, n in c.most_common(top)]

        return {
            "within": self.within,
            "interval_s": dt,
            "sampled_s": round(self.samples * dt, 4),
            "own_frames_s": table(self.own),
            "leaf_frames_s": table(self.leaf),
        }
