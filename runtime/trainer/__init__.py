"""GRPO trainer core: loss, packing, distributed data parallel, the Trainer class."""

from .distributed import DistInfo, init_distributed, shutdown_distributed
from .grpo import GRPOConfig, group_advantages, grpo_loss, kl_penalty
from .packing import PackedRow, pack_samples, plan_rows
from .schedule import lr_multiplier
from .trainer import Trainer, TrainerConfig
from .types import Sample

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
