"""GPU decode: embedded engine vs ``transformers`` generate on the same weights, sampled.

The OLMo-core model (``builtin:olmo3-1b`` with a 100352 vocab: hidden 2048, 16 layers,
1.48B params) is exported with ``runtime.models.export_hf`` and reloaded by
``transformers`` (``from_pretrained``), so both sides hold the same bf16 weights; a
logits parity check on one prompt guards that. Both sides sample (temperature 1) a fixed
number of tokens per request (EOS ignored), all requests submitted at once; the time
includes prefill. Micro timings split one engine decode step into forward and sampling.

Bandwidth bound: per decode step the weights (all but the embedding table) plus the KV
cache each request attends to (window-limited) plus the new KV are read/written once;
the sum over all steps at ``--bandwidth`` (4.3 TB/s measured copy rate) gives the
fastest possible decode.

    python benchmarks/gpu/decode.py --batch-sizes 64 256 --prompt-len 128 --new-tokens 256
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


DEV = "cuda"
DTYPE = torch.bfloat16


def sync() -> None:
    if DEV == "cuda":
        torch.cuda.synchronize()


def kv_token_bytes(im: Any) -> list[int]:
    """Bytes of K+V per cached token, per layer."""
    out = []
    for kc in im.k_cache:
        _, h, _, d = kc.shape
        out.append(2 * h * d * kc.element_size())
    return out


def bandwidth_bound(
    loaded: Any, im: Any, batch: int, prompt: int, new: int, bw: float
) -> dict[str, float]:
    model = loaded.model
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    weight_bytes -= model.embeddings.weight.numel() * model.embeddings.weight.element_size()
    per_tok = kv_token_bytes(im)
    windows = [layer.window for layer in im.layers]
    total = 0.0
    kv_total = 0.0
    for step in range(new - 1):  # the first token comes from prefill
        ctx = prompt + step + 1
        kv = sum(
            b * (ctx if w is None else min(ctx, w)) for b, w in zip(per_tok, windows, strict=True)
        )
        kv = batch * (kv + sum(per_tok))  # read the context, write the new entry
        kv_total += kv
        total += weight_bytes + kv
    seconds = total / bw
    return {
        "weight_bytes_per_step": float(weight_bytes),
        "kv_bytes_mean_per_step": kv_total / max(new - 1, 1),
        "bytes_total": total,
        "bound_s": seconds,
        "bound_tok_s": batch * new / seconds,
    }


def engine_run(eng: Any, prompts: torch.Tensor, batch: int, params: Any) -> float:
    done = threading.Event()
    left = [batch]
    lock = threading.Lock()
    errors: list[Any] = []

    def cb(res: dict[str, Any]) -> None:
        if res["meta_info"]["finish_reason"].get("type") == "abort":
            errors.append(res["meta_info"]["finish_reason"])
        with lock:
            left[0] -= 1
            if left[0] == 0:
                done.set()

    reqs = [eng.make_request(prompts[i].tolist(), params, cb) for i in range(batch)]
    sync()
    t0 = time.perf_counter()
    for r in reqs:
        eng.submit(r)
    if not done.wait(600):
        raise TimeoutError("engine did not finish")
    sync()
    if errors:
        raise RuntimeError(f"engine aborted requests: {errors[:2]}")
    return time.perf_counter() - t0


def bench_engine(
    loaded: Any, prompts: torch.Tensor, batch: int, args: argparse.Namespace, graph: bool
) -> dict[str, Any]:
    from runtime.engines.embedded.engine import Engine
    from runtime.engines.embedded.sampling import SamplingParams

    t0 = time.perf_counter()
    eng = Engine(
        loaded,
        model_path="bench",
        device=DEV,
        max_running_requests=batch,
        context_length=args.prompt_len + args.new_tokens + 8,
        cuda_graph=graph,
    )
    setup_s = time.perf_counter() - t0
    eng.start()
    try:
        warm = SamplingParams(max_new_tokens=16, temperature=args.temperature, ignore_eos=True)
        engine_run(eng, prompts, batch, warm)
        params = SamplingParams(
            max_new_tokens=args.new_tokens, temperature=args.temperature, ignore_eos=True
        )
        times = [engine_run(eng, prompts, batch, params) for _ in range(args.repeats)]
        micro = micro_step(eng, batch, args)
        bound = bandwidth_bound(
            loaded, eng.im, batch, args.prompt_len, args.new_tokens, args.bandwidth
        )
    finally:
        eng.stop()
    best = min(times)
    del eng
    if DEV == "cuda":
        torch.cuda.empty_cache()
    tok_s = batch * args.new_tokens / best
    return {
        "cuda_graph": graph,
        "setup_s": setup_s,
        "times_s": times,
        "tok_s": tok_s,
        "bound": bound,
        "fraction_of_bound": tok_s / bound["bound_tok_s"],
        "micro": micro,
    }


def micro_step(eng: Any, batch: int, args: argparse.Namespace) -> dict[str, float]:
    """Median ms of one decode forward (context ~ prompt + new/2) and of one sample()."""
    from runtime.engines.embedded.sampling import SamplingParams, sample

    im = eng.im
    pos = torch.full((batch,), args.prompt_len + args.new_tokens // 2, device=DEV)
    tok = torch.randint(1, min(1000, eng.vocab_size), (batch,), device=DEV)

    def timed(fn: Any, n: int = 20) -> float:
        fn()
        sync()
        ts = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            sync()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts) * 1e3

    logits = im.decode_step(tok, pos)[0]
    params = [SamplingParams(temperature=args.temperature)] * batch
    gens = [torch.Generator().manual_seed(i) for i in range(batch)]
    return {
        "forward_ms": timed(lambda: im.decode_step(tok, pos)),
        "sample_ms": timed(lambda: sample(logits, params, gens)),
        "greedy_sample_ms": timed(
            lambda: sample(logits, [SamplingParams(temperature=0.0)] * batch, gens)
        ),
    }


def bench_hf(hf: Any, prompts: torch.Tensor, batch: int, args: argparse.Namespace) -> dict:
    ids = prompts[:batch].to(DEV)

    def run(n: int) -> float:
        sync()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = hf.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=n,
                min_new_tokens=n,
                do_sample=True,
                temperature=args.temperature,
                top_k=0,
                top_p=1.0,
                pad_token_id=0,
                eos_token_id=None,
            )
        sync()
        assert out.shape[1] == ids.shape[1] + n, out.shape
        return time.perf_counter() - t0

    run(8)
    t = run(args.new_tokens)
    return {"times_s": [t], "tok_s": batch * args.new_tokens / t}


def parity(loaded: Any, hf: Any, prompt: torch.Tensor) -> dict[str, float]:
    """Max |logit diff| between the OLMo-core model and the HF reload on one prompt."""
    ids = prompt[None].to(DEV)
    with torch.no_grad():
        ours = loaded.model(ids).float()
        theirs = hf(ids).logits.float()
    diff = (ours - theirs).abs().max().item()
    agree = (ours.argmax(-1) == theirs.argmax(-1)).float().mean().item()
    return {
        "max_abs_logit_diff": diff,
        "argmax_agreement": agree,
        "logit_scale": ours.abs().max().item(),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default="builtin:olmo3-1b?vocab_size=100352")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--modes", nargs="+", default=["eager", "graph"], choices=["eager", "graph"])
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--bandwidth", type=float, default=4.3e12)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu")
    ap.add_argument("--device", default="cuda", help="cpu only for smoke tests")
    args = ap.parse_args()
    global DEV, DTYPE
    DEV = args.device
    DTYPE = torch.bfloat16 if DEV == "cuda" else torch.float32

    from runtime.engines.embedded.tiny import ByteTokenizer
    from runtime.models import export_hf, load_model

    t0 = time.perf_counter()
    loaded = load_model(args.source, device="cpu", dtype=torch.float32)
    build_s = time.perf_counter() - t0
    report: dict[str, Any] = {
        "benchmark": "gpu_decode",
        "source": args.source,
        "params": sum(p.numel() for p in loaded.model.parameters()),
        "device_name": torch.cuda.get_device_name() if DEV == "cuda" else "cpu",
        "torch": torch.__version__,
        "prompt_len": args.prompt_len,
        "new_tokens": args.new_tokens,
        "temperature": args.temperature,
        "build_s": build_s,
        "rows": [],
    }
    hf = None
    if not args.skip_hf:
        import transformers
        from transformers import AutoModelForCausalLM

        report["transformers"] = transformers.__version__
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            export_hf(loaded, loaded.tokenizer, tmp, dtype=DTYPE)
            report["export_hf_s"] = time.perf_counter() - t0
            hf = AutoModelForCausalLM.from_pretrained(tmp, dtype=DTYPE).to(DEV).eval()
        report["hf_attn_implementation"] = getattr(hf.config, "_attn_implementation", None)
    loaded.model.to(device=DEV, dtype=DTYPE)
    loaded.tokenizer = ByteTokenizer()  # random ids: decode only what a byte tokenizer can
    vocab = int(loaded.model.embeddings.weight.shape[0])
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(1, vocab, (max(args.batch_sizes), args.prompt_len), generator=gen)
    if hf is not None:
        report["parity"] = parity(loaded, hf, prompts[0])
        print("parity", report["parity"], flush=True)

    for b in args.batch_sizes:
        row: dict[str, Any] = {"batch": b}
        for mode in args.modes:
            try:
                row[mode] = bench_engine(loaded, prompts, b, args, graph=mode == "graph")
                print(
                    f"b{b} {mode}: {row[mode]['tok_s']:.0f} tok/s {row[mode]['micro']}", flush=True
                )
            except Exception as exc:  # record and go on: one broken mode must not hide the rest
                row[mode] = {"error": f"{type(exc).__name__}: {exc}"}
                print(f"b{b} {mode} FAILED: {exc}", flush=True)
        if hf is not None:
            row["hf"] = bench_hf(hf, prompts, b, args)
            print(f"b{b} hf: {row['hf']['tok_s']:.0f} tok/s", flush=True)
        report["rows"].append(row)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu_decode.json").write_text(json.dumps(report, indent=2) + "\n")

    report["time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    path = args.out / "gpu_decode.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {path}\n")
    print(
        f"{report['source']} ({report['params'] / 1e9:.2f}B), prompt {args.prompt_len}, "
        f"new {args.new_tokens}, T={args.temperature}"
    )
    print(
        f"{'batch':>5} {'mode':>6} {'tok/s':>9} {'hf tok/s':>9} {'x hf':>6} {'bound':>9} {'%bound':>7} {'fwd ms':>7} {'smp ms':>7}"
    )
    for row in report["rows"]:
        hf_t = row.get("hf", {}).get("tok_s")
        for mode in args.modes:
            r = row[mode]
            if "error" in r:
                print(f"{row['batch']:>5} {mode:>6} ERROR {r['error'][:60]}")
                continue
            x = f"{r['tok_s'] / hf_t:.1f}" if hf_t else "n/a"
            print(
                f"{row['batch']:>5} {mode:>6} {r['tok_s']:>9.0f} {hf_t or 0:>9.0f} {x:>6} "
                f"{r['bound']['bound_tok_s']:>9.0f} {r['fraction_of_bound']:>7.1%} "
                f"{r['micro']['forward_ms']:>7.2f} {r['micro']['sample_ms']:>7.2f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
