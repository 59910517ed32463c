"""The embedded engine's radix prefix cache on vs off, CPU, tiny model.

Three workloads, each run through the engine's scheduler in-process (no HTTP), greedy:
``few-shot`` (prompts sharing a long prefix, each ending in its own question, submitted
together through ``--slots`` slots, so later admissions find the prefix in the tree),
``multi-turn`` (one episode whose every turn re-sends the previous sequence plus a tool
output) and ``fresh`` (``--fresh-runs`` batches of ``--fresh-batch`` new random prompts, each
batch submitted together into as many slots: what the tree costs a server whose requests
share nothing, once it is full and evicts on every insert; the small vocabulary makes some
prompts share a first token or two with a cached one). The table gives wall time, prefill time
(including the prefix copies into the slots), the tree's host time (matching, inserting,
evicting, copying), cached / prompt tokens, and whether the tokens equal the uncached run's.

    .venv/bin/python benchmarks/radix_cache.py [--prefix-len 480] [--prompts 16]

Prints a table last and writes JSON to benchmarks/results/radix_cache.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _generate(eng: Any, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    from runtime.engines.embedded.sampling import SamplingParams

    out: list[list[int]] = [[] for _ in prompts]
    left = [len(prompts)]
    done = threading.Event()

    def on_done(i: int) -> Any:
        def f(res: dict[str, Any]) -> None:
            out[i] = res["output_ids"]
            left[0] -= 1
            if not left[0]:
                done.set()

        return f

    params = SamplingParams(max_new_tokens=new_tokens, temperature=0.0, ignore_eos=True)
    for i, p in enumerate(prompts):
        eng.submit(eng.make_request(p, params, on_done(i)))
    if not done.wait(600):
        raise RuntimeError("the engine did not finish")
    return out


def few_shot(eng: Any, args: argparse.Namespace) -> list[list[int]]:
    gen = torch.Generator().manual_seed(0)
    prefix = torch.randint(3, 120, (args.prefix_len,), generator=gen).tolist()
    prompts = [
        prefix + torch.randint(3, 120, (args.suffix_len,), generator=gen).tolist()
        for _ in range(args.prompts)
    ]
    return _generate(eng, prompts, args.new_tokens)


def multi_turn(eng: Any, args: argparse.Namespace) -> list[list[int]]:
    gen = torch.Generator().manual_seed(1)
    seq = torch.randint(3, 120, (args.prefix_len,), generator=gen).tolist()
    outs = []
    for _ in range(args.turns):
        out = _generate(eng, [seq], args.new_tokens)[0]
        outs.append(out)
        seq = seq + out + torch.randint(3, 120, (args.suffix_len,), generator=gen).tolist()
    return outs


def fresh(eng: Any, args: argparse.Namespace) -> list[list[int]]:
    gen = torch.Generator().manual_seed(3)
    outs: list[list[int]] = []
    for _ in range(args.fresh_runs):
        prompts = torch.randint(3, 120, (args.fresh_batch, args.fresh_len), generator=gen)
        outs += _generate(eng, prompts.tolist(), args.new_tokens)
    return outs


WORKLOADS = {"few-shot": few_shot, "multi-turn": multi_turn, "fresh": fresh}


def run(workload: str, radix: bool, loaded: Any, args: argparse.Namespace) -> dict[str, Any]:
    from runtime.engines.embedded.engine import Engine

    slots, context = args.slots, args.context
    if workload == "fresh":
        slots, context = args.fresh_batch, args.fresh_len + args.new_tokens + 8
    eng = Engine(
        loaded,
        model_path="tiny",
        max_running_requests=slots,
        context_length=context,
        radix_cache=radix,
    )
    eng.start()
    try:
        t0 = time.perf_counter()
        tokens = WORKLOADS[workload](eng, args)
        wall = time.perf_counter() - t0
    finally:
        eng.stop()
    prompt = eng.stats["num_prompt_tokens"]
    return {
        "workload": workload,
        "radix_cache": radix,
        "wall_s": round(wall, 3),
        "prefill_s": round(eng.timings["prefill_s"], 3),
        "tree_s": round(eng.timings["prefix_cache_s"], 3),
        "prompt_tokens": prompt,
        "cached_tokens": eng.stats["num_cached_prompt_tokens"],
        "hit_rate": round(eng.stats["num_cached_prompt_tokens"] / max(1, prompt), 3),
        "tokens": tokens,
    }


def copy_vs_prefill(loaded: Any, args: argparse.Namespace, reps: int = 5) -> dict[str, float]:
    """Milliseconds to copy a cached prefix's K/V into a slot vs to prefill it."""
    from runtime.engines.embedded.forward import InferenceModel

    im = InferenceModel(loaded.model, max_slots=2, capacity=args.context)
    ids = torch.randint(3, 120, (args.prefix_len,), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        im.prefill_batch([ids.tolist()], [0])
        kv = im.read_kv(0, 0, args.prefix_len)
        t0 = time.perf_counter()
        for _ in range(reps):
            im.write_kv(1, 0, kv)
        t1 = time.perf_counter()
        for _ in range(reps):
            im.prefill_batch([ids.tolist()], [1])
        t2 = time.perf_counter()
    return {
        "tokens": args.prefix_len,
        "copy_ms": round((t1 - t0) / reps * 1e3, 3),
        "prefill_ms": round((t2 - t1) / reps * 1e3, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prefix-len", type=int, default=480)
    ap.add_argument("--suffix-len", type=int, default=24)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--new-tokens", type=int, default=8)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--fresh-runs", type=int, default=6)
    ap.add_argument("--fresh-batch", type=int, default=64)
    ap.add_argument("--fresh-len", type=int, default=64)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "radix_cache.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from runtime.engines.embedded.tiny import build_tiny

    loaded = build_tiny("dense", seed=0, d_model=128, n_layers=4, n_heads=4, window=None)
    rows = []
    for workload in WORKLOADS:
        off = run(workload, False, loaded, args)
        on = run(workload, True, loaded, args)
        on["same_tokens"] = on["tokens"] == off["tokens"]
        on["speedup"] = round(off["wall_s"] / on["wall_s"], 2)
        off["same_tokens"], off["speedup"] = True, 1.0
        rows += [off, on]
    header = (
        "| workload | radix cache | wall s | prefill s | tree s | cached / prompt tokens "
        "| same tokens | speedup |"
    )
    lines = [header, "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['workload']} | {'on' if r['radix_cache'] else 'off'} | {r['wall_s']:.2f} "
            f"| {r['prefill_s']:.2f} | {r['tree_s']:.3f} "
            f"| {r['cached_tokens']} / {r['prompt_tokens']} "
            f"({r['hit_rate']:.0%}) | {'yes' if r['same_tokens'] else 'NO'} | "
            f"{r['speedup']:.2f}x |"
        )
    copy = copy_vs_prefill(loaded, args)
    lines.append(
        f"\nprefix of {copy['tokens']} tokens: copy into a slot {copy['copy_ms']:.2f} ms, "
        f"prefill {copy['prefill_ms']:.2f} ms"
    )
    result = {
        "args": {k: v for k, v in vars(args).items() if k != "out"},
        "copy_vs_prefill": copy,
        "machine": {"platform": platform.platform(), "torch": torch.__version__},
        "rows": [{k: v for k, v in r.items() if k != "tokens"} for r in rows],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
