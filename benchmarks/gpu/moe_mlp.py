"""The expert MLP alone: OLMo-core's dropless MLP on torch's grouped matrix product vs
OLMo-core's capacity MLP (padded batched products at capacity factor E/top_k, which drops nothing: every
expert padded to the row's token count)
vs the dropless MLP's Python loop over experts; forward + backward, bf16, same routed tokens.

    python3 benchmarks/gpu/moe_mlp.py --tokens 8192 --experts 32 --top-k 4 --d-model 768
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from olmo_core.nn.moe.mlp import DroplessMoEMLP, MoEMLP

from runtime.models.moe_grouped import grouped_expert_matmul


def _time(fn, steps: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--experts", type=int, default=32)
    ap.add_argument("--top-k", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    dev, dt = torch.device("cuda"), torch.bfloat16
    e, d, h = args.experts, args.d_model, args.hidden
    torch.manual_seed(0)
    assign = torch.randint(0, e, (args.tokens * args.top_k,), device=dev)
    sizes = torch.bincount(assign, minlength=e)
    rows = int(sizes.sum())
    # capacity factor E/top_k: every expert padded to (tokens x top_k / E) x E/top_k = tokens
    capacity = args.tokens
    kw = dict(d_model=d, hidden_size=h, num_experts=e, dtype=dt, init_device="cuda")
    dropless, padded = DroplessMoEMLP(**kw), MoEMLP(**kw)
    x = torch.randn(rows, d, device=dev, dtype=dt, requires_grad=True)
    xp = torch.randn(e, capacity, d, device=dev, dtype=dt, requires_grad=True)

    def run_dropless() -> None:
        dropless.zero_grad(set_to_none=True)
        dropless(x, sizes).float().square().mean().backward()

    def run_padded() -> None:
        padded.zero_grad(set_to_none=True)
        padded(xp).float().square().mean().backward()

    loop_s = _time(run_dropless, max(args.steps // 2, 2), 1)
    dropless.gmm = torch.compiler.disable(grouped_expert_matmul)  # type: ignore[method-assign]
    grouped_s = _time(run_dropless, args.steps, args.warmup)
    padded_s = _time(run_padded, args.steps, args.warmup)
    flops = 3 * 2 * 3 * rows * d * h  # three products, forward + two backward
    report = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "routed_rows": rows,
        "capacity_rows": e * capacity,
        "grouped_mm_s": round(grouped_s, 5),
        "capacity_bmm_s": round(padded_s, 5),
        "python_loop_s": round(loop_s, 5),
        "grouped_tflops": round(flops / grouped_s / 1e12, 1),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
