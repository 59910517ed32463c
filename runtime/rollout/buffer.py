"""Bounded buffer of scored groups for asynchronous GRPO.

The producer (generation) runs ahead of the trainer by at most ``capacity`` groups; each
group carries the policy version that produced it, and a group more than
``max_policy_lag`` versions behind the trainer is stale: dropped, or handed back to be
regenerated (handler ``retry``). Truncated importance sampling (TIS) weights correct
the remaining, bounded, off-policy drift.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from runtime.rollout.types import Group


@dataclass
class BufferStats:
    produced: int = 0
    consumed: int = 0
    stale_dropped: int = 0
    stale_retried: int = 0


class BufferClosed(RuntimeError):
    """The buffer was closed (shutdown or producer failure) while waiting."""


class GroupBuffer:
    """Thread-safe bounded FIFO of `Group`s with staleness control."""

    def __init__(
        self,
        capacity: int,
        max_policy_lag: int,
        handler: str = "drop",
        on_retry: Callable[[Group], None] | None = None,
        on_drop: Callable[[Group], None] | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError("buffer capacity must be >= 1")
        if handler not in ("drop", "retry"):
            raise ValueError(f"unused_sample_handler must be drop or retry, got {handler!r}")
        self.capacity = capacity
        self.max_policy_lag = max_policy_lag
        self.handler = handler
        self.on_retry = on_retry
        self.on_drop = on_drop
        self.stats = BufferStats()
        self._items: deque[Group] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._error: BaseException | None = None

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    def put(self, group: Group, timeout: float | None = None) -> None:
        """Block while full; raise `BufferClosed` after `close`."""
        with self._cond:
            ok = self._cond.wait_for(
                lambda: self._closed or len(self._items) < self.capacity, timeout
            )
            if self._closed:
                raise BufferClosed("buffer closed")
            if not ok:
                raise TimeoutError("buffer stayed full")
            self._items.append(group)
            self.stats.produced += 1
            self._cond.notify_all()

    def close(self, error: BaseException | None = None) -> None:
        """Wake every waiter; a producer error is re-raised to the consumer."""
        with self._cond:
            self._closed = True
            if error is not None and self._error is None:
                self._error = error
            self._cond.notify_all()

    def is_stale(self, group: Group, current_version: int) -> bool:
        return current_version - group.policy_version > self.max_policy_lag

    def take(self, n: int, current_version: int, timeout: float | None = None) -> list[Group]:
        """Take ``n`` fresh groups (oldest first), discarding stale ones per the handler."""
        out: list[Group] = []
        retry: list[Group] = []
        dropped: list[Group] = []
        with self._cond:
            while len(out) < n:
                ok = self._cond.wait_for(lambda: self._closed or bool(self._items), timeout)
                if self._error is not None:
                    raise BufferClosed(f"producer failed: {self._error}") from self._error
                if not self._items:
                    if self._closed:
                        raise BufferClosed("buffer closed")
                    if not ok:
                        raise TimeoutError(f"waited {timeout}s for rollout groups")
                    continue
                g = self._items.popleft()
                self._cond.notify_all()
                if self.is_stale(g, current_version):
                    if self.handler == "retry":
                        self.stats.stale_retried += 1
                        retry.append(g)
                    else:
                        self.stats.stale_dropped += 1
                        dropped.append(g)
                    continue
                out.append(g)
                self.stats.consumed += 1
        if self.on_retry is not None:
            for g in retry:
                self.on_retry(g)
        if self.on_drop is not None:
            for g in dropped:
                self.on_drop(g)
        return out


def tis_weights(
    trainer_logprobs: Sequence[float], engine_logprobs: Sequence[float], clip: float
) -> list[float]:
    """Per-token truncated importance weights ``min(exp(pi_train - pi_engine), clip)``."""
    out = []
    for t, e in zip(trainer_logprobs, engine_logprobs, strict=True):
        out.append(min(math.exp(max(min(t - e, 50.0), -50.0)), clip))
    return out
