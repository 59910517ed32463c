"""The engine's prefill forward, eager against its compiled regions, on the same model.

``InferenceModel.prefill_batch`` over random prompts of each ``--shapes`` entry (``BxT``:
B prompts of T tokens; ``BxT/r``: ragged, lengths spread evenly over T/2..T), first
eagerly, then through the compiled prefill regions (``enable_compile_prefill``): the best
and median of ``--repeats`` timed calls after one untimed call per shape, the time of the
first compiled call (the regions' compile, from an empty or a warm Inductor cache), and
the largest difference of the last-position logits between the two on the same prompts.

    python benchmarks/prefill_compile.py --shapes 64x128 256x128 64x128/r   # a GPU
    .venv/bin/python benchmarks/prefill_compile.py --source builtin:small --shapes 8x64

Prints a table last and writes JSON (``--out``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from results_file import write_results  # noqa: E402


def parse_shape(text: str) -> tuple[int, int, bool]:
    """``64x128`` -> (64, 128, False); ``64x128/r`` -> ragged."""
    body, _, flag = text.partition("/")
    b, _, t = body.partition("x")
    if flag not in ("", "r") or not b.isdigit() or not t.isdigit() or int(b) < 1 or int(t) < 2:
        raise argparse.ArgumentTypeError(f"shape {text!r}: expected BxT or BxT/r (T >= 2)")
    return int(b), int(t), flag == "r"


def prompts(b: int, t: int, ragged: bool, vocab: int, gen: torch.Generator) -> list[list[int]]:
    lens = [t - (t // 2) * i // max(1, b - 1) for i in range(b)] if ragged else [t] * b
    return [torch.randint(1, vocab, (n,), generator=gen).tolist() for n in lens]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(im: Any, seqs: list[list[int]], device: torch.device) -> tuple[float, torch.Tensor]:
    sync(device)
    t0 = time.perf_counter()
    last, _, _ = im.prefill_batch(seqs, list(range(len(seqs))))
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

    from runtime.engines.embedded.forward import InferenceModel
    from runtime.models import load_model

    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    loaded = load_model(args.source, device=str(device), dtype=dtype)
    vocab = int(loaded.model.embeddings.weight.shape[0])
    slots = max(b for b, _, _ in args.shapes)
    im = InferenceModel(
        loaded.model, max_slots=slots, capacity=max(t for _, t, _ in args.shapes) + 8, device=device
    )
    gen = torch.Generator().manual_seed(0)
    batches = {s: [prompts(*s, vocab, gen) for _ in range(args.repeats + 1)] for s in args.shapes}
    times: dict[str, dict[tuple[int, int, bool], list[float]]] = {"eager": {}, "compiled": {}}
    lasts: dict[str, dict[tuple[int, int, bool], torch.Tensor]] = {"eager": {}, "compiled": {}}
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
            _, last = timed(im, runs[0], device)  # untimed: caches, allocator
            lasts[kind][shape] = last.float()
            times[kind][shape] = [timed(im, seqs, device)[0] for seqs in runs[1:]]
    if not im.compiled_prefill:
        raise SystemExit("the prefill regions fell back to eager (see the warning above)")

    rows: list[dict[str, Any]] = []
    for shape in args.shapes:
        b, t, ragged = shape
        e, c = times["eager"][shape], times["compiled"][shape]
        rows.append(
            {
                "shape": f"{b}x{t}{'/r' if ragged else ''}",
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
