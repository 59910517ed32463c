"""Host time of the embedded engine's decode bookkeeping per step, CPU, tiny model.

The fused decode step advances its own buffers on the device; what the host does between
replays is serial with the GPU (it waits for the step's tokens, then launches the next).
This measures that host work on its own, at ``--batch`` running requests:

- ``accept``: the per-step transfer of tokens and log-probs and the per-request stop checks;
- ``rebuild``: building the step's buffers from the host (``_build_batch`` + ``load_step``),
  which the engine did on every step where a request finished;
- ``compact``: gathering the survivors' rows on the device instead (``compact_step``), what
  it does now when requests finish and none are admitted (a rollout's tail);
- ``accept_step``: what the overlap schedule does instead of ``accept`` for a step launched
  ahead (its copied-out tokens and log-probs, the check for rows that stopped meanwhile);
  on a GPU this runs while the next step does, so it leaves the step's critical path;
- ``run_ahead``: the check whether the next step may be launched before this one is read.

    .venv/bin/python benchmarks/engine_host.py [--batch 256] [--repeats 300]

Prints a table last and writes JSON to benchmarks/results/engine_host.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _engine(batch: int) -> Any:
    from runtime.engines.embedded.engine import Engine
    from runtime.engines.embedded.sampling import SamplingParams
    from runtime.engines.embedded.tiny import build_tiny

    eng = Engine(
        build_tiny("dense", seed=1),
        model_path="bench",
        max_running_requests=batch,
        context_length=4096,
        fused_sampling=True,
    )
    params = SamplingParams(max_new_tokens=1_000_000, temperature=1.0, ignore_eos=True)
    for i in range(batch):
        req = eng.make_request([1, 2, 3], params, lambda res: None, return_logprob=True)
        req.slot = i
        req.output_ids.append(5)  # as after prefill: one sampled token each
        req.output_logprobs.append(-1.0)
        eng._running.append(req)
    return eng


def _time_us(fn: Callable[[], Any], repeats: int) -> float:
    """Median of five rounds of ``repeats`` calls, microseconds per call."""
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(repeats):
            fn()
        rounds.append((time.perf_counter() - t0) / repeats * 1e6)
    return statistics.median(rounds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=300)
    ap.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "engine_host.json"
    )
    args = ap.parse_args()
    torch.set_num_threads(1)
    eng = _engine(args.batch)
    n = args.batch
    toks = torch.randint(4, 100, (n,))
    lps = torch.randn(n)
    batch = eng._build_batch()
    eng.im.load_step(batch.tokens, batch.positions, batch.counters, batch.sampling)

    def rebuild() -> None:
        b = eng._build_batch()
        eng.im.load_step(b.tokens, b.positions, b.counters, b.sampling)

    def compact() -> None:
        eng.im._live = (n, n)  # the full batch again, then one request gone
        eng.im.compact_step(list(range(1, n)))

    from runtime.engines.embedded.engine import _InFlight

    def accept_step() -> None:
        both = torch.stack([toks.double(), lps.double()])
        eng._accept_step(_InFlight(list(eng._running), both, None))

    eng._batch = batch
    rows = {
        "accept": _time_us(lambda: eng._accept_all(eng._running, toks, lps), args.repeats),
        "accept_step": _time_us(accept_step, args.repeats),
        "run_ahead": _time_us(eng._can_run_ahead, args.repeats),
        "rebuild": _time_us(rebuild, args.repeats),
        "compact": _time_us(compact, args.repeats),
    }
    report = {
        "benchmark": "engine_host",
        "batch": n,
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "us_per_step": rows,
        "rebuild_over_compact": rows["rebuild"] / rows["compact"],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}\n")
    print(f"host work per decode step at {n} running requests (one thread, CPU tensors)")
    print(f"{'work':<10} {'us/step':>9}")
    for name, us in rows.items():
        print(f"{name:<10} {us:>9.1f}")
    print(f"rebuild / compact: {report['rebuild_over_compact']:.1f}x")


if __name__ == "__main__":
    main()
