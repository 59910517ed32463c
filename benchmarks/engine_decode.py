"""Decode throughput of the embedded engine vs ``transformers`` generate, same weights.

The OLMo-core model is converted to its HF twin with OLMo-core's own converter
(``get_hf_config`` + ``convert_state_to_hf``), so both sides decode identical weights
greedily (``--temperature 0``, the default) or sampled (``transformers`` then samples too)
for a fixed number of tokens (EOS ignored). The engine is timed through its scheduler
(continuous batching, batched prefill, KV cache), in-process without HTTP; the table also
splits the engine's time into prefill and per-decode-step milliseconds.

    .venv/bin/python benchmarks/engine_decode.py                      # tiny, CPU
    .venv/bin/python benchmarks/engine_decode.py --device cuda --factory olmo3_190M \\
        --vocab 100352 --batch-sizes 1 8 32 --prompt-len 256 --new-tokens 256 --dtype bfloat16

Prints a table last and writes JSON to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def build_model(args: argparse.Namespace) -> Any:
    from runtime.engines.embedded.tiny import ByteTokenizer, TinyLoaded, build_tiny

    if args.source:
        from runtime.models import load_model

        return load_model(args.source, device="cpu", dtype=torch.float32, seed=args.seed)
    if args.factory:
        from olmo_core.nn.attention import AttentionBackendName
        from olmo_core.nn.transformer import TransformerConfig

        cfg = getattr(TransformerConfig, args.factory)(
            vocab_size=args.vocab, attn_backend=AttentionBackendName.torch
        )
        torch.manual_seed(args.seed)
        model = cfg.build(init_device="cpu")
        model.init_weights(device=torch.device("cpu"))
        return TinyLoaded(model=model.eval(), tokenizer=ByteTokenizer(), config=cfg)
    return build_tiny(
        "dense",
        seed=args.seed,
        d_model=args.d_model,
        n_layers=args.layers,
        n_heads=args.heads,
        n_kv_heads=args.kv_heads,
        window=None,
        vocab_size=args.vocab,
    )


def bench_engine(
    loaded: Any, args: argparse.Namespace, batch: int, prompts: torch.Tensor
) -> dict[str, float]:
    from runtime.engines.embedded.engine import Engine
    from runtime.engines.embedded.sampling import SamplingParams

    eng = Engine(
        loaded,
        model_path="bench",
        device=args.device,
        max_running_requests=max(batch, 1),
        context_length=args.prompt_len + args.new_tokens + 8,
        cuda_graph=args.cuda_graph,
        prefill_tokens=args.prefill_tokens,
    )
    eng.start()
    params = SamplingParams(
        max_new_tokens=args.new_tokens, temperature=args.temperature, ignore_eos=True
    )

    def run() -> float:
        done = threading.Event()
        left = [batch]
        lock = threading.Lock()

        def cb(_res: dict[str, Any]) -> None:
            with lock:
                left[0] -= 1
                if left[0] == 0:
                    done.set()

        reqs = [eng.make_request(prompts[i].tolist(), params, cb) for i in range(batch)]
        _sync(args.device)
        t0 = time.perf_counter()
        for r in reqs:
            eng.submit(r)
        done.wait()
        _sync(args.device)
        return time.perf_counter() - t0

    try:
        run()  # warm-up
        before, steps0 = dict(eng.timings), eng.stats["num_decode_steps"]
        times = [run() for _ in range(args.repeats)]
        steps = max(1, eng.stats["num_decode_steps"] - steps0)
        spent = {k: eng.timings[k] - before[k] for k in before}
    finally:
        eng.stop()
    return {
        "tok_s": batch * args.new_tokens / min(times),
        "prefill_ms_per_run": spent["prefill_s"] * 1e3 / len(times),
        "decode_ms_per_step": spent["decode_s"] * 1e3 / steps,
    }


def bench_hf(
    loaded: Any, args: argparse.Namespace, batch: int, prompts: torch.Tensor
) -> float | None:
    try:
        from olmo_core.nn.hf.config import get_hf_config
        from olmo_core.nn.hf.convert import convert_state_to_hf
        from transformers import AutoModelForCausalLM
    except ImportError:
        return None
    cfg = get_hf_config(loaded.model)
    hf = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    hf.load_state_dict(convert_state_to_hf(cfg, loaded.model.state_dict()))
    hf = hf.to(device=args.device, dtype=getattr(torch, args.dtype)).eval()
    ids = prompts[:batch].to(args.device)
    sampled = args.temperature > 0
    kw = dict(
        max_new_tokens=args.new_tokens,
        min_new_tokens=args.new_tokens,
        do_sample=sampled,
        **({"temperature": args.temperature, "top_k": 0, "top_p": 1.0} if sampled else {}),
        pad_token_id=0,
        eos_token_id=None,
    )

    def run() -> float:
        _sync(args.device)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = hf.generate(ids, attention_mask=torch.ones_like(ids), **kw)
        _sync(args.device)
        assert out.shape[1] == ids.shape[1] + args.new_tokens
        return time.perf_counter() - t0

    run()
    best = min(run() for _ in range(args.repeats))
    return batch * args.new_tokens / best


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--source", default=None, help="a runtime.models source instead of random init")
    p.add_argument("--factory", default=None, help="TransformerConfig factory, e.g. olmo3_190M")
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=128)
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cuda-graph", action="store_true")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--prefill-tokens", type=int, default=16384, help="prefill budget per forward")
    p.add_argument("--skip-hf", action="store_true")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    loaded = build_model(args)
    vocab = int(loaded.model.embeddings.weight.shape[0])
    gen = torch.Generator().manual_seed(args.seed)
    prompts = torch.randint(1, vocab, (max(args.batch_sizes), args.prompt_len), generator=gen)
    hf_loaded = loaded
    loaded.model.to(device=args.device, dtype=getattr(torch, args.dtype))

    rows = []
    for b in args.batch_sizes:
        ours = bench_engine(loaded, args, b, prompts)
        theirs = None if args.skip_hf else bench_hf(hf_loaded, args, b, prompts)
        rows.append(
            {
                "batch": b,
                "engine_tok_s": ours["tok_s"],
                "engine_prefill_ms": ours["prefill_ms_per_run"],
                "engine_decode_ms_per_step": ours["decode_ms_per_step"],
                "hf_tok_s": theirs,
                "speedup": None if not theirs else ours["tok_s"] / theirs,
            }
        )
    result = {
        "benchmark": "engine_decode",
        "device": args.device,
        "dtype": args.dtype,
        "torch": torch.__version__,
        "platform": platform.platform(),
        "threads": args.threads,
        "model": args.source or args.factory or f"tiny d{args.d_model} L{args.layers}",
        "params": sum(p.numel() for p in loaded.model.parameters()),
        "prompt_len": args.prompt_len,
        "new_tokens": args.new_tokens,
        "cuda_graph": args.cuda_graph,
        "temperature": args.temperature,
        "prefill_tokens": args.prefill_tokens,
        "rows": rows,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"engine_decode_{args.device}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")
    print(
        f"\nmodel {result['model']} ({result['params']:,} params), {args.device} {args.dtype}, "
        f"prompt {args.prompt_len}, new {args.new_tokens}, T={args.temperature}"
    )
    print(
        f"{'batch':>6} {'engine tok/s':>14} {'prefill ms':>11} {'step ms':>8} "
        f"{'hf tok/s':>12} {'speedup':>8}"
    )
    for r in rows:
        hf = f"{r['hf_tok_s']:.1f}" if r["hf_tok_s"] else "n/a"
        sp = f"{r['speedup']:.2f}x" if r["speedup"] else "n/a"
        print(
            f"{r['batch']:>6} {r['engine_tok_s']:>14.1f} {r['engine_prefill_ms']:>11.1f} "
            f"{r['engine_decode_ms_per_step']:>8.2f} {hf:>12} {sp:>8}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
