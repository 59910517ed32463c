"""The publication audit's device checksum: the Triton kernel against the torch ops.

Every tensor publication ends with an audit: the trainer's weights, cast to the engine's
dtype, and the engine's own are each reduced to ``wsum64`` digests that must agree. This
times ``device_checksum`` over a model's parameter shapes, on the GPU, for both sides of an
audit (the trainer's fp32 weights cast to bf16, and the engine's bf16 weights), through the
Triton kernel (the default on a GPU) and through the torch ops (the CPU's path), and checks
that both give one digest.

    python benchmarks/gpu/checksum.py --source "builtin:olmo3-1b?vocab_size=100352"
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def parameter_shapes(source: str) -> dict[str, tuple[int, ...]]:
    """The builtin model's parameter names and shapes, built on the meta device."""
    from runtime.models.builtin import builtin_config

    _, config = builtin_config(source.removeprefix("builtin:"), tokenizer_vocab=0, seed=0)
    model = config.build(init_device="meta")
    return {n: tuple(p.shape) for n, p in model.named_parameters()}


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--source", default="builtin:olmo3-1b?vocab_size=100352")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu")
    args = ap.parse_args()

    from runtime.publication import checksum

    device = torch.device("cuda")
    shapes = parameter_shapes(args.source)
    g = torch.Generator(device=device).manual_seed(0)
    trainer = {n: torch.randn(s, device=device, generator=g) for n, s in shapes.items()}
    engine = {n: t.to(torch.bfloat16) for n, t in trainer.items()}
    params = sum(t.numel() for t in trainer.values())

    kernel = checksum._kernel

    def timed(state: dict[str, torch.Tensor], dtype: Any, use_kernel: bool) -> tuple[float, str]:
        checksum._kernel = kernel if use_kernel else (lambda: None)  # type: ignore[assignment]
        try:
            times, digest = [], ""
            for _ in range(args.repeats + 1):  # the first warms the kernel and the ramps
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                digest = checksum.device_checksum(state, dtype=dtype)
                times.append(time.perf_counter() - t0)
            return statistics.median(times[1:]), digest
        finally:
            checksum._kernel = kernel  # type: ignore[assignment]

    rows = []
    for side, state, dtype in (
        ("trainer fp32 -> bf16", trainer, torch.bfloat16),
        ("engine bf16", engine, None),
    ):
        kernel_s, kernel_digest = timed(state, dtype, True)
        torch_s, torch_digest = timed(state, dtype, False)
        read = sum(t.numel() * t.element_size() for t in state.values())
        rows.append(
            {
                "side": side,
                "tensors": len(state),
                "bytes_read": read,
                "kernel_s": kernel_s,
                "torch_s": torch_s,
                "speedup": torch_s / kernel_s,
                "kernel_gb_s": read / kernel_s / 1e9,
                "same_digest": kernel_digest == torch_digest,
            }
        )
    print(
        f"{args.source}: {params / 1e9:.3f}B parameters, {len(shapes)} tensors, "
        f"{torch.cuda.get_device_name()}"
    )
    print(f"{'side':<22}{'kernel s':>10}{'torch s':>10}{'speed-up':>10}{'GB/s read':>11}  same")
    for r in rows:
        print(
            f"{r['side']:<22}{r['kernel_s']:>10.4f}{r['torch_s']:>10.4f}{r['speedup']:>9.1f}x"
            f"{r['kernel_gb_s']:>11.0f}  {r['same_digest']}"
        )
    report = {
        "benchmark": "gpu_checksum",
        "source": args.source,
        "device_name": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "parameters": params,
        "repeats": args.repeats,
        "rows": rows,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_checksum.json").write_text(json.dumps(report, indent=1))
    return 0 if all(r["same_digest"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
