"""Splitting a global batch over data-parallel ranks: whole groups, balanced token counts.

A GRPO group's samples share a prompt (and its advantage baseline), so they stay on one
rank; groups go largest-first to the rank with the fewest tokens so far (LPT scheduling).
The split is deterministic, so every rank computes the same assignment from the same list.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .types import Sample


def _group_key(s: Sample, i: int) -> Any:
    return ("g", s.group_id) if s.group_id is not None else ("s", i)


def split_indices(samples: Sequence[Sample], world: int) -> list[list[int]]:
    """Sample indices per rank (each in the original order)."""
    if world <= 1:
        return [list(range(len(samples)))]
    groups: dict[Any, list[int]] = {}
    for i, s in enumerate(samples):
        groups.setdefault(_group_key(s, i), []).append(i)
    ordered = sorted(
        groups.values(), key=lambda idx: (-sum(samples[i].num_tokens for i in idx), idx[0])
    )
    load = [0] * world
    out: list[list[int]] = [[] for _ in range(world)]
    for idx in ordered:
        r = min(range(world), key=lambda k: (load[k], len(out[k]), k))
        out[r].extend(idx)
        load[r] += sum(samples[i].num_tokens for i in idx)
    return [sorted(o) for o in out]
