"""A deterministic, resumable sampler over the prompt pool.

Each pool (one ``[data] tasks`` entry) has a cursor (epoch, index) into a permutation of
its prompts seeded by (seed, pool, epoch); pools are mixed by weight with a deterministic
deficit rule (take from the pool whose ``(taken + 1) / weight`` is smallest), so the
whole sequence is a pure function of (prompt ids, weights, seed). `state()` captures the
cursors; `restore()` continues exactly where the saved run stopped: nothing lost, nothing
repeated.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator, Sequence
from typing import Any

from runtime.data.records import Prompt

STATE_VERSION = 1


class SamplerStateError(ValueError):
    """A saved state that does not belong to this pool or seed."""


class PromptSampler:
    def __init__(self, prompts: Sequence[Prompt], seed: int, shuffle: bool = True) -> None:
        if not prompts:
            raise ValueError("the prompt pool is empty")
        self.seed = int(seed)
        self.shuffle = bool(shuffle)
        self._pools: dict[str, list[Prompt]] = {}
        self._weights: dict[str, float] = {}
        for p in prompts:
            pool = str(p.metadata.get("pool", p.task))
            self._pools.setdefault(pool, []).append(p)
            self._weights[pool] = float(p.metadata.get("weight", 1.0))
        self._names = list(self._pools)
        self._taken = dict.fromkeys(self._names, 0)
        self._orders: dict[tuple[str, int], list[int]] = {}
        self.drawn = 0
        h = hashlib.sha256()
        for name in self._names:
            h.update(f"{name}\0{self._weights[name]}\0".encode())
            for p in self._pools[name]:
                h.update(p.id.encode() + b"\0")
        self.pool_digest = "sha256:" + h.hexdigest()

    def __len__(self) -> int:
        return sum(len(v) for v in self._pools.values())

    def _order(self, pool: str, epoch: int) -> list[int]:
        key = (pool, epoch)
        order = self._orders.get(key)
        if order is None:
            order = list(range(len(self._pools[pool])))
            if self.shuffle:
                random.Random(f"{self.seed}:{pool}:{epoch}").shuffle(order)
            if len(self._orders) > 64:
                self._orders.clear()
            self._orders[key] = order
        return order

    def _next_pool(self) -> str:
        return min(
            self._names,
            key=lambda n: ((self._taken[n] + 1) / self._weights[n], self._names.index(n)),
        )

    def cursor(self, pool: str | None = None) -> tuple[int, int]:
        """(epoch, index) of a pool (default: the only/first pool)."""
        name = pool or self._names[0]
        size = len(self._pools[name])
        return divmod(self._taken[name], size)

    def next(self) -> Prompt:
        name = self._next_pool()
        epoch, index = self.cursor(name)
        prompt = self._pools[name][self._order(name, epoch)[index]]
        self._taken[name] += 1
        self.drawn += 1
        return prompt

    def next_batch(self, n: int) -> list[Prompt]:
        return [self.next() for _ in range(n)]

    def __iter__(self) -> Iterator[Prompt]:
        while True:
            yield self.next()

    def state(self) -> dict[str, Any]:
        """JSON-serialisable cursor state (goes into checkpoints)."""
        epoch, index = self.cursor()
        return {
            "version": STATE_VERSION,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "pool_digest": self.pool_digest,
            "drawn": self.drawn,
            "epoch": epoch,
            "index": index,
            "pools": {
                n: dict(zip(("epoch", "index"), self.cursor(n), strict=True)) for n in self._names
            },
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from `state`; refuses a state from another pool, seed or order."""
        if state.get("version") != STATE_VERSION:
            raise SamplerStateError(f"unsupported sampler state version {state.get('version')!r}")
        for key, mine in (
            ("seed", self.seed),
            ("shuffle", self.shuffle),
            ("pool_digest", self.pool_digest),
        ):
            if state.get(key) != mine:
                raise SamplerStateError(
                    f"sampler state does not match this run: {key} is {state.get(key)!r}, expected {mine!r}"
                )
        pools = state.get("pools") or {}
        if set(pools) != set(self._names):
            raise SamplerStateError(f"sampler state pools {sorted(pools)} != {sorted(self._names)}")
        for name, cur in pools.items():
            size = len(self._pools[name])
            epoch, index = int(cur["epoch"]), int(cur["index"])
            if epoch < 0 or not 0 <= index < size:
                raise SamplerStateError(f"sampler cursor out of range for pool {name}: {cur}")
            self._taken[name] = epoch * size + index
        self.drawn = int(state.get("drawn", sum(self._taken.values())))
