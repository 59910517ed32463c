"""Admission rounds of the embedded engine for one GRPO collection, by how it is submitted.

A collection's requests arrive as a burst while the scheduler thread runs. Queued one by
one, the burst trickles in between the scheduler's steps, and every few requests cost an
admission round of their own: the step in flight is drained, the new prompts prefilled in
a forward of their own, the first tokens read back. ``Engine.submit_many`` queues a group
(what the server does with a request's ``n`` samples) or a whole batch at once.

Three ways to submit ``--prompts`` groups of ``--group`` samples (``--prompt-len``-token
prompts, ``--new-tokens`` tokens each, EOS ignored), each on a fresh engine:

- ``one``: every sample on its own ``submit`` (as the GPU e2e benchmark did before);
- ``group``: one ``submit_many`` per group (the server's path for a group request);
- ``all``: the collection in one ``submit_many``.

Reports admission rounds, prefill seconds and the collection's wall time (CPU; the
rounds, not the seconds, carry over to a GPU).

    .venv/bin/python benchmarks/engine_admission.py [--prompts 16 --group 8]

Prints a table last and writes JSON to benchmarks/results/engine_admission.json.
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

MODES = ("one", "group", "all")


def collect(loaded: Any, args: argparse.Namespace, mode: str) -> dict[str, float]:
    from runtime.engines.embedded.engine import Engine
    from runtime.engines.embedded.sampling import SamplingParams

    n = args.prompts * args.group
    eng = Engine(
        loaded,
        model_path="bench",
        max_running_requests=n,
        context_length=args.prompt_len + args.new_tokens + 8,
    )
    eng.start()
    try:
        gen = torch.Generator().manual_seed(0)
        prompts = [
            torch.randint(1, 200, (args.prompt_len,), generator=gen).tolist()
            for _ in range(args.prompts)
        ]
        params = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0, ignore_eos=True)
        done = threading.Event()
        left = [n]
        lock = threading.Lock()

        def cb(_res: dict[str, Any]) -> None:
            with lock:
                left[0] -= 1
                if left[0] == 0:
                    done.set()

        t0 = time.perf_counter()
        if mode == "one":  # each request made and queued in turn, as a client loop does
            for p in prompts:
                for _ in range(args.group):
                    eng.submit(eng.make_request(p, params, cb))
        else:
            groups = [[eng.make_request(p, params, cb) for _ in range(args.group)] for p in prompts]
            if mode == "group":
                for g in groups:
                    eng.submit_many(g)
            else:
                eng.submit_many([r for g in groups for r in g])
        if not done.wait(600):
            raise TimeoutError("the engine did not finish")
        wall = time.perf_counter() - t0
        return {
            "admissions": float(eng.stats["num_admissions"]),
            "decode_steps": float(eng.stats["num_decode_steps"]),
            "prefill_s": eng.timings["prefill_s"],
            "wall_s": wall,
        }
    finally:
        eng.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default="builtin:tiny")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=200)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/engine_admission.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    from runtime.models import load_model

    loaded = load_model(args.source, device="cpu", dtype=torch.float32)
    rows: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    for _ in range(args.repeats):
        for mode in MODES:
            rows[mode].append(collect(loaded, args, mode))
            print(mode, rows[mode][-1], flush=True)
    report = {
        "benchmark": "engine_admission",
        "source": args.source,
        "prompts": args.prompts,
        "group": args.group,
        "prompt_len": args.prompt_len,
        "new_tokens": args.new_tokens,
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "runs": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}\n")
    print(
        f"{args.prompts} groups x {args.group} samples, {args.prompt_len}-token prompts, "
        f"{args.new_tokens} new tokens ({args.source}, CPU, median of {args.repeats})"
    )
    print(f"{'submission':<11} {'admissions':>10} {'prefill s':>10} {'wall s':>8}")
    for mode in MODES:
        runs = sorted(rows[mode], key=lambda r: r["wall_s"])
        mid = runs[len(runs) // 2]
        print(
            f"{mode:<11} {mid['admissions']:>10.0f} {mid['prefill_s']:>10.3f} {mid['wall_s']:>8.3f}"
        )


if __name__ == "__main__":
    main()
