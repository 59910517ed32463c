"""Wall time of one GRPO collection on the quickstart (CPU), split by phase.

Runs the real quickstart (two embedded engines behind sglang-router, CPU trainer) for a
few collections and reports the median time of each phase over the collections after
the first (which includes warm-up). Writes JSON to benchmarks/results/grpo_step.json.

    .venv/bin/python benchmarks/grpo_step.py [--collections 4] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_file import write_results

ROOT = Path(__file__).resolve().parents[1]
PHASES = (
    "generate_s",
    "score_s",
    "logprob_s",
    "train_s",
    "publish_s",
    "checkpoint_s",
    "collection_s",
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collections", type=int, default=4)
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "grpo_step.json"))
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from compiler.manifest.manifest import write_manifest
    from compiler.pipeline import compile_spec

    with tempfile.TemporaryDirectory(prefix="rlc-bench-") as tmp:
        sets = [
            *args.overrides,
            f"training.num_rollouts={args.collections}",
            "checkpoint.interval=1000",
            f'output.root="{tmp}/run"',
        ]
        manifest = write_manifest(
            compile_spec(str(ROOT / "specs/examples/quickstart.toml"), sets).manifest(),
            Path(tmp) / "manifest.json",
        )
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        t0 = time.monotonic()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "runtime.entrypoints.execute",
                str(manifest),
                "--resume",
                "never",
                "--no-progress",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        wall = time.monotonic() - t0
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            return proc.returncode
        recs = [
            json.loads(x) for x in (Path(tmp) / "run" / "metrics.jsonl").read_text().splitlines()
        ]
    steady = recs[1:] or recs
    result = write_results(
        Path(args.out),
        [
            {
                "phase": p,
                "first_collection_s": recs[0][f"time/{p}"],
                "median_s": statistics.median(r[f"time/{p}"] for r in steady),
            }
            for p in PHASES
        ],
        benchmark="grpo_step",
        spec="specs/examples/quickstart.toml",
        overrides=args.overrides,
        collections=len(recs),
        samples_per_collection=recs[0]["samples"],
        median_s={p: statistics.median(r[f"time/{p}"] for r in steady) for p in PHASES},
        generated_tokens_per_s=statistics.median(r["tokens/per_s"] for r in steady),
        process_wall_s=wall,
        python=platform.python_version(),
        load1=os.getloadavg()[0],
    )
    print(json.dumps(result["median_s"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
