"""The trainer built, and its compiles warmed up, on a thread while the engines start.

An engine's start-up (its imports, the model's weights, the KV pool) takes tens of seconds
in its own process; the trainer's build and its warm-up (compiling every row length the run
can meet) take as long again in this one. Neither needs the other: the trainer needs the
engines only to publish and to audit weights, which come after both. So this node's trainer
starts as soon as the engine processes exist, and the main thread waits for engines and
trainer together. The trainer itself is built on zeros while its weights are read on
another thread (a dense model: ``load_model(defer_weights=True)``), and they are copied in
after its warm-up: a builtin's first initialisation (tens of seconds on the CPU) or a large
checkpoint's read then overlaps the compiles instead of preceding them.

Where it does (``beside_engines``): a trainer with a warm-up to run (a CPU trainer has
none; beside the engines, its build alone saved nothing measurable on a CPU, and its
deferred weights would come through a child process; docs/benchmarks.md), one trainer
rank in this process (several ranks keep their collectives on the main thread), and
engines whose KV pool does not depend on what else holds their GPU when they size it. The embedded engine counts only its own memory; SGLang
sizes its pool from the device's free memory, so an SGLang engine on the trainer's GPUs
starts first and the trainer after it, as before. ``RLC_TRAINER_BESIDE_ENGINES=0`` keeps
that order for any run (to measure what the overlap saves); ``=1`` starts a trainer
without a warm-up beside the engines too (to test that path on a CPU).

The thread first waits for the preload (imports and the architecture check), so the two
never import at once; the main thread touches the trainer only through ``built`` and
``warmed``, so no trainer operation runs on two threads.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")

DISABLE_ENV = "RLC_TRAINER_BESIDE_ENGINES"


def beside_engines(
    *,
    trainer_world: int,
    trainer_on_gpus: bool,
    warms_up: bool,
    colocated: bool,
    pool_from_own_memory: bool,
    env: dict[str, str] | None = None,
) -> bool:
    """Does this node's trainer start while its engines start (see the module docstring)?"""
    setting = (os.environ if env is None else env).get(DISABLE_ENV)
    if setting == "0" or trainer_world != 1:
        return False
    if not warms_up and setting != "1":
        return False
    return not trainer_on_gpus or not colocated or pool_from_own_memory


class TrainerStart(Generic[T]):
    """``wait_first()``, then ``build()``, then ``warm_up(trainer)`` (None: no warm-up),
    then ``finish(trainer)`` (the weights it was built without), on a daemon thread from
    ``start``. ``built`` and ``warmed`` wait and re-raise what failed
    in the build, or in either; ``check`` raises it without waiting (for loops that wait on
    something else)."""

    def __init__(
        self,
        build: Callable[[], T],
        warm_up: Callable[[T], int] | None,
        *,
        finish: Callable[[T], None] | None = None,
        wait_first: Callable[[], None] | None = None,
    ) -> None:
        self._build, self._warm_up, self._wait_first = build, warm_up, wait_first
        self._finish = finish
        self._trainer: T | None = None
        self._error: BaseException | None = None
        self._built = threading.Event()
        self._done = threading.Event()
        self._taken = False
        self.build_s: float | None = None
        self.warm_up_s: float | None = None
        self.finish_s: float | None = None
        self.rows = 0
        self._thread = threading.Thread(target=self._run, name="rlc-trainer-start", daemon=True)

    def start(self) -> None:
        if self._thread.ident is None:
            self._thread.start()

    def _run(self) -> None:
        try:
            if self._wait_first is not None:
                self._wait_first()
            t0 = time.monotonic()
            trainer = self._build()
            self.build_s = time.monotonic() - t0
            self._trainer = trainer
            self._built.set()
            if self._warm_up is not None:
                t0 = time.monotonic()
                self.rows = int(self._warm_up(trainer))
                self.warm_up_s = time.monotonic() - t0
            if self._finish is not None:
                t0 = time.monotonic()
                self._finish(trainer)
                self.finish_s = time.monotonic() - t0
        except BaseException as exc:  # re-raised on the main thread
            self._error = exc
        finally:
            self._built.set()
            self._done.set()

    def check(self) -> None:
        """Raise the thread's failure now, if it has failed."""
        if self._error is not None:
            raise self._error

    def built(self) -> T:
        """The trainer, once built (the caller owns it from here: it closes it). Its
        values may still be zeros and a warm-up may be running: only ``warmed`` makes it
        usable."""
        self.start()
        self._built.wait()
        if self._trainer is None:  # the build failed (a warm-up failure is warmed()'s)
            self.check()
        assert self._trainer is not None
        self._taken = True
        return self._trainer

    def warmed(self) -> int:
        """Wait for the warm-up and ``finish``; the rows the warm-up ran (0 without one).
        Only from here may the trainer be used."""
        self.start()
        self._done.wait()
        self.check()
        return self.rows

    def close(self, close: Callable[[T], Any]) -> None:
        """On a run that ends before the trainer was taken: ``close`` a trainer already
        built (a thread still building dies with the process: it is a daemon)."""
        if not self._taken and self._trainer is not None:
            self._taken = True
            close(self._trainer)

    def phases(self) -> list[dict[str, Any]]:
        """The trainer's own start-up, beside the engines: build, warm-up."""
        out = []
        if self.build_s is not None:
            out.append({"name": "build", "seconds": round(self.build_s, 3)})
        if self.warm_up_s is not None:
            out.append({"name": f"warm-up ({self.rows} rows)", "seconds": round(self.warm_up_s, 3)})
        if self.finish_s is not None:  # what was left of reading the weights, and the copy
            out.append({"name": "weights", "seconds": round(self.finish_s, 3)})
        return out
