"""What the engine's eager prefill moves besides its matrix products, counted on the CPU.

The engine's prefill forward runs eagerly (its shapes change with every admission), so each
norm, RoPE rotation, residual add and activation is its own kernel that reads and writes
whole activations. This counts, under a dispatch mode, the matrix-product FLOPs and the bytes
every other op reads and writes in ``InferenceModel.prefill_batch``. The model is the
benchmark model (``builtin:olmo3-1b``, 100,352-token vocabulary) at one and two layers, in
bf16, over ``--rows`` prompts of ``--prompt-len`` tokens. It is scaled to ``--batch`` prompts
and all 16 layers. The figures are counts, not timings: divided by a GPU's matrix rate and
copy rate, they bound what a fused (compiled) prefill could save.

    .venv/bin/python benchmarks/prefill_traffic.py [--batch 64] [--prompt-len 128]

Prints a table last and writes JSON to benchmarks/results/prefill_traffic.json.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from results_file import write_results  # noqa: E402

# ops that move no data (views) and the RoPE tables' one-time build and comparison
FREE = (
    "aten::view",
    "aten::_unsafe_view",
    "aten::t",
    "aten::transpose",
    "aten::expand",
    "aten::slice",
    "aten::select",
    "aten::unsqueeze",
    "aten::permute",
    "aten::as_strided",
    "aten::detach",
    "aten::alias",
    "aten::split",
    "aten::unbind",
    "aten::equal",
    "aten::sin",
    "aten::cos",
)


def _bytes(x: Any) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_bytes(y) for y in x)
    return 0


class Traffic(TorchDispatchMode):
    """Matrix FLOPs, and bytes in + out of every other op, by op."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0
        self.bytes: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = func._schema.name
        if name == "aten::linear":
            x, w = args[0], args[1]
            self.flops += 2 * x.numel() * w.shape[0]
        elif name in ("aten::mm", "aten::addmm"):
            a, b = (args[0], args[1]) if name == "aten::mm" else (args[1], args[2])
            self.flops += 2 * a.shape[0] * a.shape[1] * b.shape[1]
        elif name == "aten::embedding":  # reads the rows it gathers, not the table
            self.bytes[name] += 2 * _bytes(out)
            self.calls[name] += 1
        elif not name.startswith(FREE):
            self.bytes[name] += _bytes(list(args)) + _bytes(list((kwargs or {}).values()))
            self.bytes[name] += _bytes(out)
            self.calls[name] += 1
        return out


def count(layers: int, rows: int, prompt_len: int) -> Traffic:
    from runtime.engines.embedded.forward import InferenceModel
    from runtime.models import load_model

    loaded = load_model(
        f"builtin:olmo3-1b?vocab_size=100352&n_layers={layers}", dtype=torch.bfloat16
    )
    im = InferenceModel(loaded.model, max_slots=rows, capacity=prompt_len + 8)
    gen = torch.Generator().manual_seed(0)
    seqs = torch.randint(1, 100_000, (rows, prompt_len), generator=gen).tolist()
    mode = Traffic()
    with torch.no_grad(), mode:
        im.prefill_batch(seqs, list(range(rows)))
    return mode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--rows", type=int, default=8, help="prompts actually run (then scaled)")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--matrix-tflops", type=float, default=660.0, help="for the ms columns")
    ap.add_argument("--copy-tbs", type=float, default=3.02, help="for the ms columns")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "prefill_traffic.json"))
    args = ap.parse_args()
    one, two = count(1, args.rows, args.prompt_len), count(2, args.rows, args.prompt_len)
    scale = args.batch / args.rows
    rows: list[dict[str, Any]] = []
    for op in sorted(two.bytes, key=lambda k: -(two.bytes[k] - one.bytes[k])):
        per_layer = two.bytes[op] - one.bytes[op]
        once = one.bytes[op] - per_layer
        total = scale * (args.layers * per_layer + once)
        calls = args.layers * (two.calls[op] - one.calls[op]) + 2 * one.calls[op] - two.calls[op]
        rows.append({"op": op, "gb": total / 1e9, "calls": calls})
    flops = scale * (args.layers * (two.flops - one.flops) + 2 * one.flops - two.flops)
    moved = sum(r["gb"] for r in rows)
    matrix_ms = flops / (args.matrix_tflops * 1e12) * 1e3
    other_ms = moved * 1e9 / (args.copy_tbs * 1e12) * 1e3
    lines = [
        f"prefill of {args.batch} x {args.prompt_len} tokens, {args.layers} layers (bf16)",
        f"matrix products: {flops / 1e12:.1f} TFLOP = {matrix_ms:.1f} ms at "
        f"{args.matrix_tflops:.0f} TFLOP/s",
        f"every other op: {moved:.1f} GB moved = {other_ms:.1f} ms at {args.copy_tbs} TB/s, "
        f"{sum(r['calls'] for r in rows)} op calls",
        "",
        "| op | GB moved | op calls |",
        "|---|---|---|",
    ]
    lines += [f"| {r['op']} | {r['gb']:.2f} | {r['calls']} |" for r in rows if r["gb"] >= 0.05]
    write_results(
        Path(args.out),
        rows,
        benchmark="prefill_traffic",
        args={k: v for k, v in vars(args).items() if k != "out"},
        matrix_tflop=flops / 1e12,
        other_gb=moved,
        matrix_ms=matrix_ms,
        other_ms=other_ms,
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
