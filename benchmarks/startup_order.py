"""Start-up orders of `rlc run` on this machine: the trainer beside the engines and both on
zeros while their weights are read, against engines first and the trainer after them.

Each run is `rlc run specs/examples/quickstart.toml` with a model above the init cache's
size floor (``--model``, default ``builtin:olmo3-190m``), so its weights go through the init
cache, and one collection of 4 prompts x 2 samples. Cold runs empty the init cache first;
warm runs reuse it. The figure is the run's own "start-up to the first collection"
(``startup.json``), with its engines-ready and trainer phases.

Orders (environment of the run):
- ``overlapped``: ``RLC_TRAINER_BESIDE_ENGINES=1 RLC_ENGINE_DEFER_WEIGHTS=1`` (the GPU
  default, forced here);
- ``engine-first``: ``RLC_TRAINER_BESIDE_ENGINES=1 RLC_ENGINE_DEFER_WEIGHTS=0``;
- ``default``: nothing set (on a CPU: engines first, then the trainer).

    .venv/bin/python benchmarks/startup_order.py [--repeats 2]

Prints a table last and writes JSON to benchmarks/results/startup_order.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from results_file import write_results

ROOT = Path(__file__).resolve().parents[1]
ORDERS = {
    "overlapped": {"RLC_TRAINER_BESIDE_ENGINES": "1", "RLC_ENGINE_DEFER_WEIGHTS": "1"},
    "engine-first": {"RLC_TRAINER_BESIDE_ENGINES": "1", "RLC_ENGINE_DEFER_WEIGHTS": "0"},
    "default": {},
}


def _run(model: str, order: str, cache: Path, out: Path) -> dict[str, Any]:
    shutil.rmtree(out, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if k not in ORDERS["overlapped"]}
    env.update({"RLC_CACHE_DIR": str(cache), **ORDERS[order]})
    sets = [
        f'model.source="{model}"',
        "training.num_rollouts=1",
        "inference.prompts_per_collection=4",
        "inference.samples_per_prompt=2",
        f'output.root="{out}"',
        "output.export_hf=false",
        "training.eval_interval=100",
        "checkpoint.interval=100",
    ]
    argv = [str(ROOT / ".venv/bin/rlc"), "run", "specs/examples/quickstart.toml"]
    argv += ["--no-progress", "--resume", "never"]
    for s in sets:
        argv += ["--set", s]
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{order}: rlc run failed:\n{proc.stderr[-3000:]}")
    startup = json.loads((out / "startup.json").read_text())
    phases = {p["name"]: p["seconds"] for p in startup["phases"]}
    return {
        "startup_s": startup["total_s"],
        "engines_ready_s": phases.get("engines ready"),
        "trainer_s": phases.get("trainer"),
        "trainer_beside": "trainer_start" in startup,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="builtin:olmo3-190m")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/startup_order.json")
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="rlc-startup-", dir="/tmp") as tmp:
        cache, out = Path(tmp) / "cache", Path(tmp) / "run"
        for order in ORDERS:
            cold, warm = [], []
            for _ in range(args.repeats):
                shutil.rmtree(cache, ignore_errors=True)
                cold.append(_run(args.model, order, cache, out))
                warm.append(_run(args.model, order, cache, out))
            rows.append({"order": order, "cold": cold, "warm": warm})
            print(json.dumps(rows[-1]), flush=True)
    write_results(
        args.out,
        rows,
        model=args.model,
    )
    print(f"\n{'order':<14}{'cold start-up s':>24}{'warm start-up s':>24}")
    for r in rows:
        cold = ", ".join(f"{c['startup_s']:.1f}" for c in r["cold"])
        warm = ", ".join(f"{w['startup_s']:.1f}" for w in r["warm"])
        print(f"{r['order']:<14}{cold:>24}{warm:>24}")


if __name__ == "__main__":
    main()
