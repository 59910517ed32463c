"""GRPO update tokens/s through the trainer-rank launcher (one process per GPU).

Compiles ``specs/examples/gpu-dense.toml`` (or ``gpu-moe.toml`` with ``--moe``) with
``trainer.gpus = --gpus`` and ``trainer.expert_parallel = --ep`` (``--kl``: a KL term, so the
frozen reference is sharded and run too), then builds trainer rank 0
exactly as ``runtime.entrypoints.execute`` does (``runtime.trainer.ranks.lead_trainer``: the other ranks
are started by torch elastic and follow rank 0) and times ``train_step`` on the batch of
``benchmarks/trainer_step.py`` (32 samples of 512 + ~1536 tokens, rows of <= 8192 tokens).
World 1 compares with docs/benchmarks.md, GPU round two, section 2 (GRPO
``Trainer.train_step``: 28,786 tokens/s on builtin:olmo3-1b, same batch). Prints one JSON
line; under 3 minutes on one H200:

    python3 benchmarks/gpu/trainer_ranks.py --gpus 1
    python3 benchmarks/gpu/trainer_ranks.py --gpus 2            # FSDP over 2 GPUs
    python3 benchmarks/gpu/trainer_ranks.py --gpus 2 --moe --ep 2

``--gpus 0`` checks the same path on CPU (gloo ranks, ``trainer.cpu_processes``, the tiny
builtin models, a small batch): ``python3 benchmarks/gpu/trainer_ranks.py --gpus 0 --moe --ep 2``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def compile_manifest(spec: Path, sets: list[str], out: Path) -> Path:
    argv = [sys.executable, "-m", "rlc_cli.main", "compile", str(spec), "-o", str(out)]
    for s in sets:
        argv += ["--set", s]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"compile failed: {proc.stderr.strip() or proc.stdout.strip()}")
    found = sorted(out.glob("*/manifest.json"))
    if not found:
        raise SystemExit(f"no manifest under {out}")
    return found[0]


def profile_step(step: Any, top: int, sync: Any) -> dict[str, Any] | None:
    """One step under torch.profiler: the ``top`` ops by self device time (CPU time on a
    CPU run) printed as a table, and the same rows returned for the JSON line."""
    if top <= 0:
        return None
    import torch
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        step()
        sync()
    events = prof.key_averages()

    def self_us(e: Any) -> float:
        if cuda:
            return float(getattr(e, "self_device_time_total", 0.0))
        return float(e.self_cpu_time_total)

    total = sum(self_us(e) for e in events) or 1.0
    rows = sorted(events, key=self_us, reverse=True)[:top]
    print(f"{'op':60} {'self ms':>9} {'share':>6} {'calls':>6}")
    out = []
    for e in rows:
        ms = self_us(e) / 1000
        print(f"{e.key[:60]:60} {ms:9.1f} {self_us(e) / total:6.1%} {e.count:6d}")
        out.append({"op": e.key, "self_ms": round(ms, 2), "calls": e.count})
    return {"clock": "device" if cuda else "cpu", "total_ms": round(total / 1000, 1), "top": out}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--ep", type=int, default=1)
    ap.add_argument("--moe", action="store_true", help="specs/examples/gpu-moe.toml")
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--response-len", type=int, default=1536)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--spec", type=Path, default=None, help="another spec (e.g. a CPU one)")
    ap.add_argument("--set", action="append", default=[], dest="sets", help="more overrides")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--kl", type=float, default=0.0, help="optimizer.kl_coef (reference model)")
    ap.add_argument("--cpu-processes", type=int, default=2, help="ranks with --gpus 0")
    ap.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="after the timed steps, profile one more step and print its N costliest ops",
    )
    args = ap.parse_args()
    if args.gpus == 0:  # the CPU check: tiny models, a batch a 2-core machine trains in seconds
        args.samples, args.prompt_len, args.response_len = 8, 16, 48
        args.steps, args.warmup = 2, 1

    import torch
    from trainer_step import make_samples

    from runtime.manifest import verify
    from runtime.trainer.ranks import lead_trainer

    spec = ROOT / "specs" / "examples" / ("gpu-moe.toml" if args.moe else "gpu-dense.toml")
    sets = [f"trainer.expert_parallel={args.ep}", "trainer.packing_max_tokens=8192"]
    sets.append("trainer.activation_recompute=false")  # as benchmarks/trainer_step.py
    if args.kl:
        sets.append(f"optimizer.kl_coef={args.kl}")
    if args.spec is None and args.gpus == 0:
        model = "builtin:tiny-moe" if args.moe else "builtin:tiny"
        spec = ROOT / "specs" / "examples" / "quickstart.toml"
        sets += [
            f"trainer.cpu_processes={args.cpu_processes}",
            f'model.source="{model}"',
            "trainer.packing_max_tokens=256",
            "output.export_hf=false",  # the builtin MoE has no HF form
        ]
    elif args.spec is None:
        spec_sets = [f"trainer.gpus={args.gpus}", "inference.max_context_length=2560"]
        sets += spec_sets + (['inference.placement="disaggregated"'] if args.gpus > 1 else [])
        if not args.moe:  # the model of docs/benchmarks.md section 1
            sets.append('model.source="builtin:olmo3-1b?vocab_size=100352"')
    else:
        spec = args.spec
    sets += args.sets
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    with tempfile.TemporaryDirectory(prefix="rlc-ranks-") as tmp:
        path = compile_manifest(spec, sets, Path(tmp))
        contract = verify(
            path
        )  # as runtime.entrypoints.execute: once, the follower ranks check the digest
        t0 = time.perf_counter()
        trainer = lead_trainer(contract, path, Path(tmp) / "logs")
        startup_s = time.perf_counter() - t0
        vocab = int(trainer.loaded.config.vocab_size)
        samples = make_samples(args.samples, args.prompt_len, args.response_len, vocab, seed=0)
        tokens = sum(s.num_tokens for s in samples)
        times = []
        try:
            for i in range(args.warmup + args.steps):
                sync()
                t = time.perf_counter()
                trainer.train_step(samples)
                sync()
                if i >= args.warmup:
                    times.append(time.perf_counter() - t)
            profile = profile_step(lambda: trainer.train_step(samples), args.profile, sync)
        finally:
            trainer.close()
    step = statistics.median(times)
    world = trainer.world_size
    print(
        json.dumps(
            {
                "model": contract.config.model.source,
                "world_size": world,
                "expert_parallel": args.ep,
                "kl_coef": args.kl,
                "device": str(trainer.device),
                "tokens_per_step": tokens,
                "step_s": round(step, 4),
                "tokens_per_s": round(tokens / step, 1),
                "tokens_per_s_per_rank": round(tokens / step / world, 1),
                "startup_s": round(startup_s, 1),
                **({"profile": profile} if profile else {}),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
