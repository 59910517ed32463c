"""Lint throughput: manifests per second in one process (target >= 1,000/s).

Compiles the example specs once, then lints N manifests read from disk (bytes in memory:
the measurement is lint work, not the file system). Prints a table last; writes JSON.

    .venv/bin/python benchmarks/lint_bench.py [--n 3000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "lint.json"))
    args = ap.parse_args()

    from compiler.lint import lint_manifest
    from compiler.manifest import manifest_bytes
    from compiler.pipeline import compile_spec

    os.chdir(ROOT)
    blobs = []
    for spec in sorted((ROOT / "specs" / "examples").glob("*.toml")):
        blobs.append((spec.stem, manifest_bytes(compile_spec(spec.relative_to(ROOT)).manifest())))
    lint_manifest("warm", blobs[0][1])  # build validator + rule set once
    rows = []
    for phase in ("all",):
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            for i in range(args.n):
                name, blob = blobs[i % len(blobs)]
                report = lint_manifest(name, blob)
                assert report.ok, report.findings
            times.append(time.perf_counter() - t0)
        best = min(times)
        rows.append(
            {
                "phase": phase,
                "n": args.n,
                "seconds": best,
                "per_second": args.n / best,
                "median_seconds": statistics.median(times),
            }
        )
    result = {
        "benchmark": "lint",
        "machine": f"{platform.machine()} {os.cpu_count()} cores",
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
        "manifest_bytes": [len(b) for _, b in blobs],
        "rows": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'phase':<8} {'manifests':>10} {'seconds':>9} {'manifests/s':>12}")
    for r in rows:
        print(f"{r['phase']:<8} {r['n']:>10} {r['seconds']:>9.3f} {r['per_second']:>12.0f}")


if __name__ == "__main__":
    main()
