"""Cold `rlc compile` latency against the bare interpreter floor (target: median < 0.3 s).

Each run is a fresh process. Rows: `python -c "import tomllib"` (the floor), `rlc --help`,
`rlc compile` of the quickstart with the compile cache off (every stage runs) - once with
the derived artifacts under RLC_CACHE_DIR warm (parser tables, fast validators, compiled
templates, parsed rule files: what an installed rlc has after its first compile) and once
with them empty on every run (the first run after an install, which builds them all) - and
with the compile cache warm (an unchanged spec replays its stored result). Then the per-stage milliseconds
of one compile inside one fresh process (imports included where a stage first needs them).
Prints the tables; writes JSON.

    .venv/bin/python benchmarks/compile_bench.py [--runs 15]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# One compile in a fresh process, timed per stage; prints {stage: seconds} as JSON.
STAGES = r"""
import json, sys, time
t = time.perf_counter()
out = {}
def stage(name):
    global t
    now = time.perf_counter()
    out[name] = now - t
    t = now
from rlc_cli import main  # noqa: F401 - what `rlc` imports before any command
from rlc_cli.commands import compile as command  # noqa: F401
stage("import cli + compile command")
from compiler.pipeline import compile_spec
result = compile_spec(sys.argv[1])
assert result.ok, result.diagnostics
for name, seconds in result.timings.items():
    out["pipeline: " + name] = seconds
t = time.perf_counter()
from pathlib import Path
from typing import Any
from compiler.manifest.manifest import write_manifest
manifest = result.manifest()
stage("manifest (argv, digests)")
path = write_manifest(manifest, Path(sys.argv[2]) / manifest["name"] / "manifest.json")
stage("write manifest")
from compiler.emit import emit_artifacts
emit_artifacts(manifest, path.parent)
stage("emit + validate Beaker YAML")
mods = sys.modules
out["_imported"] = [m for m in ("pydantic", "jinja2", "yaml", "torch", "lark") if m in mods]
print(json.dumps(out))
"""


def stage_breakdown(py: str, spec: str, env: dict[str, str], runs: int) -> dict[str, Any]:
    """Median seconds per stage over ``runs`` fresh processes, and what they imported."""
    samples: list[dict[str, Any]] = []
    for _ in range(runs):
        out = Path(tempfile.mkdtemp(prefix="rlc-bench-stages-"))
        done = subprocess.run(
            [py, "-c", STAGES, spec, str(out)],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        shutil.rmtree(out, ignore_errors=True)
        samples.append(json.loads(done.stdout))
    names = [k for k in samples[0] if not k.startswith("_")]
    stages = {k: statistics.median(s[k] for s in samples) for k in names}
    return {"stages_s": stages, "imported": samples[0]["_imported"]}


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(cmd: list[str], env: dict[str, str], runs: int) -> list[tuple[float, float]]:
    """(wall seconds, CPU seconds) per run; CPU time (user + sys of the child) is the
    steadier number on a shared machine."""
    out = []
    for _ in range(runs):
        c0 = _child_cpu()
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True)
        out.append((time.perf_counter() - t0, _child_cpu() - c0))
    return out


def timed_cold_caches(cmd: list[str], env: dict[str, str], runs: int) -> list[tuple[float, float]]:
    """Like `timed`, with an empty RLC_CACHE_DIR for every run."""
    out = []
    for _ in range(runs):
        empty = tempfile.mkdtemp(prefix="rlc-cache-cold-")
        out.extend(timed(cmd, {**env, "RLC_CACHE_DIR": empty}, 1))
        shutil.rmtree(empty, ignore_errors=True)
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
    compile_cmd = [py, "-m", "rlc_cli.main", "compile", spec, "-o", str(build)]
    no_cache_cmd = [*compile_cmd, "--no-cache"]
    # warm the bytecode and the derived artifacts once, as an installed rlc would have
    subprocess.run(no_cache_cmd, cwd=ROOT, env=base, check=True, capture_output=True)
    rows = [
        (
            "python -c 'import tomllib' (floor)",
            timed([py, "-c", "import tomllib"], base, args.runs),
        ),
        ("rlc --help", timed([py, "-m", "rlc_cli.main", "--help"], base, args.runs)),
        ("rlc compile quickstart --no-cache", timed(no_cache_cmd, base, args.runs)),
        (
            "  same, derived artifacts cold (first run)",
            timed_cold_caches(no_cache_cmd, base, args.runs),
        ),
        (
            "rlc compile quickstart, compile cache warm",
            # its own build dir: the cache records only outputs a compile created itself
            timed([*compile_cmd[:-1], str(build / "cached")], base, args.runs + 1)[1:],
        ),
    ]
    breakdown = stage_breakdown(py, spec, {**base, "RLC_NO_CACHE": "1"}, args.runs)
    shutil.rmtree(build, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    load = os.getloadavg()[0]
    result = {
        "benchmark": "compile",
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()} {os.cpu_count()} cores, load {load:.1f}",
        "python": platform.python_version(),
        "rows": [
            {
                "what": name,
                "median_s": statistics.median(w for w, _ in t),
                "min_s": min(w for w, _ in t),
                "median_cpu_s": statistics.median(c for _, c in t),
                "runs": len(t),
            }
            for name, t in rows
        ],
        "derived_artifacts": "warm (RLC_CACHE_DIR filled by one compile) except where a row "
        "says cold (compiler.derive.derived builds them on first use; nothing generated is committed)",
        "stages_one_process": breakdown,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"machine: {result['machine']}")
    print(f"{'what':<45} {'median s':>9} {'min s':>7} {'cpu s':>9}")
    for r in result["rows"]:
        print(f"{r['what']:<45} {r['median_s']:>9.3f} {r['min_s']:>7.3f} {r['median_cpu_s']:>9.3f}")
    print()
    print(
        f"one compile in one fresh process (median of {args.runs}); imported: "
        + (", ".join(breakdown["imported"]) or "none of pydantic/jinja2/yaml/torch/lark")
    )
    print(f"{'stage':<45} {'ms':>9}")
    for name, seconds in breakdown["stages_s"].items():
        print(f"{name:<45} {1000 * seconds:>9.1f}")
    print(f"{'total':<45} {1000 * sum(breakdown['stages_s'].values()):>9.1f}")


if __name__ == "__main__":
    main()
