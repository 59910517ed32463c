"""Cold `rlc compile` latency against the bare interpreter floor (target: median < 0.3 s).

Each run is a fresh process. Rows: `python -c "import tomllib"` (the floor), `rlc --help`,
`rlc compile` of the quickstart with the compile cache off (every stage runs), and with the
cache warm (an unchanged spec replays its stored result). Prints a table; writes JSON.

    .venv/bin/python benchmarks/compile_bench.py [--runs 15]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(cmd: list[str], env: dict[str, str], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True)
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "compile.json"))
    args = ap.parse_args()
    py = sys.executable
    build = Path(tempfile.mkdtemp(prefix="rlc-bench-"))
    cache = Path(tempfile.mkdtemp(prefix="rlc-cache-"))
    base = {**os.environ, "RLC_CACHE_DIR": str(cache)}
    base.pop("PYTHONDONTWRITEBYTECODE", None)
    spec = "specs/examples/quickstart.toml"
    compile_cmd = [py, "-m", "compiler.cli", "compile", spec, "-o", str(build)]
    # warm the bytecode and the rules/schema caches once, as an installed rlc would have
    subprocess.run(
        compile_cmd, cwd=ROOT, env={**base, "RLC_NO_CACHE": "1"}, check=True, capture_output=True
    )
    rows = [
        (
            "python -c 'import tomllib' (floor)",
            timed([py, "-c", "import tomllib"], base, args.runs),
        ),
        ("rlc --help", timed([py, "-m", "compiler.cli", "--help"], base, args.runs)),
        (
            "rlc compile quickstart, no compile cache",
            timed(compile_cmd, {**base, "RLC_NO_CACHE": "1"}, args.runs),
        ),
        (
            "rlc compile quickstart, compile cache warm",
            # its own build dir: the cache records only outputs a compile created itself
            timed([*compile_cmd[:-1], str(build / "cached")], base, args.runs + 1)[1:],
        ),
    ]
    shutil.rmtree(build, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    load = os.getloadavg()[0]
    result = {
        "benchmark": "compile",
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()} {os.cpu_count()} cores, load {load:.1f}",
        "python": platform.python_version(),
        "rows": [
            {"what": name, "median_s": statistics.median(t), "min_s": min(t), "runs": len(t)}
            for name, t in rows
        ],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"machine: {result['machine']}")
    print(f"{'what':<45} {'median s':>9} {'min s':>7}")
    for r in result["rows"]:
        print(f"{r['what']:<45} {r['median_s']:>9.3f} {r['min_s']:>7.3f}")


if __name__ == "__main__":
    main()
