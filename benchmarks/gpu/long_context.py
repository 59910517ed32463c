"""Long context on the 1B model: a GRPO update and decode at 16K/32K, peak memory vs plan.

For each context C: ``rlc plan`` of ``specs/examples/gpu-dense.toml`` with C-token contexts
(1K prompt, C-1K response, packing over C, recompute on, 8 engine slots, a pool of 8 x C)
prints the memory estimate; then, in one process on the GPU (the colocated placement),
``Trainer.train_step`` (fp32 master + bf16 autocast, FlexAttention, activation recompute)
runs on one sample of 1K prompt + (C-1K) response tokens, and the embedded engine (bf16,
8 slots x C) prefills a (C-512)-token prompt and decodes 256 tokens. Peaks are
``torch.cuda.max_memory_allocated``: the trainer's alone, and trainer + engine together.

    python3 benchmarks/gpu/long_context.py --contexts 16384 32768
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
GIB = 1024**3
SLOTS = 8


def plan_estimate(ctx: int) -> dict[str, Any]:
    sets = {
        "inference.max_context_length": ctx,
        "inference.max_response_length": ctx - 1024,
        "inference.max_prompt_length": 1024,
        "trainer.packing_max_tokens": ctx,
        "trainer.activation_recompute": "true",
        "inference.max_running_requests": SLOTS,
        "inference.server_concurrency": SLOTS,
        "inference.max_total_tokens": SLOTS * ctx,
    }
    argv = [sys.executable, "-m", "rlc_cli.main", "plan", "specs/examples/gpu-dense.toml", "--json"]
    for k, v in sets.items():
        argv += ["--set", f"{k}={v}"]
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        return {"error": (out.stderr or out.stdout)[-500:]}
    mem: dict[str, Any] = json.loads(out.stdout)["plan"]["memory"]
    return mem


def measure(ctx: int, source: str) -> dict[str, Any]:
    import copy
    import dataclasses

    from runtime.engines.embedded.engine import Engine
    from runtime.engines.embedded.sampling import SamplingParams
    from runtime.trainer import Sample, Trainer, TrainerConfig

    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    out: dict[str, Any] = {"context": ctx}
    trainer = Trainer(
        TrainerConfig(
            model_source=source,
            device="cuda",
            packing_max_tokens=ctx,
            activation_recompute=True,
            attention_backend="flex",
        )
    )
    g = torch.Generator().manual_seed(ctx)
    ids = torch.randint(10, 50000, (ctx,), generator=g).tolist()
    sample = Sample(ids[:1024], ids[1024:], advantage=1.0, rollout_logprobs=[-1.0] * (ctx - 1024))
    try:
        times = []
        for _ in range(2):
            t0 = time.perf_counter()
            trainer.train_step([sample])
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        out["update_s"] = times
        out["trainer_peak_gib"] = torch.cuda.max_memory_allocated() / GIB
    except torch.OutOfMemoryError as exc:
        out["update_error"] = f"OOM: {str(exc)[:200]}"
        return out
    loaded = dataclasses.replace(
        trainer.loaded, model=copy.deepcopy(trainer.model).to(dtype=torch.bfloat16).eval()
    )
    eng = Engine(
        loaded, model_path="long", device="cuda", max_running_requests=SLOTS, context_length=ctx
    )
    eng.start()
    try:
        done: list[dict[str, Any]] = []
        params = SamplingParams(max_new_tokens=256, temperature=1.0, ignore_eos=True)
        t0 = time.perf_counter()
        req = eng.make_request(ids[: ctx - 512], params, done.append)
        eng.submit(req)
        while not done and time.perf_counter() - t0 < 120:
            time.sleep(0.05)
        out["decode_s"] = time.perf_counter() - t0
        out["decode_tokens"] = len(done[0]["output_ids"]) if done else 0
        out["decode_finish"] = done[0]["meta_info"]["finish_reason"] if done else "timeout"
    finally:
        eng.stop()
    out["colocated_peak_gib"] = torch.cuda.max_memory_allocated() / GIB
    out["engine_kv_gib"] = eng.im.kv_bytes() / GIB
    trainer.close()
    del eng, trainer, loaded
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--contexts", type=int, nargs="+", default=[16384, 32768])
    ap.add_argument("--source", default="builtin:olmo3-1b")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu")
    args = ap.parse_args()
    rows = []
    for ctx in args.contexts:
        row = {"plan": plan_estimate(ctx)}
        try:
            row.update(measure(ctx, args.source))
        except Exception as exc:  # record and go on to the next context
            row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        rows.append(row)
        print(json.dumps(row), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_long_context.json").write_text(
        json.dumps({"benchmark": "long_context", "source": args.source, "rows": rows}, indent=2)
    )
    print(
        f"{'ctx':>6} {'update s':>9} {'trainer GiB':>12} {'plan':>6} {'coloc GiB':>10} {'plan':>6}"
    )
    for r in rows:
        p = r["plan"]
        upd = r.get("update_s", [float("nan")])[-1]
        print(
            f"{r.get('context', 0):>6} {upd:>9.2f} {r.get('trainer_peak_gib', float('nan')):>12.1f} "
            f"{p.get('trainer_gib_per_gpu') or float('nan'):>6.1f} "
            f"{r.get('colocated_peak_gib', float('nan')):>10.1f} "
            f"{p.get('colocated_gib_per_gpu') or float('nan'):>6.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
