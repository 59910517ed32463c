"""A warm compiler cache: what the trainer's warm-up and the engine's first compiled decode
step still cost, with AOTAutograd's cache open to autocast regions and closed (CPU).

OLMo-core runs RoPE and its norms inside ``torch.autocast(enabled=False)``; AOTAutograd's
cache refuses graphs with those regions unless ``runtime.compile_settings`` marks them
cacheable (``RLC_CACHE_AUTOCAST_GRAPHS=0`` leaves it closed, as before). Each row is a
fresh process over one Inductor cache directory per setting: the first run fills it
(cold), the next ``--repeats`` read it (warm).

- trainer: ``Trainer(compile_model=True)`` of ``--model`` and its ``warm_up()`` (every row
  length its packing budget can meet), seconds of the warm-up alone;
- engine: ``InferenceModel.enable_compile()`` and its first decode step at batch 4,
  seconds of that step (its compile).

    .venv/bin/python benchmarks/compiler_cache_warm.py [--model builtin:tiny] [--repeats 2]

Prints a table last and writes JSON to benchmarks/results/compiler_cache_warm.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from results_file import write_results

ROOT = Path(__file__).resolve().parents[1]

TRAINER = """
import json, sys, time
sys.path.insert(0, {root!r})
from runtime.compile_settings import aot_cache_counts
from runtime.trainer import Trainer, TrainerConfig
cfg = TrainerConfig(model_source={model!r}, lr=1e-3, sequence_packing=True,
                    packing_max_tokens=512, compile_model=True)
trainer = Trainer(cfg)
t0 = time.perf_counter()
rows = trainer.warm_up()
print(json.dumps({{"s": time.perf_counter() - t0, "rows": rows, "aot": aot_cache_counts(),
                  "graphs": sum(r["graphs"] for r in trainer.warm_up_log)}}))
"""

ENGINE = """
import json, sys, time
sys.path.insert(0, {root!r})
import torch
from runtime.compile_settings import aot_cache_counts
from runtime.engines.embedded.forward import InferenceModel
from runtime.models import load_model
torch.set_grad_enabled(False)
model = load_model({model!r}, seed=1).model
im = InferenceModel(model, max_slots=4, capacity=64, device="cpu")
im.enable_compile()
t0 = time.perf_counter()
im.decode_step(torch.tensor([1, 2, 3, 4]), torch.zeros(4, dtype=torch.long), kv_len=1)
print(json.dumps({{"s": time.perf_counter() - t0, "aot": aot_cache_counts()}}))
"""


def _child(code: str, cache: Path, cache_autocast: bool) -> dict[str, Any]:
    env = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": str(cache),
        "RLC_CACHE_AUTOCAST_GRAPHS": "1" if cache_autocast else "0",
    }
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="builtin:tiny")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks/results/compiler_cache_warm.json"
    )
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="rlc-cc-") as tmp:
        for what, template in (("trainer warm-up", TRAINER), ("engine decode compile", ENGINE)):
            code = template.format(root=str(ROOT), model=args.model)
            for cache_autocast in (False, True):
                cache = Path(tmp) / f"{what.split()[0]}-{int(cache_autocast)}"
                cold = _child(code, cache, cache_autocast)
                warm = [_child(code, cache, cache_autocast) for _ in range(args.repeats)]
                rows.append(
                    {
                        "what": what,
                        "autocast_graphs_cached": cache_autocast,
                        "cold_s": round(cold["s"], 3),
                        "warm_s": [round(w["s"], 3) for w in warm],
                        "warm_best_s": round(min(w["s"] for w in warm), 3),
                        "cold_aot": cold["aot"],
                        "warm_aot": warm[-1]["aot"],
                        "graphs": cold.get("graphs"),
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
    write_results(
        args.out,
        rows,
        model=args.model,
        torch=__import__("torch").__version__,
    )
    print(
        f"\n{'what':<24}{'autocast cached':>16}{'cold s':>9}{'warm s (best)':>15}  warm AOT cache"
    )
    for r in rows:
        aot = r["warm_aot"]
        cache = f"hit {aot['hit']}, miss {aot['miss']}, bypass {aot['bypass']}"
        print(
            f"{r['what']:<24}{'yes' if r['autocast_graphs_cached'] else 'no':>16}"
            f"{r['cold_s']:>9.2f}{r['warm_best_s']:>15.2f}  {cache}"
        )


if __name__ == "__main__":
    main()
