"""``rlc run --bench``: the phase table and tokens/s/GPU of a finished run.

Reads the run's own record (``metrics.jsonl`` and ``startup.json`` under ``output.root``),
so it can be printed again later: ``python -m runtime.entrypoints.bench RUN_ROOT --gpus N``. The first
collection is shown apart (it may still pay compiles); "steady" is the median over the
later ones. Tokens/s/GPU counts generated tokens plus trained tokens (prompt + response of
every sample the update saw) over the collection's wall time and the GPUs the run holds.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from runtime.metrics import read_metrics
from runtime.node.startup import read_startup

PHASES = (
    ("generate_s", "generation"),
    ("score_s", "scoring"),
    ("wait_s", "wait for the buffer"),
    ("logprob_s", "log-probs"),
    ("train_s", "update"),
    ("publish_s", "publication"),
    ("checkpoint_s", "checkpoint"),
    ("collection_s", "collection"),
)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _rate(rec: dict[str, Any], gpus: int) -> float | None:
    secs = float(rec.get("time/collection_s") or 0.0)
    if secs <= 0:
        return None
    tokens = int(rec.get("tokens/generated") or 0) + int(rec.get("tokens/total") or 0)
    return tokens / secs / max(gpus, 1)


def _first_and_steady(
    first: list[dict[str, Any]], rest: list[dict[str, Any]], key: str
) -> dict[str, float | None] | None:
    """``key`` in the first collection and its median over the rest; None if never logged."""
    f = [float(r[key]) for r in first if isinstance(r.get(key), int | float)]
    s = [float(r[key]) for r in rest if isinstance(r.get(key), int | float)]
    return {"first": f[0] if f else None, "steady": _median(s)} if f or s else None


def bench(root: Path, gpus: int) -> dict[str, Any]:
    """The numbers the table shows, as JSON."""
    records = [r for r in read_metrics(Path(root) / "metrics.jsonl") if "collection" in r]
    first, rest = (records[:1], records[1:]) if records else ([], [])
    out: dict[str, Any] = {"collections": len(records), "gpus": gpus, "phases": {}}
    for key, _ in PHASES:
        if row := _first_and_steady(first, rest, f"time/{key}"):
            out["phases"][key] = row
    rates = [x for x in (_rate(r, gpus) for r in rest) if x is not None]
    out["tokens_per_s_per_gpu"] = {
        "first": _rate(first[0], gpus) if first else None,
        "steady": _median(rates),
    }
    out["tokens_per_collection"] = {
        "generated": _median([float(r.get("tokens/generated") or 0) for r in records]),
        "trained": _median([float(r.get("tokens/total") or 0) for r in records]),
    }
    # the trainer process's GC pauses (inside the phases): a full collection over a large
    # heap stalls every thread; the heap is frozen after start-up (runtime.heap)
    for key in ("gc/pause_s", "gc/longest_pause_s"):
        if row := _first_and_steady(first, rest, key):
            out.setdefault("gc", {})[key.removeprefix("gc/")] = row
    # the engines' log-probs against the trainer's over the sampled tokens: what a faster
    # engine setting (an FP8 KV cache) costs, beside the speed it buys
    if row := _first_and_steady(first, rest, "mismatch/logprob_abs_mean"):
        out["logprob_gap"] = row
    # graphs compiled during updates: the warm-up should leave none for the run to meet
    compiles = [r.get("train/new_compiled_graphs") for r in records]
    if any(isinstance(c, int | float) for c in compiles):
        counts = [int(c) if isinstance(c, int | float) else 0 for c in compiles]
        out["update_compiles"] = {"first": counts[0], "later": sum(counts[1:])}
    out["startup"] = read_startup(Path(root))
    return out


def _fmt(v: float | None, unit: str = "s") -> str:
    if v is None:
        return "-"
    if unit == "gap":
        return f"{v:.4f}"
    return f"{v:,.0f}" if unit == "tok" else f"{v:.3f}"


def table(data: dict[str, Any]) -> str:
    n = int(data["collections"])
    lines = []
    st = data.get("startup")
    if st:
        lines.append(f"start-up: {float(st.get('total_s', 0.0)):.1f} s to the first collection")
        for p in st.get("phases") or []:
            lines.append(f"  {p['name']:<28}{float(p['seconds']):>9.1f} s")
        if st.get("graphs") is not None:
            lines.append(f"  decode graphs captured before the first collection: {st['graphs']}")
        if st.get("prefill_compile_s"):
            lines.append(
                f"  of that warm-up, the prefill's compile: {st['prefill_compile_s']:.1f} s"
            )
    steady = f"steady (median of {max(n - 1, 0)})"
    lines.append(f"{'phase':<22}{'first collection':>18}{steady:>24}")
    for key, label in PHASES:
        row = data["phases"].get(key)
        if row:
            lines.append(f"{label:<22}{_fmt(row['first']):>18}{_fmt(row['steady']):>24}")
    labels = {"pause_s": "GC pauses", "longest_pause_s": "longest GC pause"}
    for key, row in (data.get("gc") or {}).items():
        lines.append(f"{labels[key]:<22}{_fmt(row['first']):>18}{_fmt(row['steady']):>24}")
    tps = data["tokens_per_s_per_gpu"]
    label = f"tokens/s/GPU ({data['gpus']})"
    lines.append(f"{label:<22}{_fmt(tps['first'], 'tok'):>18}{_fmt(tps['steady'], 'tok'):>24}")
    gap = data.get("logprob_gap")
    if gap:
        label = "log-prob gap"
        lines.append(
            f"{label:<22}{_fmt(gap['first'], 'gap'):>18}{_fmt(gap['steady'], 'gap'):>24}"
            "  (engine vs trainer, mean |diff| a token)"
        )
    comp = data.get("update_compiles")
    if comp:
        lines.append(
            f"graphs compiled by updates: {comp['first']} in the first collection, "
            f"{comp['later']} later"
        )
    tok = data["tokens_per_collection"]
    lines.append(
        f"tokens per collection: {_fmt(tok['generated'], 'tok')} generated + "
        f"{_fmt(tok['trained'], 'tok')} trained (median)"
    )
    return "\n".join(lines)


def run_gpus(placement: dict[str, Any]) -> int:
    """GPUs the run holds (the plan's ``placement.used_gpus``; 1 for a CPU run's accounting)."""
    return max(int(placement.get("used_gpus") or 0), 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m runtime.entrypoints.bench", description=__doc__)
    ap.add_argument("root", type=Path, help="the run's output.root")
    ap.add_argument("--gpus", type=int, default=1, help="GPUs the run held")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = ap.parse_args(argv)
    data = bench(args.root, args.gpus)
    if not data["collections"]:
        print(f"rlc: error: {args.root}/metrics.jsonl holds no collection")
        return 2
    print(json.dumps(data, indent=1, sort_keys=True) if args.json else table(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
