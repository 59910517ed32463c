"""Raw OLMo-core training step (forward + backward + AdamW), the trainer's reference point.

No rlc code is involved: the model comes straight from an OLMo-core ``TransformerConfig``
factory (SDPA attention), cross-entropy over every token, one ``AdamW.step`` per step.
Two precision regimes:

- ``bf16``: weights, gradients and optimizer state in bf16 (the shared device notes' table);
- ``amp``: fp32 master weights and optimizer state, forward under bf16 autocast (what
  ``runtime.trainer.Trainer`` does on CUDA, so the fair reference for the GRPO update).

MFU counts matrix FLOPs 6 x (non-embedding params incl. LM head) x tokens plus attention
(QK^T and AV, causal, inside the sliding window, forward + backward = 3 x forward) over
the measured bf16 ceiling of the card (790 TFLOP/s measured on one NVIDIA H200).

    python benchmarks/raw_olmo_core_step.py --device cuda --factory olmo3_1B \\
        --batch 4 --seq 2048 --precision bf16 amp

Prints a table last and writes JSON (``--out``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
PEAK_TFLOPS = 790.0


def attention_pairs(seq: int, windows: list[int | None]) -> int:
    """Sum over layers of (query, key) pairs a causal, windowed attention computes."""
    total = 0
    for w in windows:
        if w is None or w >= seq:
            total += seq * (seq + 1) // 2
        else:  # first w positions see pos+1 keys, the rest see w keys
            total += w * (w + 1) // 2 + (seq - w) * w
    return total


def layer_windows(model: Any) -> list[int | None]:
    """Per-layer sliding window (None = full) read off the built OLMo-core model."""
    out: list[int | None] = []
    for block in model.blocks.values():
        attn = getattr(block, "attention", None)
        backend = getattr(attn, "backend", None)
        ws = getattr(backend, "window_size", (-1, -1))
        out.append(None if ws == (-1, -1) or ws[0] < 0 else int(ws[0]) + 1)
    return out


def step_flops(model: Any, batch: int, seq: int) -> dict[str, float]:
    n_all = sum(p.numel() for p in model.parameters())
    n_emb = model.embeddings.weight.numel()
    matmul = 6.0 * (n_all - n_emb) * batch * seq
    d_attn = 0
    for block in model.blocks.values():
        a = block.attention
        d_attn = a.n_heads * a.head_dim
        break
    pairs = attention_pairs(seq, layer_windows(model))
    attn = 3.0 * 4.0 * pairs * d_attn * batch  # fwd: 2 FLOPs x (QK + AV) per pair per dim
    return {"matmul": matmul, "attention": attn, "total": matmul + attn}


def build(factory: str, vocab: int, device: torch.device, dtype: torch.dtype) -> Any:
    from olmo_core.nn.attention import AttentionBackendName
    from olmo_core.nn.transformer import TransformerConfig

    cfg = getattr(TransformerConfig, factory)(
        vocab_size=vocab, attn_backend=AttentionBackendName.torch
    )
    torch.manual_seed(0)
    model = cfg.build(init_device=str(device))
    model.init_weights(device=device)
    return model.to(dtype=dtype).train()


def run(args: argparse.Namespace, precision: str) -> dict[str, Any]:
    dev = torch.device(args.device)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    model = build(args.factory, args.vocab, dev, dtype)
    if args.recompute:
        from olmo_core.nn.transformer import TransformerActivationCheckpointingMode

        model.apply_activation_checkpointing(TransformerActivationCheckpointingMode.full)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, betas=(0.9, 0.95), foreach=True)
    g = torch.Generator(device="cpu").manual_seed(1)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=g).to(dev)
    inp, tgt = ids[:, :-1], ids[:, 1:]
    amp = precision == "amp" and dev.type == "cuda"

    def step() -> float:
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
            logits = model(inp)
        loss = torch.nn.functional.cross_entropy(
            logits.float().view(-1, logits.shape[-1]), tgt.reshape(-1)
        )
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    times = []
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for i in range(args.warmup + args.steps):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    fl = step_flops(model, args.batch, args.seq)
    tokens = args.batch * args.seq
    out = {
        "precision": precision,
        "step_s": med,
        "all_step_s": times,
        "tokens_per_s": tokens / med,
        "flops_per_step": fl,
        "tflops": fl["total"] / med / 1e12,
        "tflops_6n_only": fl["matmul"] / med / 1e12,
        "mfu": fl["total"] / med / 1e12 / PEAK_TFLOPS,
        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if dev.type == "cuda" else 0,
        "params": sum(p.numel() for p in model.parameters()),
    }
    return out  # model and optimizer are freed on return (see main's empty_cache)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--factory", default="olmo3_1B")
    ap.add_argument("--vocab", type=int, default=100352)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--precision", nargs="+", default=["bf16", "amp"], choices=["bf16", "amp"])
    ap.add_argument("--recompute", action="store_true")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu")
    args = ap.parse_args()
    rows = []
    for p in args.precision:
        rows.append(run(args, p))
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    report = {
        "benchmark": "raw_olmo_core_step",
        "factory": args.factory,
        "vocab": args.vocab,
        "batch": args.batch,
        "seq": args.seq,
        "recompute": args.recompute,
        "device_name": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
        "torch": torch.__version__,
        "peak_tflops_assumed": PEAK_TFLOPS,
        "rows": rows,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"raw_olmo_core_step-{args.factory}-{args.batch}x{args.seq}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {path}\n")
    print(f"{args.factory} ({rows[0]['params'] / 1e9:.3f}B params), {args.batch} x {args.seq}")
    print(
        f"{'precision':<10} {'step s':>8} {'tokens/s':>10} {'TFLOP/s':>8} {'6N only':>8} {'MFU':>6}"
    )
    for r in rows:
        print(
            f"{r['precision']:<10} {r['step_s']:>8.4f} {r['tokens_per_s']:>10.0f} "
            f"{r['tflops']:>8.1f} {r['tflops_6n_only']:>8.1f} {r['mfu']:>6.1%}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
