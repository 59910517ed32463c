"""GRPO update throughput vs a raw OLMo-core forward+backward+AdamW on the same work.

Both sides see the same model, the same samples (prompt + response lengths), the same packed
rows (microbatch = one packed row, document-isolated) and one optimizer step per batch:

- ``grpo``: ``runtime.trainer.Trainer.train_step`` (GRPO loss, logprob gather, metrics,
  gradient reduction, clipping, schedule);
- ``raw``: the OLMo-core model called directly with a cross-entropy loss over the response
  tokens, ``loss.backward()`` per row, ``AdamW.step()``. By default its rows are NOT
  document-masked (plain causal SDPA over the packed row: the fastest kernels, the ceiling
  the trainer is held to); ``--raw-doc-mask`` gives it the same document isolation.

``--attention-backend`` picks the trainer's packed-row attention (default ``flex`` on CUDA,
``sdpa`` on CPU). MFU counts 6 x non-embedding params x tokens plus causal attention
(6 x layers x d_model x sum of squared document lengths, fwd + bwd) against 790 TFLOP/s.
On CUDA a parity check compares the trainer's log-probs under ``flex`` and ``sdpa``.

The ratio is the trainer's overhead. Each row is the median over ``--steps`` steps after
``--warmup`` steps. Prints a table last and writes JSON to ``benchmarks/results/``.

    python benchmarks/trainer_step.py                                   # CPU, builtin:tiny
    python benchmarks/trainer_step.py --device cuda --model builtin:olmo3-1b \\
        --samples 32 --prompt-len 512 --response-len 1536 --packing-max-tokens 8192
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from runtime.models import load_model  # noqa: E402
from runtime.trainer import Sample, Trainer, TrainerConfig, pack_samples  # noqa: E402
from runtime.trainer.packing import IGNORE  # noqa: E402


def make_samples(n: int, prompt_len: int, response_len: int, vocab: int, seed: int) -> list[Sample]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        # vary lengths a little (+-25%) like real rollouts, deterministically
        r = max(1, int(response_len * (0.75 + 0.5 * ((i * 37) % 11) / 10)))
        ids = torch.randint(0, vocab, (prompt_len + r,), generator=g).tolist()
        out.append(
            Sample(
                ids[:prompt_len],
                ids[prompt_len:],
                advantage=1.0 if i % 2 else -1.0,
                rollout_logprobs=[-1.0] * r,
            )
        )
    return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class GRPOSide:
    """``Trainer.train_step`` over the samples."""

    def __init__(self, args: argparse.Namespace, samples: list[Sample]) -> None:
        cfg = TrainerConfig(
            model_source=args.model,
            device=args.device,
            lr=1e-6,
            packing_max_tokens=args.packing_max_tokens,
            activation_recompute=args.recompute,
            compile_model=args.compile_blocks,
            attention_backend=args.attention_backend,
        )
        self.trainer = Trainer(cfg)
        self.device = self.trainer.device
        self.samples = samples
        self.rows = 0

    def step(self) -> None:
        self.rows = int(self.trainer.train_step(self.samples)["rows"])


class RawSide:
    """The OLMo-core model called directly: CE over response tokens, backward, AdamW."""

    def __init__(self, args: argparse.Namespace, samples: list[Sample]) -> None:
        self.device = torch.device(args.device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", 0)
        lm = load_model(args.model, device=self.device)
        self.model = lm.model.train()
        if args.recompute:  # as the trainer does: compiled blocks recompute in their graphs
            from olmo_core.nn.transformer import TransformerActivationCheckpointingMode as Mode

            from runtime.trainer.trainer import RECOMPUTE_MEMORY_BUDGET

            if args.compile_blocks:
                self.model.apply_activation_checkpointing(
                    Mode.budget, activation_memory_budget=RECOMPUTE_MEMORY_BUDGET
                )
            else:
                self.model.apply_activation_checkpointing(Mode.full)
        if args.compile_blocks:
            self.model.apply_compile()
        self.opt = torch.optim.AdamW(
            self.model.parameters(), lr=1e-6, betas=(0.9, 0.95), foreach=self.device.type == "cuda"
        )
        packed = pack_samples(samples, args.packing_max_tokens)
        self.rows = len(packed)
        self.batches = [
            (
                r.input_ids.to(self.device)[None],
                r.targets.to(self.device)[None],
                r.model_kwargs(self.device) if args.raw_doc_mask else {},
            )
            for r in packed
        ]
        self.n_tgt = float(sum(int((r.targets != IGNORE).sum()) for r in packed))
        self.amp = self.device.type == "cuda"

    def step(self) -> None:
        for ids, tgt, kw in self.batches:
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp):
                logits = self.model(ids, **kw)
            loss = (
                torch.nn.functional.cross_entropy(
                    logits.float().view(-1, logits.shape[-1]),
                    tgt.view(-1),
                    ignore_index=IGNORE,
                    reduction="sum",
                )
                / self.n_tgt
            )
            loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


def logprob_parity(trainer: Trainer, samples: list[Sample], backend: str) -> dict[str, float]:
    """Max |logprob difference| of the trainer's forward under ``flex`` vs ``sdpa``."""
    from runtime.models.attention import set_attention_backend

    out = {}
    for name in ("sdpa", "flex"):
        set_attention_backend(trainer.model, name)
        out[name] = torch.cat(trainer.compute_logprobs(samples))
    set_attention_backend(trainer.model, backend)
    d = (out["flex"] - out["sdpa"]).abs()
    return {"max_abs_diff": float(d.max()), "mean_abs_diff": float(d.mean())}


def measure(args: argparse.Namespace, samples: list[Sample]) -> dict[str, dict[str, Any]]:
    """Alternate raw and GRPO steps so machine load drifts hit both sides alike."""
    sides = {"raw": RawSide(args, samples), "grpo": GRPOSide(args, samples)}
    times: dict[str, list[float]] = {k: [] for k in sides}
    for i in range(args.warmup + args.steps):
        for name, side in sides.items():
            _sync(side.device)
            t0 = time.perf_counter()
            side.step()
            _sync(side.device)
            if i >= args.warmup:
                times[name].append(time.perf_counter() - t0)
    tokens = sum(s.num_tokens for s in samples)
    peak = 0.0
    if torch.cuda.is_available() and args.device.startswith("cuda"):
        peak = torch.cuda.max_memory_allocated() / 2**30
    out = {}
    for name, side in sides.items():
        med = statistics.median(times[name])
        out[name] = {
            "step_s": med,
            "tokens_per_s": tokens / med,
            "rows": side.rows,
            "all_step_s": times[name],
        }
    out["peak_mem_gib_both"] = {"value": peak}
    trainer = sides["grpo"].trainer  # type: ignore[attr-defined]
    raw_model = sides["raw"].model  # type: ignore[attr-defined]
    out["model_shape"] = {
        "params": sum(p.numel() for p in raw_model.parameters()),
        "embed": raw_model.embeddings.weight.numel(),
        "layers": len(raw_model.blocks),
        "d_model": int(raw_model.embeddings.weight.shape[1]),
    }
    if args.device.startswith("cuda"):
        out["parity"] = logprob_parity(trainer, samples[:4], args.attention_backend)
    trainer.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="builtin:tiny")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--response-len", type=int, default=64)
    ap.add_argument("--packing-max-tokens", type=int, default=512)
    ap.add_argument("--recompute", action="store_true")
    ap.add_argument(
        "--compile-blocks",
        action="store_true",
        help="torch.compile each block and the LM head (OLMo-core's apply_compile), both sides",
    )
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--attention-backend", default=None, choices=["sdpa", "flex", "flash", "torch"])
    ap.add_argument("--raw-doc-mask", action="store_true", help="document-mask the raw side too")
    ap.add_argument(
        "--doc-chunk-tokens",
        type=int,
        default=None,
        help="sdpa: group documents into chunks of this many tokens (0: the dense row mask)",
    )
    ap.add_argument("--peak-tflops", type=float, default=790.0)
    args = ap.parse_args()
    if args.attention_backend is None:
        args.attention_backend = "flex" if args.device.startswith("cuda") else "sdpa"
    if args.doc_chunk_tokens is not None:
        from runtime.models import doc_chunks

        if args.doc_chunk_tokens > 0:
            doc_chunks.CHUNK_TOKENS = args.doc_chunk_tokens
        else:
            doc_chunks.MIN_SAVING = float("inf")

    from runtime.models.builtin import parse_builtin
    from runtime.models.tokenizer import build_builtin_tokenizer, builtin_tokenizer

    vocab = build_builtin_tokenizer().vocab_size
    if args.model.startswith("builtin:"):
        vocab = builtin_tokenizer(args.model).vocab_size
        vocab = parse_builtin(args.model.removeprefix("builtin:"))[1].get("vocab_size", vocab)
    samples = make_samples(args.samples, args.prompt_len, args.response_len, vocab, seed=0)
    tokens = sum(s.num_tokens for s in samples)
    res = measure(args, samples)
    shape = res["model_shape"]
    params, embed = shape["params"], shape["embed"]
    layers, d_model = shape["layers"], shape["d_model"]
    parity = res.get("parity")
    flops = 6 * (params - embed) * tokens + 6 * layers * d_model * sum(
        s.num_tokens**2 for s in samples
    )
    raw, grpo = res["raw"], res["grpo"]
    report = {
        "benchmark": "trainer_step",
        "model": args.model,
        "params": params,
        "device": args.device,
        "device_name": torch.cuda.get_device_name()
        if args.device.startswith("cuda")
        else platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "samples": args.samples,
        "tokens_per_step": tokens,
        "prompt_len": args.prompt_len,
        "response_len": args.response_len,
        "packing_max_tokens": args.packing_max_tokens,
        "recompute": args.recompute,
        "compile_blocks": args.compile_blocks,
        "steps": args.steps,
        "raw": raw,
        "grpo": grpo,
        "peak_mem_gib_both_models": res["peak_mem_gib_both"]["value"],
        "grpo_over_raw_throughput": grpo["tokens_per_s"] / raw["tokens_per_s"],
        "attention_backend": args.attention_backend,
        "raw_doc_mask": args.raw_doc_mask,
        "doc_chunk_tokens": args.doc_chunk_tokens,
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "flops_per_step": flops,
        "grpo_mfu": flops / grpo["step_s"] / (args.peak_tflops * 1e12),
        "raw_mfu": flops / raw["step_s"] / (args.peak_tflops * 1e12),
        "logprob_parity_flex_vs_sdpa": parity,
    }
    name = f"trainer_step-{args.model.removeprefix('builtin:').split('?')[0]}-{args.device.split(':')[0]}.json"
    out = args.out or ROOT / "benchmarks" / "results" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {out}\n")
    print(
        f"model {args.model} ({params / 1e6:.1f}M params) on {report['device_name']}, "
        f"{args.samples} samples, {tokens} tokens/step, {raw['rows']} packed rows"
    )
    print(f"{'path':<8} {'rows':>5} {'step s':>9} {'tokens/s':>11}")
    for label, r in (("raw", raw), ("grpo", grpo)):
        print(f"{label:<8} {r['rows']:>5} {r['step_s']:>9.4f} {r['tokens_per_s']:>11.1f}")
    print(f"grpo/raw throughput: {report['grpo_over_raw_throughput']:.3f}")
    print(
        f"attention {args.attention_backend}, raw doc mask {args.raw_doc_mask}; MFU grpo "
        f"{report['grpo_mfu']:.1%} raw {report['raw_mfu']:.1%}; peak "
        f"{report['peak_mem_gib_both_models']:.1f} GiB; parity {parity}"
    )


if __name__ == "__main__":
    main()
