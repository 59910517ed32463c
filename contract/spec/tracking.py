"""[tracking]: metrics and W&B."""

from __future__ import annotations

from typing import Literal

from contract.spec._base import Section, fld


class TrackingSection(Section):
    metrics_path: str | None = fld(
        None, description="metrics JSONL (always written)", derived="<output.root>/metrics.jsonl"
    )
    wandb_mode: Literal["disabled", "offline", "online"] = fld(
        "disabled", description="Weights & Biases mode"
    )
    wandb_project: str | None = fld(None, description="W&B project")
    wandb_team: str | None = fld(None, description="W&B entity")
    wandb_group: str | None = fld(
        None, description="W&B group", aliases=("tracking.comparison_id",)
    )
    wandb_run_name: str | None = fld(None, description="W&B run name", derived="name")
    log_interval: int = fld(
        1, description="collections between W&B log calls (metrics.jsonl gets every one)", ge=1
    )
