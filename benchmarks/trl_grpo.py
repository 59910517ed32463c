"""TRL's GRPOTrainer (no vLLM) on the task of ``benchmarks/gpu/e2e.py``, timed per step.

Same model (our OLMo-core model exported with ``runtime.models.export_hf``), same prompts
and reward (``benchmarks/gpu/task.py``), same group size, batch and lengths (exactly
``--new-tokens`` sampled tokens per completion, temperature 1), one optimizer step per
collection, no KL (beta 0). TRL generates with ``transformers`` generate and trains
with bf16 weights (``bf16=True``, its usual setup) which favours TRL against rlc's fp32
master weights. A TRL step covers generation + scoring + update; publication is a
no-op for TRL (it generates with the training weights).

    python benchmarks/trl_grpo.py --prompts 8 --group 8 --new-tokens 256 --steps 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))

import task  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default="builtin:olmo3-1b?vocab_size=100352")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu")
    args = ap.parse_args()

    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from runtime.models import export_hf, load_model

    cuda = torch.cuda.is_available()
    loaded = load_model(args.source)
    hf_dir = tempfile.mkdtemp(prefix="trl-model-")
    export_hf(loaded, loaded.tokenizer, hf_dir, dtype=torch.bfloat16 if cuda else torch.float32)
    del loaded
    model = AutoModelForCausalLM.from_pretrained(
        hf_dir, dtype=torch.bfloat16 if cuda else torch.float32
    )
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    import pyarrow as pa

    # an explicit fingerprint skips datasets' hashing of the table (not needed here)
    data = Dataset(pa.table({"prompt": task.prompts(args.prompts * args.steps)}), fingerprint="rlc")

    def reward_fn(completions: list[str], **_: Any) -> list[float]:
        return [task.reward(c) for c in completions]

    times: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, *a: Any, **k: Any) -> None:
            if cuda:
                torch.cuda.synchronize()
            self.t0 = time.perf_counter()

        def on_step_end(self, *a: Any, **k: Any) -> None:
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - self.t0)
            print(f"trl step {len(times)}: {times[-1]:.2f}s", flush=True)

    batch = args.prompts * args.group
    cfg = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-out-"),
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        num_generations=args.group,
        max_completion_length=args.new_tokens,
        generation_kwargs={"min_new_tokens": args.new_tokens},
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        learning_rate=1e-6,
        beta=0.0,
        max_steps=args.steps,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        bf16=cuda,
        use_cpu=not cuda,
        use_vllm=False,
        shuffle_dataset=False,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_fn,
        args=cfg,
        train_dataset=data,
        processing_class=tokenizer,
        callbacks=[Timer()],
    )
    t0 = time.perf_counter()
    trainer.train()
    total = time.perf_counter() - t0
    steady = times[1:] or times
    report = {
        "benchmark": "trl_grpo",
        "trl": trl.__version__,
        "source": args.source,
        "device_name": torch.cuda.get_device_name() if cuda else "cpu",
        "prompts": args.prompts,
        "group": args.group,
        "new_tokens": args.new_tokens,
        "step_s": times,
        "median_after_first_s": statistics.median(steady),
        "train_total_s": total,
        "log_history": trainer.state.log_history,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    shape = f"{args.prompts}x{args.group}" + (
        f"x{args.new_tokens}" if args.new_tokens != 256 else ""
    )
    path = args.out / f"trl_grpo-{shape}.json"
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"wrote {path}\n")
    print(
        f"TRL {trl.__version__} GRPOTrainer: {args.prompts}x{args.group}, {args.new_tokens} tokens"
    )
    print(f"step s (all): {' '.join(f'{t:.2f}' for t in times)}")
    print(f"median after first: {report['median_after_first_s']:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
