"""The end-of-run report: reward and response-length curves as one PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runtime.metrics import fifths, read_metrics


def _series(records: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for r in records:
        v = r.get(key)
        if isinstance(v, int | float):
            xs.append(int(r["collection"]))
            ys.append(float(v))
    return xs, ys


def write_report(metrics_path: str | Path, out_path: str | Path, title: str = "") -> Path:
    """Render reward / response length / mismatch per collection to ``out_path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(metrics_path)
    panels = [
        ("reward/mean", "mean reward"),
        ("response_length/mean", "response length (tokens)"),
        ("mismatch/logprob_abs_mean", "|trainer - engine| logprob"),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6))
    for ax, (key, label) in zip(axes, panels, strict=True):
        xs, ys = _series(records, key)
        if xs:
            ax.plot(xs, ys, marker="." if len(xs) < 60 else None, linewidth=1.2)
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel("collection")
        ax.set_title(label)
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def summary(metrics_path: str | Path) -> dict[str, Any]:
    """First-fifth vs last-fifth reward and totals, for the end-of-run message."""
    records = read_metrics(metrics_path)
    _, rewards = _series(records, "reward/mean")
    first, last = fifths(rewards)
    return {
        "collections": len(records),
        "reward_first_fifth": first,
        "reward_last_fifth": last,
        "tokens": sum(int(r.get("tokens/total", 0) or 0) for r in records),
        "seconds": sum(float(r.get("time/collection_s", 0.0) or 0.0) for r in records),
    }
