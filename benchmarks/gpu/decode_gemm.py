"""GPU decode matrix products alone: cuBLAS (what the compiled decode step calls by default)
against Inductor's autotuned choice (``max_autotune_gemm``: Triton templates timed against
cuBLAS at the call's own row count).

A decode step at batch ``B`` multiplies ``B`` rows by each weight once, so its products
are bound by reading the weights: at batch 64 on one NVIDIA H100 they took 1.22 ms a
step against 0.85 ms to read the weights once at the measured copy rate (round
fourteen's kernel profile). This times each product of a block (fused q/k/v, the output
projection, fused gate/up, the down projection) and the LM head alone, at each batch
size, over rotating weight copies (more bytes than the L2 cache holds, as sixteen layers
are), in a CUDA graph of back-to-back calls (as the engine replays them); the rate counts
the weight bytes each call reads.

    python benchmarks/gpu/decode_gemm.py --batch-sizes 64 256
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from decode import copy_rate  # noqa: E402
from decode_attention import graph_time_us  # noqa: E402

ROTATE_BYTES = 256 << 20  # each timed graph reads at least this many weight bytes


def products(args: argparse.Namespace) -> list[tuple[str, int, int]]:
    """(name, out features, in features) of a block's products and the LM head, the
    engine's fused layout."""
    q = args.heads * args.head_dim
    kv = args.kv_heads * args.head_dim
    return [
        ("qkv", q + 2 * kv, args.hidden),
        ("o", args.hidden, q),
        ("gate_up", 2 * args.ffn, args.hidden),
        ("down", args.hidden, args.ffn),
        ("head", args.vocab, args.hidden),
    ]


def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.linear(x, w)


def kernels_of(fn: Any) -> list[str]:
    """The CUDA kernels one call launches, by name."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})


def time_product(
    name: str, n: int, k: int, bsz: int, impl: str, args: argparse.Namespace
) -> dict[str, Any]:
    dev, dtype = "cuda", torch.bfloat16
    wbytes = n * k * 2
    copies = max(2, -(-ROTATE_BYTES // wbytes))
    weights = [torch.randn(n, k, device=dev, dtype=dtype) * 0.02 for _ in range(copies)]
    x = torch.randn(bsz, k, device=dev, dtype=dtype)
    fn: Any = linear
    t0 = time.perf_counter()
    if impl == "autotune":
        torch._dynamo.reset()  # each shape compiles afresh (no recompile limit reached)
        fn = torch.compile(linear, dynamic=False, options={"max_autotune_gemm": True})
    ref = F.linear(x, weights[0]).float()
    got = fn(x, weights[0]).float()
    torch.cuda.synchronize()
    compile_s = time.perf_counter() - t0
    err = float((got - ref).abs().max())
    it = iter(range(1 << 62))

    def call() -> torch.Tensor:
        return fn(x, weights[next(it) % copies])

    us = graph_time_us(call, copies * args.rounds, args.repeats)
    names = kernels_of(lambda: fn(x, weights[0]))
    weights.clear()
    torch.cuda.empty_cache()
    return {
        "product": name,
        "batch": bsz,
        "impl": impl,
        "out_features": n,
        "in_features": k,
        "weight_bytes": wbytes,
        "us": us,
        "tb_s": wbytes / (us * 1e-6) / 1e12,
        "compile_s": compile_s,
        "max_abs_diff": err,
        "kernels": names,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 256])
    ap.add_argument(
        "--impls", nargs="+", default=["aten", "autotune"], choices=["aten", "autotune"]
    )
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--ffn", type=int, default=8192)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=16)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=100352)
    ap.add_argument("--layers", type=int, default=16, help="blocks a step runs (the sums)")
    ap.add_argument("--rounds", type=int, default=4, help="passes over the copies per graph")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=None, help="directory for decode_gemm.json")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("decode_gemm: needs a CUDA GPU", file=sys.stderr)
        return 2
    rate = copy_rate()
    rows = [
        time_product(name, n, k, bsz, impl, args)
        for bsz in args.batch_sizes
        for name, n, k in products(args)
        for impl in args.impls
    ]
    print(f"copy rate {rate / 1e12:.2f} TB/s, {torch.cuda.get_device_name()}")
    print(f"{'batch':>5} {'product':<8} {'impl':<9} {'us':>8} {'TB/s':>6} {'% copy':>7}  kernels")
    for r in rows:
        r["fraction_of_copy_rate"] = r["tb_s"] * 1e12 / rate
        print(
            f"{r['batch']:>5} {r['product']:<8} {r['impl']:<9} {r['us']:>8.1f} {r['tb_s']:>6.2f} "
            f"{100 * r['fraction_of_copy_rate']:>6.1f}%  {', '.join(r['kernels'])[:90]}"
        )
    # a decode step's products: every block's four, then the head
    steps = {}
    for bsz in args.batch_sizes:
        for impl in args.impls:
            us = {r["product"]: r["us"] for r in rows if r["batch"] == bsz and r["impl"] == impl}
            step = args.layers * sum(v for p, v in us.items() if p != "head") + us["head"]
            steps[f"{bsz}/{impl}"] = step / 1e3
            print(f"batch {bsz} {impl}: {step / 1e3:.3f} ms of products a step")
    payload = {
        "benchmark": "decode_gemm",
        "device_name": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "copy_rate": rate,
        "rows": rows,
        "step_ms": steps,
        "time": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "decode_gemm.json").write_text(json.dumps(payload, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
