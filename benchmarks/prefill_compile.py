"""The engine's prefill forward, eager against its compiled regions, on the same model.

``InferenceModel.prefill_batch`` over random prompts of each ``--shapes`` entry (``BxT``:
B prompts of T tokens; ``BxT/r``: ragged, lengths spread evenly over T/2..T; ``BxT@P``: T
new tokens in each row after a P-token prefix its slot already holds, the continued
prefill that prompts sharing a chat template take after the prefix cache), first
eagerly, then through the compiled prefill regions (``enable_compile_prefill``): the best
and median of ``--repeats`` timed calls after one untimed call per shape, the time of the
first compiled call (the regions' compile, from an empty or a warm Inductor cache), and
the largest difference of the last-position logits between the two on the same prompts.

    python benchmarks/prefill_compile.py --shapes 64x128 256x128 64x128/r 16x128@512  # a GPU
    .venv/bin/python benchmarks/prefill_compile.py --source builtin:small --shapes 8x64

Prints a table last and writes JSON (``--out``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from results_file import write_results  # noqa: E402


@dataclass(frozen=True)
class Shape:
    """``BxT[/r][@P]``: B rows of T new tokens (ragged: T/2..T), after a P-token prefix."""

    rows: int
    tokens: int
    ragged: bool = False
    prefix: int = 0

    def __str__(self) -> str:
        text = f"{self.rows}x{self.tokens}{'/r' if self.ragged else ''}"
        return text + (f"@{self.prefix}" if self.prefix else "")


def parse_shape(text: str) -> Shape:
    """``64x128`` -> Shape(64, 128); ``64x128/r`` -> ragged; ``16x128@512`` -> continued."""
    body, _, prefix = text.partition("@")
    body, _, flag = body.partition("/")
    b, _, t = body.partition("x")
    numbers = (b, t, prefix or "0")
    if flag not in ("", "r") or not all(n.isdigit() for n in numbers) or int(b) < 1 or int(t) < 2:
        raise argparse.ArgumentTypeError(f"shape {text!r}: expected BxT[/r][@P] (T >= 2)")
    if prefix and int(prefix) < 2:
        raise argparse.ArgumentTypeError(f"shape {text!r}: a prefix has 2 tokens or more")
    return Shape(int(b), int(t), flag == "r", int(prefix or 0))


def prompts(shape: Shape, vocab: int, gen: torch.Generator) -> list[list[int]]:
    b, t = shape.rows, shape.tokens
    lens = [t - (t // 2) * i // max(1, b - 1) for i in range(b)] if shape.ragged else [t] * b
    return [torch.randint(1, vocab, (n,), generator=gen).tolist() for n in lens]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(
    im: Any, seqs: list[list[int]], prefix: int, device: torch.device
) -> tuple[float, torch.Tensor]:
    """One prefill of ``seqs`` into slots 0..B-1 (after their ``prefix`` tokens); seconds
    and last-position logits."""
    starts = [prefix] * len(seqs) if prefix else None
    sync(device)
    t0 = time.perf_counter()
    last, _, _ = im.prefill_batch(seqs, list(range(len(seqs))), starts=starts)
    sync(device)
    return time.perf_counter() - t0, last


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--source", default="builtin:olmo3-1b?vocab_size=100352")
    ap.add_argument("--shapes", type=parse_shape, nargs="+", default=[parse_shape("64x128")])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "prefill_compile.json"
    )
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    if any(s.rows < 2 for s in args.shapes):
        ap.error("every shape needs 2 rows or more (a single prompt always prefills eagerly)")

    from runtime.engines.embedded.forward import InferenceModel
    from runtime.models import load_model

    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    loaded = load_model(args.source, device=str(device), dtype=dtype)
    vocab = int(loaded.model.embeddings.weight.shape[0])
    im = InferenceModel(
        loaded.model,
        max_slots=max(s.rows for s in args.shapes),
        capacity=max(s.prefix + s.tokens for s in args.shapes) + 8,
        device=device,
    )
    gen = torch.Generator().manual_seed(0)
    batches = {s: [prompts(s, vocab, gen) for _ in range(args.repeats + 1)] for s in args.shapes}
    # the prefix each continued row's slot holds (written untimed before its shape's runs)
    prefixes = {s: prompts(Shape(s.rows, s.prefix), vocab, gen) for s in args.shapes if s.prefix}
    times: dict[str, dict[Shape, list[float]]] = {"eager": {}, "compiled": {}}
    lasts: dict[str, dict[Shape, torch.Tensor]] = {"eager": {}, "compiled": {}}
    compile_s = 0.0
    for kind in ("eager", "compiled"):
        if kind == "compiled":
            im.enable_compile_prefill()
            sync(device)
            t0 = time.perf_counter()
            im.warm_prefill()
            sync(device)
            compile_s = time.perf_counter() - t0
        for shape, runs in batches.items():
            if shape in prefixes:
                timed(im, prefixes[shape], 0, device)
            _, last = timed(im, runs[0], shape.prefix, device)  # untimed: caches, allocator
            lasts[kind][shape] = last.float()
            times[kind][shape] = [timed(im, seqs, shape.prefix, device)[0] for seqs in runs[1:]]
    if not im.compiled_prefill:
        raise SystemExit("the prefill regions fell back to eager (see the warning above)")

    rows: list[dict[str, Any]] = []
    for shape in args.shapes:
        e, c = times["eager"][shape], times["compiled"][shape]
        rows.append(
            {
                "shape": str(shape),
                "tokens": sum(len(s) for s in batches[shape][1]),
                "eager_ms_best": min(e) * 1e3,
                "eager_ms_median": statistics.median(e) * 1e3,
                "compiled_ms_best": min(c) * 1e3,
                "compiled_ms_median": statistics.median(c) * 1e3,
                "speedup_best": min(e) / min(c),
                "max_logit_diff": (lasts["eager"][shape] - lasts["compiled"][shape])
                .abs()
                .max()
                .item(),
            }
        )
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    write_results(
        args.out,
        rows,
        benchmark="prefill_compile",
        source=args.source,
        device=name,
        dtype=str(dtype).removeprefix("torch."),
        torch=torch.__version__,
        repeats=args.repeats,
        compile_s=compile_s,
    )
    print(f"{args.source} on {name} ({dtype}), best / median of {args.repeats}")
    print(f"compile of the prefill regions (first compiled call): {compile_s:.1f} s")
    print("| shape | tokens | eager ms | compiled ms | speed-up | max logit diff |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['shape']} | {r['tokens']} | {r['eager_ms_best']:.2f} / {r['eager_ms_median']:.2f} "
            f"| {r['compiled_ms_best']:.2f} / {r['compiled_ms_median']:.2f} "
            f"| {r['speedup_best']:.2f}x | {r['max_logit_diff']:.3g} |"
        )


if __name__ == "__main__":
    main()
