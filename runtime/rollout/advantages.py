"""Group-relative advantages (GRPO) and the zero-variance filter."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from runtime.rollout.types import Group

STD_EPS = 1e-6


def group_stats(rewards: Sequence[float]) -> tuple[float, float]:
    """Mean and population standard deviation of a group's rewards."""
    if not rewards:
        return 0.0, 0.0
    mean = sum(rewards) / len(rewards)
    var = sum((r - mean) ** 2 for r in rewards) / len(rewards)
    return mean, math.sqrt(var)


def relative_advantages(rewards: Sequence[float], normalize_std: bool = False) -> list[float]:
    """``r - mean(r)``, divided by ``std + eps`` when asked (Dr. GRPO leaves it off)."""
    mean, std = group_stats(rewards)
    adv = [r - mean for r in rewards]
    if normalize_std:
        adv = [a / (std + STD_EPS) for a in adv]
    return adv


def assign_advantages(groups: Iterable[Group], normalize_std: bool = False) -> None:
    """Write each sample's advantage in place."""
    for g in groups:
        for s, a in zip(g.samples, relative_advantages(g.rewards, normalize_std), strict=True):
            s.advantage = a


def is_zero_std(group: Group) -> bool:
    """A group whose samples all scored the same teaches nothing (all advantages are 0)."""
    _, std = group_stats(group.rewards)
    return std <= STD_EPS


def split_zero_std(groups: Iterable[Group]) -> tuple[list[Group], list[Group]]:
    """(informative groups, zero-variance groups), order preserved."""
    keep: list[Group] = []
    drop: list[Group] = []
    for g in groups:
        (drop if is_zero_std(g) else keep).append(g)
    return keep, drop
