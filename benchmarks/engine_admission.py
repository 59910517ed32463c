"""What admitting a GRPO collection costs the embedded engine: host work and rounds.

Two measurements of ``--prompts`` distinct prompts x ``--group`` samples each:

- ``admission``: one admission round run on this thread under ``torch.profiler``: the
  aten operators it dispatches (each a kernel launch or a view on a GPU), its copies,
  host seconds, and of them the seconds spent waiting for the device's first tokens.
  On a GPU the host side of an eager prefill is what the device waits on.
- ``http``: whole collections sent as the runtime sends them, one HTTP request per group
  from a client thread pool to the engine's real server on loopback, with the scheduler's
  admission gathering on (the default) and off: admission rounds, prefill seconds, wall.

    .venv/bin/python benchmarks/engine_admission.py [--device cuda] [--source builtin:olmo3-1b]

Prints a table last and writes JSON to benchmarks/results/engine_admission.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import platform
import random
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _prompts(vocab: int, args: argparse.Namespace, rng: random.Random) -> list[list[int]]:
    """Distinct prompts sharing a short common head (a chat template's), ragged lengths."""
    head = [rng.randrange(3, vocab) for _ in range(20)]
    lo = args.prompt_len - 30
    return [
        head + [rng.randrange(3, vocab) for _ in range(rng.randrange(lo, args.prompt_len - 20))]
        for _ in range(args.prompts)
    ]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def admission(loaded: Any, args: argparse.Namespace) -> dict[str, Any]:
    """One admission of the whole collection on this thread, profiled (the second of two)."""
    from torch.profiler import ProfilerActivity, profile

    from runtime.engines.embedded.engine import Engine
    from runtime.engines.embedded.sampling import SamplingParams

    rng = random.Random(0)
    vocab = int(loaded.model.embeddings.weight.shape[0])
    eng = Engine(
        loaded,
        model_path="bench",
        device=args.device,
        max_running_requests=args.prompts * args.group,
        context_length=args.prompt_len + args.new_tokens + 8,
        cuda_graph=False,
        compile_decode=False,
        admission_quiet_s=0.0,  # the whole collection is queued before the round
        admission_window_s=0.0,
    )
    params = SamplingParams(
        max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, ignore_eos=True
    )
    out: dict[str, Any] = {}
    for rep in range(2):
        prompts = _prompts(vocab, args, rng)
        reqs = [
            eng.make_request(p, params, lambda r: None, return_logprob=True)
            for p in prompts
            for _ in range(args.group)
        ]
        eng.submit_many(reqs)
        t0 = dict(eng.timings)
        _sync(args.device)
        # the scheduler's own calls, on this thread (as its loop runs them, without grad)
        with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
            start = time.perf_counter()
            eng._admit()
            host_s = time.perf_counter() - start
        ops = collections.Counter(e.name for e in prof.events() if e.name.startswith("aten::"))
        with torch.no_grad():
            while eng._running or eng._inflight is not None:  # finish them; free the slots
                eng._decode_step()
        eng._flush_prefix()
        if rep:
            out = {
                "requests": len(reqs),
                "aten_ops": sum(ops.values()),
                "copies": ops["aten::copy_"] + ops["aten::index_copy_"] + ops["aten::clone"],
                "admission_s": host_s,
                "prefill_s": eng.timings["prefill_s"] - t0["prefill_s"],
                "prefill_wait_s": eng.timings["prefill_wait_s"] - t0["prefill_wait_s"],
                "top_ops": dict(ops.most_common(6)),
            }
    return out


def http(loaded: Any, args: argparse.Namespace, gather: bool) -> dict[str, Any]:
    """``--collections`` collections over HTTP, one request per group, as the runtime's
    client sends them; the first is a warm-up."""
    from runtime.engines.client import EngineClient
    from runtime.engines.embedded.inprocess import InProcessServer

    rng = random.Random(1)
    vocab = int(loaded.model.embeddings.weight.shape[0])
    window = {} if gather else {"admission_quiet_s": 0.0, "admission_window_s": 0.0}
    sampling = {
        "max_new_tokens": args.new_tokens,
        "min_new_tokens": args.new_tokens,
        "temperature": 1.0,
        "ignore_eos": True,
    }
    rows = []
    with InProcessServer(
        loaded,
        device=args.device,
        max_running_requests=args.prompts * args.group,
        context_length=args.prompt_len + args.new_tokens + 8,
        cuda_graph=False,  # admission is the subject: no decode compile or capture
        compile_decode=False,
        **window,
    ) as srv:
        client, eng = EngineClient(srv.url), srv.engine
        for c in range(args.collections + 1):
            prompts = _prompts(vocab, args, rng)
            a0, t0 = eng.stats["num_admissions"], dict(eng.timings)
            start = time.perf_counter()
            client.generate_groups(prompts, args.group, sampling)
            wall = time.perf_counter() - start
            if c:
                rows.append(
                    {
                        "admissions": eng.stats["num_admissions"] - a0,
                        "prefill_s": eng.timings["prefill_s"] - t0["prefill_s"],
                        "wall_s": wall,
                    }
                )
    return {
        "gather": gather,
        "collections": rows,
        "admissions": [r["admissions"] for r in rows],
        "prefill_s": sum(r["prefill_s"] for r in rows) / len(rows),
        "wall_s": sum(r["wall_s"] for r in rows) / len(rows),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default="builtin:tiny?n_layers=16")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=244, help="longest prompt (tokens)")
    ap.add_argument("--new-tokens", type=int, default=8)
    ap.add_argument("--collections", type=int, default=4)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    from runtime.models.loader import load_model

    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    loaded = load_model(args.source, device=args.device, dtype=dtype)
    loaded.model.eval()
    adm = admission(loaded, args)
    runs = [http(loaded, args, gather) for gather in (True, False)]
    report = {
        "benchmark": "engine_admission",
        "source": args.source,
        "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
        "host": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "shape": f"{args.prompts}x{args.group}, prompts <= {args.prompt_len} tokens",
        "admission": adm,
        "http": runs,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "engine_admission.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"\n{report['shape']}, {args.source} on {report['device']}")
    print("| one admission | aten ops | copies | host s | waiting for the device s |")
    print("|---|---|---|---|---|")
    print(
        f"| {adm['requests']} requests | {adm['aten_ops']} | {adm['copies']} | "
        f"{adm['admission_s']:.3f} | {adm['prefill_wait_s']:.3f} |"
    )
    print("\n| over HTTP | admission rounds per collection | prefill s | collection wall s |")
    print("|---|---|---|---|")
    for r in runs:
        name = "gathering on" if r["gather"] else "gathering off"
        rounds = ", ".join(map(str, r["admissions"]))
        print(f"| {name} | {rounds} | {r['prefill_s']:.3f} | {r['wall_s']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
