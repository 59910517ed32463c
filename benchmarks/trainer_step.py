"""GRPO update throughput vs a raw OLMo-core forward+backward+AdamW on the same work.

Both sides see the same model, the same samples (prompt + response lengths), the same packed
rows (microbatch = one packed row, document-isolated) and one optimizer step per batch:

- ``grpo``: ``runtime.trainer.Trainer.train_step`` (GRPO loss, logprob gather, metrics,
  gradient reduction, clipping, schedule);
- ``raw``: the OLMo-core model called directly with a cross-entropy loss over the response
  tokens, ``loss.backward()`` per row, ``AdamW.step()``.

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
        if args.recompute:
            from olmo_core.nn.transformer import TransformerActivationCheckpointingMode

            self.model.apply_activation_checkpointing(TransformerActivationCheckpointingMode.full)
        self.opt = torch.optim.AdamW(
            self.model.parameters(), lr=1e-6, betas=(0.9, 0.95), foreach=self.device.type == "cuda"
        )
        packed = pack_samples(samples, args.packing_max_tokens)
        self.rows = len(packed)
        self.batches = [
            (
                r.input_ids.to(self.device)[None],
                r.targets.to(self.device)[None],
                r.model_kwargs(self.device),
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
    sides["grpo"].trainer.close()  # type: ignore[attr-defined]
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
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    probe = load_model(args.model)
    vocab = probe.config.vocab_size
    params = sum(p.numel() for p in probe.model.parameters())
    del probe
    samples = make_samples(args.samples, args.prompt_len, args.response_len, vocab, seed=0)
    tokens = sum(s.num_tokens for s in samples)
    res = measure(args, samples)
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
        "steps": args.steps,
        "raw": raw,
        "grpo": grpo,
        "peak_mem_gib_both_models": res["peak_mem_gib_both"]["value"],
        "grpo_over_raw_throughput": grpo["tokens_per_s"] / raw["tokens_per_s"],
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


if __name__ == "__main__":
    main()
