"""Lint throughput: manifests per second in one process (target >= 1,000/s).

Compiles the example specs once, then lints N manifests (bytes in memory: the measurement
is lint work, not the file system), best of 3 rounds. Also times each stage alone on the
same manifests, so the table shows where a lint goes: ``canonical`` (decode + canonical
form check), ``digest``, ``schema`` (the manifest JSON Schema), ``rules`` (every rule
re-run), ``artifacts`` (paths and command lines recomputed from config and plan), and
``rederive`` (what ``rlc lint --rederive`` adds: the user-written config resolved again). Wall and CPU (process) seconds are both recorded; on a shared machine the CPU
figure is the steadier one. Prints a table last; writes JSON.

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _timed(n: int, step: Callable[[int], Any]) -> tuple[float, float, float]:
    """(best wall, CPU seconds of that round, median wall) over 3 rounds of n steps."""
    rounds = []
    for _ in range(3):
        w0, c0 = time.perf_counter(), time.process_time()
        for i in range(n):
            step(i)
        rounds.append((time.perf_counter() - w0, time.process_time() - c0))
    best = min(rounds)
    return best[0], best[1], statistics.median(r[0] for r in rounds)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "lint.json"))
    args = ap.parse_args()

    from compiler.manifest.lint import ManifestView, _ruleset, artifact_findings, lint_manifest
    from compiler.manifest.lint_schema import fast_check, schema_errors
    from compiler.manifest.manifest import manifest_bytes
    from compiler.manifest.trust import derivation_findings
    from compiler.pipeline import compile_spec
    from compiler.rules import evaluate
    from contract.canonical import digest_without, load_if_canonical

    os.chdir(ROOT)
    blobs = []
    for spec in sorted((ROOT / "specs" / "examples").glob("*.toml")):
        blobs.append((spec.stem, manifest_bytes(compile_spec(spec.relative_to(ROOT)).manifest())))
    k = len(blobs)
    lint_manifest("warm", blobs[0][1])  # build validator + rule set once
    loaded = [load_if_canonical(b) for _, b in blobs]
    check = fast_check()
    fast_canonical = sum(x is not None for x in loaded)
    fast_schema = sum(bool(check and x and check(x[0])) for x in loaded)
    if None in loaded:
        raise SystemExit("an example manifest missed the canonical fast path")
    docs = [x[0] for x in loaded if x is not None]
    compacts = [x[1] for x in loaded if x is not None]
    ruleset = _ruleset()

    def lint_one(i: int) -> None:
        name, blob = blobs[i % k]
        report = lint_manifest(name, blob)
        assert report.ok, report.findings

    stages: list[tuple[str, Callable[[int], Any]]] = [
        ("canonical", lambda i: load_if_canonical(blobs[i % k][1])),
        ("digest", lambda i: digest_without(compacts[i % k], "digest", docs[i % k]["digest"])),
        ("schema", lambda i: schema_errors(docs[i % k])),
        ("rules", lambda i: evaluate(ruleset, ManifestView(docs[i % k]))),
        ("artifacts", lambda i: artifact_findings(docs[i % k], "x")),
        ("all", lint_one),
        # what `--rederive` adds (resolve the user-written config again); fewer rounds
        ("rederive", lambda i: derivation_findings(docs[i % k], "x")),
    ]
    rows = []
    for phase, step in stages:
        n = max(1, args.n // 10) if phase == "rederive" else args.n
        wall, cpu, median = _timed(n, step)
        rows.append(
            {
                "phase": phase,
                "n": n,
                "seconds": wall,
                "cpu_seconds": cpu,
                "per_second": n / wall,
                "per_cpu_second": n / cpu if cpu else None,
                "us_per_manifest": 1e6 * wall / n,
                "median_seconds": median,
            }
        )
    result = {
        "benchmark": "lint",
        "machine": f"{platform.machine()} {os.cpu_count()} cores",
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
        "load_average": os.getloadavg()[0],
        "manifest_bytes": [len(b) for _, b in blobs],
        "fast_paths": {"canonical": fast_canonical, "schema": fast_schema, "of": k},
        "rows": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"fast paths: canonical {fast_canonical}/{k}, schema {fast_schema}/{k}")
    print(f"load average {result['load_average']:.2f}")
    print(
        f"{'phase':<10} {'manifests':>10} {'seconds':>9} {'cpu s':>7} {'us each':>8}"
        f" {'manifests/s':>12} {'per cpu-s':>10}"
    )
    for r in rows:
        print(
            f"{r['phase']:<10} {r['n']:>10} {r['seconds']:>9.3f} {r['cpu_seconds']:>7.3f}"
            f" {r['us_per_manifest']:>8.0f} {r['per_second']:>12.0f}"
            f" {r['per_cpu_second'] or 0:>10.0f}"
        )


if __name__ == "__main__":
    main()
