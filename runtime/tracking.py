"""Weights & Biases next to metrics.jsonl: ``[tracking]`` wandb_* fields, through ``wandb``.

metrics.jsonl stays the run's record (every collection); W&B gets the same records every
``tracking.log_interval`` collections, keyed by collection. ``offline`` writes a local run
under ``<output.root>/wandb`` that ``wandb sync`` uploads later; ``disabled`` does nothing.
Only rank 0 of the trainer logs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.defaults import default_of
from contract.spec.tracking import TrackingSection

MODES = ("disabled", "offline", "online")


@dataclass(frozen=True)
class WandbSink:
    """``[tracking]`` W&B settings (defaults are the spec's, `contract.defaults`)."""

    mode: str = default_of(TrackingSection, "wandb_mode")
    project: str | None = None
    entity: str | None = None
    group: str | None = None
    run_name: str | None = None
    log_interval: int = default_of(TrackingSection, "log_interval")

    @classmethod
    def from_contract(cls, tracking: TrackingSection) -> WandbSink:
        """From the manifest's ``config.tracking`` section."""
        return cls(
            mode=tracking.wandb_mode,
            project=tracking.wandb_project,
            entity=tracking.wandb_team,
            group=tracking.wandb_group,
            run_name=tracking.wandb_run_name,
            log_interval=tracking.log_interval,
        )

    def start(self, root: Path, config: Mapping[str, Any], run_id: str) -> WandbRun | None:
        """A live run, or None when disabled. ``run_id`` keeps a resumed run's history."""
        if self.mode == "disabled":
            return None
        import wandb

        root.mkdir(parents=True, exist_ok=True)
        run = wandb.init(
            mode=self.mode,  # type: ignore[arg-type]
            project=self.project or "rlc",
            entity=self.entity,
            group=self.group,
            name=self.run_name,
            id=run_id,
            resume="allow",
            dir=str(root),
            config=dict(config),
            settings=wandb.Settings(silent=True, console="off"),
        )
        return WandbRun(run, self.log_interval)


class WandbRun:
    """Logs loop records (a dict per collection) to an open ``wandb`` run."""

    def __init__(self, run: Any, log_interval: int) -> None:
        self.run = run
        self.log_interval = log_interval

    def log(self, record: Mapping[str, Any]) -> None:
        step = int(record.get("collection", 0))
        if step % self.log_interval and not record.get("final"):
            return
        values = {
            k: float(v)
            for k, v in record.items()
            if isinstance(v, int | float) and not isinstance(v, bool)
        }
        self.run.log(values, step=step)

    def finish(self) -> None:
        self.run.finish()
