"""Learning-rate schedules as multipliers of the peak LR (for ``torch.optim.lr_scheduler.LambdaLR``)."""

from __future__ import annotations

import math
from collections.abc import Callable

SCHEDULES = ("constant", "linear", "cosine")


def lr_multiplier(
    schedule: str, *, warmup_steps: int, total_steps: int, min_ratio: float = 0.0
) -> Callable[[int], float]:
    """Linear warmup to 1.0, then constant / linear decay / cosine decay to ``min_ratio``."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown LR schedule {schedule!r}; choose from {SCHEDULES}")
    warmup = max(int(warmup_steps), 0)
    total = max(int(total_steps), warmup + 1)

    def fn(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if schedule == "constant":
            return 1.0
        progress = min((step - warmup) / max(total - warmup, 1), 1.0)
        if schedule == "linear":
            return min_ratio + (1.0 - min_ratio) * (1.0 - progress)
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return fn
