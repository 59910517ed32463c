"""GRPO trainer core: loss, packing, distributed data parallel, the Trainer class.

Names load on first use (PEP 562), so ``runtime.trainer.settings`` (the trainer's settings,
plain data) is importable without importing torch."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .distributed import DistInfo, init_distributed, shutdown_distributed
    from .grpo import group_advantages, grpo_loss, kl_penalty
    from .packing import PackedRow, pack_samples, plan_rows
    from .schedule import lr_multiplier
    from .settings import GRPOConfig, TrainerConfig
    from .trainer import Trainer
    from .types import Sample

_WHERE = {
    "DistInfo": "distributed",
    "init_distributed": "distributed",
    "shutdown_distributed": "distributed",
    "GRPOConfig": "settings",
    "group_advantages": "grpo",
    "grpo_loss": "grpo",
    "kl_penalty": "grpo",
    "PackedRow": "packing",
    "pack_samples": "packing",
    "plan_rows": "packing",
    "lr_multiplier": "schedule",
    "Trainer": "trainer",
    "TrainerConfig": "settings",
    "Sample": "types",
}

__all__ = [
    "DistInfo",
    "GRPOConfig",
    "PackedRow",
    "Sample",
    "Trainer",
    "TrainerConfig",
    "group_advantages",
    "grpo_loss",
    "init_distributed",
    "kl_penalty",
    "lr_multiplier",
    "pack_samples",
    "plan_rows",
    "shutdown_distributed",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
