"""Long context on the 1B model: a GRPO update and decode at 16K/32K, peak memory vs plan.

For each context C: ``rlc plan`` of ``specs/examples/gpu-dense.toml`` with C-token contexts
(1K prompt, C-1K response, packing over C, recompute on, 8 engine slots, a pool of 8 x C)
prints the memory estimate; then, in one process on the GPU (the colocated placement),
``Trainer.train_step`` (fp32 master + bf16 autocast, FlexAttention, activation recompute)
runs on one sample of 1K prompt + (C-1K) response tokens, and the embedded engine (bf16,
8 slots x C) is built from the trainer's weights; with its KV cache resident one more
GRPO step runs, then it prefills a (C-512)-token prompt and decodes 256 tokens. Peaks are
``torch.cuda.max_memory_allocated``: the trainer's alone (steps 1-2), and trainer +
engine together (step 3 and the decode), compared with the plan's trainer and colocated
estimates.

    python3 benchmarks/gpu/long_context.py --contexts 16384 32768
    python3 benchmarks/gpu/long_context.py --dry-run    # CPU smoke: tiny model, 512 tokens

The engine decodes eagerly here (no compile, no graphs): what is measured is memory, and
the compile + capture of a 32K-row cache would take most of the stage. Issue 16's target:
the estimate within 15% of the measured peak.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
GIB = 1024**3
SLOTS = 8


def prompt_len(ctx: int) -> int:
    return min(1024, ctx // 4)


def plan_estimate(ctx: int, source: str) -> dict[str, Any]:
    sets = {
        "model.source": json.dumps(source),
        "inference.max_context_length": ctx,
        "inference.max_response_length": ctx - prompt_len(ctx),
        "inference.max_prompt_length": prompt_len(ctx),
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


def _peak() -> float | None:
    return torch.cuda.max_memory_allocated() / GIB if torch.cuda.is_available() else None


def measure(ctx: int, source: str, device: str) -> dict[str, Any]:
    from runtime.engines.embedded.engine import Engine
    from runtime.engines.embedded.sampling import SamplingParams
    from runtime.models import load_model
    from runtime.trainer import Sample, Trainer, TrainerConfig

    cuda = device == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    out: dict[str, Any] = {"context": ctx}
    trainer = Trainer(
        TrainerConfig(
            model_source=source,
            device=device,
            packing_max_tokens=ctx,
            activation_recompute=True,
            attention_backend="flex" if cuda else "sdpa",
        )
    )
    g = torch.Generator().manual_seed(ctx)
    vocab = int(trainer.model.embeddings.weight.shape[0])
    ids = torch.randint(10, min(50000, vocab), (ctx,), generator=g).tolist()
    p = prompt_len(ctx)
    sample = Sample(ids[:p], ids[p:], advantage=1.0, rollout_logprobs=[-1.0] * (ctx - p))
    try:
        times = []
        for _ in range(2):
            t0 = time.perf_counter()
            trainer.train_step([sample])
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        out["update_s"] = times
        out["trainer_peak_gib"] = _peak()
    except torch.OutOfMemoryError as exc:
        out["update_error"] = f"OOM: {str(exc)[:200]}"
        return out
    # the trainer's modules carry activation-checkpoint wrappers, which the engine does not
    # take: a plain model of the same source gets the trainer's current weights
    dtype = torch.bfloat16 if cuda else torch.float32
    loaded = load_model(source, device=device, dtype=dtype)
    loaded.model.load_state_dict(trainer.state_dict_for_publication(dtype=dtype, device=device))
    loaded.model.eval()
    eng = Engine(
        loaded,
        model_path="long",
        device=device,
        max_running_requests=SLOTS,
        context_length=ctx,
        cuda_graph=False,
        compile_decode=False,
    )
    eng.start()
    try:
        # colocated: a GRPO step while the engine's weights and KV cache are resident (the
        # order of a colocated run), then decode
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        trainer.train_step([sample])
        if cuda:
            torch.cuda.synchronize()
        out["colocated_update_s"] = time.perf_counter() - t0
        out["colocated_update_peak_gib"] = _peak()
        done: list[dict[str, Any]] = []
        new = min(256, ctx // 8)
        params = SamplingParams(max_new_tokens=new, temperature=1.0, ignore_eos=True)
        t0 = time.perf_counter()
        req = eng.make_request(ids[: ctx - 2 * new], params, done.append)
        eng.submit(req)
        while not done and time.perf_counter() - t0 < 120:
            time.sleep(0.05)
        out["decode_s"] = time.perf_counter() - t0
        out["decode_tokens"] = len(done[0]["output_ids"]) if done else 0
        out["decode_finish"] = done[0]["meta_info"]["finish_reason"] if done else "timeout"
    finally:
        eng.stop()
    out["colocated_peak_gib"] = _peak()
    out["engine_kv_gib"] = eng.im.kv_bytes() / GIB
    trainer.close()
    del eng, trainer, loaded
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--contexts", type=int, nargs="+", default=[16384, 32768])
    ap.add_argument("--source", default="builtin:olmo3-1b")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dry-run", action="store_true", help="CPU smoke: tiny model, 512 tokens")
    args = ap.parse_args(argv)
    if args.dry_run:
        args.contexts, args.source, args.device = [512], "builtin:tiny", "cpu"
        args.out = Path(tempfile.mkdtemp(prefix="rlc-long-dry-"))
    rows = []
    for ctx in args.contexts:
        row = {"plan": plan_estimate(ctx, args.source)}
        try:
            row.update(measure(ctx, args.source, args.device))
        except Exception as exc:  # record and go on to the next context
            row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        rows.append(row)
        print(json.dumps(row), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    name = "-".join(str(c) for c in args.contexts)
    (args.out / f"gpu_long_context-{name}.json").write_text(
        json.dumps({"benchmark": "long_context", "source": args.source, "rows": rows}, indent=2)
    )
    nan = float("nan")
    print(
        f"{'ctx':>6} {'update s':>9} {'part':<10} {'measured GiB':>13} {'plan GiB':>9} {'ratio':>6}"
    )
    for r in rows:
        p = r["plan"]
        upd = (r.get("update_s") or [nan])[-1]
        for part, got, est in (
            ("trainer", r.get("trainer_peak_gib"), p.get("trainer_gib_per_gpu")),
            ("colocated", r.get("colocated_peak_gib"), p.get("colocated_gib_per_gpu")),
        ):
            ratio = est / got if got and est else nan
            flag = "" if ratio != ratio else (" ok" if abs(ratio - 1) <= 0.15 else " >15%")
            print(
                f"{r.get('context', 0):>6} {upd:>9.2f} {part:<10} {got or nan:>13.1f} "
                f"{est or nan:>9.1f} {ratio:>6.2f}{flag}"
            )
        print(
            f"       plan parts: trainer {p.get('trainer_parts_gib')}, engine {p.get('engine_parts_gib')}"
        )
        if "error" in r or "update_error" in r:
            print(f"       error: {r.get('error') or r.get('update_error')}")
    if args.dry_run:
        shutil.rmtree(args.out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
