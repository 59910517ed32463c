"""Code-executor throughput: real HumanEval problems through the sandboxed executor service.

For each worker count, starts ``python -m runtime.executor --workers N`` (with the host's
best isolation), submits the 164 canonical solutions (each one sandboxed run) through the
``code`` verifier and reports items/s and per-run latency (median / p95 of the executor's
own wall time per run). Also measures one bare ``python -I -c pass`` for the floor.

Prints a table last and writes ``benchmarks/results/executor.json``.

    python benchmarks/executor.py [--workers 1 2] [--repeat 1]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from runtime.executor.client import LocalExecutor  # noqa: E402
from runtime.executor.settings import ExecutorSettings  # noqa: E402
from runtime.rewards.base import ScoreItem, get_verifier  # noqa: E402
from runtime.rewards.code import humaneval_target  # noqa: E402

HUMANEVAL = ROOT / "runtime" / "data" / "datasets" / "humaneval" / "HumanEval.jsonl.gz"
RESULTS = ROOT / "benchmarks" / "results" / "executor.json"


def load_items(path: Path = HUMANEVAL) -> list[ScoreItem]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    items = []
    for rec in rows:
        target, meta = humaneval_target(rec)
        items.append(ScoreItem(rec["canonical_solution"], target, meta))
    return items


def bench(workers: int, items: list[ScoreItem], repeat: int) -> dict:
    with LocalExecutor(ExecutorSettings(workers=workers)) as ex:
        health = httpx.get(ex.url + "/health", timeout=30, trust_env=False).json()
        v = get_verifier(
            "code", {"executor_url": ex.url, "concurrency": max(2, 2 * workers), "retries": 0}
        )
        v.score_batch(items[:4])  # warm caches and connections
        runs = []
        walls: list[float] = []
        passed = 0
        for _ in range(repeat):
            t0 = time.perf_counter()
            results = v.score_batch(items)
            runs.append(time.perf_counter() - t0)
            passed = sum(r.score == 1.0 for r in results)
        v.close()
        # Per-run latency from a sequential pass over a sample (no queueing in the number).
        v1 = get_verifier("code", {"executor_url": ex.url, "concurrency": 1})
        for item in items[::8]:
            t0 = time.perf_counter()
            v1.score(item.response, item.target, item.metadata)
            walls.append(time.perf_counter() - t0)
        v1.close()
    best = min(runs)
    walls.sort()
    return {
        "workers": workers,
        "items": len(items),
        "passed": passed,
        "seconds": round(best, 3),
        "items_per_s": round(len(items) / best, 2),
        "latency_median_ms": round(1000 * statistics.median(walls), 1),
        "latency_p95_ms": round(1000 * walls[int(0.95 * (len(walls) - 1))], 1),
        "isolation": _portable(health.get("isolation", {})),
    }


def _portable(isolation: dict[str, object]) -> dict[str, object]:
    """The isolation report without this machine's paths (the interpreter by name only)."""
    out = dict(isolation)
    if isinstance(out.get("python"), str):
        out["python"] = Path(str(out["python"])).name
    return out


def interpreter_floor() -> float:
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-I", "-c", "pass"], check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--data", type=Path, default=HUMANEVAL, help="HumanEval.jsonl.gz")
    args = ap.parse_args()
    if not args.data.exists():
        print(f"HumanEval data not found at {args.data}", file=sys.stderr)
        return 2
    items = load_items(args.data)
    rows = [bench(w, items, args.repeat) for w in args.workers]
    floor = interpreter_floor()
    out = {
        "benchmark": "executor",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_avg_1m": round(os.getloadavg()[0], 2),
        },
        "python_startup_floor_ms": round(1000 * floor, 1),
        "rows": rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    iso = rows[0]["isolation"]
    print(f"isolation: kind={iso.get('kind')} filesystem={iso.get('filesystem')}")
    print(f"bare `python -I -c pass`: {out['python_startup_floor_ms']} ms")
    print(f"wrote {RESULTS.relative_to(ROOT)}\n")
    print(
        f"{'workers':>7} {'items':>5} {'passed':>6} {'seconds':>8} {'items/s':>8} "
        f"{'p50 ms':>7} {'p95 ms':>7}"
    )
    for r in rows:
        print(
            f"{r['workers']:>7} {r['items']:>5} {r['passed']:>6} {r['seconds']:>8} "
            f"{r['items_per_s']:>8} {r['latency_median_ms']:>7} {r['latency_p95_ms']:>7}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
