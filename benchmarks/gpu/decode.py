"""GPU decode: embedded engine variants vs ``transformers`` generate on the same weights.

The OLMo-core model (``builtin:olmo3-1b`` with a 100352 vocab: hidden 2048, 16 layers,
1.48B params) is exported with ``runtime.models.export_hf`` and reloaded by
``transformers`` (``from_pretrained``), so both sides hold the same bf16 weights; a
logits parity check on one prompt guards that. Both sides sample (temperature 1) a fixed
number of tokens per request (EOS ignored), all requests submitted at once; the time
includes prefill. Every run (warm-up, timed, profiled; either side) gets new random prompts,
so the engine prefills them all, as transformers does, rather than copying a previous run's
prompts from its prefix cache; each side reports its best of ``--repeats`` timed runs.

Engine variants (``--variants``, one process, A/B in one GPU call) are comma-separated
options: a mode ``eager`` or ``graph``, then ``kv_step=N`` (graph KV-length bucket, 0 = the
whole cache row), ``prefill=N`` (prefill token budget per forward), ``compile``
(torch.compile of the decode step), ``fused`` (the sampler runs inside the captured step
instead of after the graph; opt-in in the engine until measured here), ``nooverlap``
(with ``fused``: each step's tokens are read before the next step is launched, the
engine's ``overlap_schedule=False``; by default step N+1 is launched first and the host's
bookkeeping of step N overlaps it) and ``sdpa=B`` (``default``, ``no-cudnn``, ``flash``,
``efficient``, ``math``: which SDPA backends torch may pick; ``flash``/``efficient`` keep
``math`` as the fallback for calls the fused kernel refuses), ``attn=flex`` (FlexAttention's
block-sparse decode: each row reads its own KV blocks, one graph per batch size; the
engine's ``--attention-backend flex_attention``), ``attn=triton`` (the split-KV Triton kernel:
each row reads exactly its own entries, one graph per batch size; ``--attention-backend
triton``), ``unfused`` (q/k/v and the
feed-forward's gate/up as separate matrix products, as before the engine merged them),
``compileprefill`` (the prefill's blocks through their compiled regions, the engine's
default on a GPU; a variant without it prefills eagerly), ``kv=fp8_e4m3`` (or ``fp8_e5m2``:
the KV cache in one byte an entry, ``--kv-cache-dtype``; the bound then counts those bytes).
Each variant reports tok/s, a
per-step breakdown from a profiled run (forward / sample / other ms per decode step, plus
prefill ms; profiling syncs inside each step, so that run is never overlapped), and micro
timings of one forward and one sample; ``--kernel-profile`` adds one run under
``torch.profiler``: GPU ms per decode step by kernel and by class (attention, matmul, ...).
``transformers`` runs with
its dynamic cache and its static cache (each optionally under an SDPA setting); the table
compares against the best of them.

Bandwidth bound: per decode step the weights (all but the embedding table) plus the KV
cache each request attends to (window-limited) plus the new KV are read/written once;
the sum over all steps at ``--bandwidth`` (by default the GPU's copy rate, measured at the
start: 4.3 TB/s on one NVIDIA H200) gives the
fastest possible decode. ``%bound`` divides it by the whole run (prefill included, as the
tok/s and the comparison with transformers are); ``%b dec`` by the run less its prefill
(all prompts are admitted together, so prefill comes once, before every decode step), the
fraction the bound itself describes.

    python benchmarks/gpu/decode.py --batch-sizes 64 256 --prompt-len 128 --new-tokens 256
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from runtime.engines.embedded.__main__ import KV_CACHE_DTYPE_NAMES  # noqa: E402

DEV = "cuda"
DTYPE = torch.bfloat16
SDPA_BACKENDS = ("default", "no-cudnn", "flash", "efficient", "math")


def sync() -> None:
    if DEV == "cuda":
        torch.cuda.synchronize()


@dataclass
class Variant:
    """One engine configuration of the A/B run."""

    name: str
    graph: bool = True
    kv_step: int = 256
    prefill: int = 16384
    compile: bool = False
    sdpa: str | None = None  # None: the run's --sdpa-backend
    # sampling inside the captured step: the engine's GPU default; a variant without
    # `fused` turns it off
    fused: bool = False
    overlap: bool = True  # with `fused`: launch step N+1 before reading step N (`nooverlap`)
    attention: str = "sdpa"  # `attn=flex`: FlexAttention's block-sparse decode; `attn=triton`
    fuse: bool = True  # q/k/v and gate/up as one product each; `unfused`: separate products
    # the prefill's blocks through their compiled regions (`compileprefill`; the engine's
    # default on a GPU, so a variant without it passes compile_prefill=False)
    compile_prefill: bool = False
    kv_dtype: str = "auto"  # `kv=fp8_e4m3`: the engine's --kv-cache-dtype


ADMISSION_KEYS = (
    "num_admissions",
    "num_prompt_tokens",
    "num_cached_prompt_tokens",
    "prefix_cache_s",
    "prefill_wait_s",
)


def parse_variant(text: str) -> Variant:
    """``graph,kv_step=0,sdpa=no-cudnn`` -> Variant; ValueError names the bad part."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or parts[0] not in ("eager", "graph"):
        raise ValueError(f"variant {text!r}: must start with 'eager' or 'graph'")
    v = Variant(name=text, graph=parts[0] == "graph")
    for part in parts[1:]:
        key, eq, value = part.partition("=")
        try:
            if key == "compile" and not eq:
                v.compile = True
            elif key == "fused" and not eq:
                v.fused = True
            elif key == "nooverlap" and not eq:
                v.overlap = False
            elif key == "unfused" and not eq:
                v.fuse = False
            elif key == "compileprefill" and not eq:
                v.compile_prefill = True
            elif key == "kv_step" and eq:
                v.kv_step = int(value)
            elif key == "prefill" and eq:
                v.prefill = int(value)
            elif key == "sdpa" and eq and value in SDPA_BACKENDS:
                v.sdpa = value
            elif key == "attn" and value in ("sdpa", "flex", "triton"):
                v.attention = value
            elif key == "kv" and value in KV_CACHE_DTYPE_NAMES:
                v.kv_dtype = value
            else:
                raise ValueError
        except ValueError:
            raise ValueError(
                f"variant {text!r}: bad option {part!r} (kv_step=N, prefill=N, compile, fused, "
                f"nooverlap, unfused, compileprefill, attn=sdpa|flex|triton, kv=fp8_e4m3|fp8_e5m2, sdpa={'|'.join(SDPA_BACKENDS)})"
            ) from None
    if v.kv_step < 0 or v.prefill < 1:
        raise ValueError(f"variant {text!r}: kv_step must be >= 0 and prefill >= 1")
    return v


def copy_rate(gib: int = 2, repeats: int = 5) -> float:
    """This GPU's device-to-device copy rate in bytes/s (each copied byte read and written
    once), best of ``repeats``: the bound's bandwidth, so a fraction of it means the same
    on an H100 as on an H200."""
    src = torch.empty(gib << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / 1000)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * (gib << 30) / best


def set_sdpa_backend(name: str) -> None:
    """Enable exactly the SDPA backends ``name`` allows (process-global torch flags)."""
    if DEV != "cuda":
        return
    b = torch.backends.cuda
    allow = {
        "default": (True, True, True, True),
        "no-cudnn": (True, True, True, False),
        "flash": (True, False, True, False),
        "efficient": (False, True, True, False),
        "math": (False, False, True, False),
    }[name]
    flash, efficient, math, cudnn = allow
    b.enable_flash_sdp(flash)
    b.enable_mem_efficient_sdp(efficient)
    b.enable_math_sdp(math)
    b.enable_cudnn_sdp(cudnn)


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


class FreshPrompts:
    """Random prompts of one length, new ones for every run: each run prefills all of its
    prompts (as transformers does), never a prefix the engine's radix tree kept from the
    run before, and the same seed gives the same sequence of runs."""

    def __init__(self, vocab: int, length: int, seed: int = 0) -> None:
        self.vocab, self.length = vocab, length
        self.gen = torch.Generator().manual_seed(seed)

    def __call__(self, batch: int) -> torch.Tensor:
        return torch.randint(1, self.vocab, (batch, self.length), generator=self.gen)


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
    eng.submit_many(reqs)
    if not done.wait(600):
        raise TimeoutError("engine did not finish")
    sync()
    if errors:
        raise RuntimeError(f"engine aborted requests: {errors[:2]}")
    return time.perf_counter() - t0


def _timings_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0.0) for k in after}


def bench_engine(
    loaded: Any, prompts: FreshPrompts, batch: int, args: argparse.Namespace, v: Variant
) -> dict[str, Any]:
    from runtime.engines.embedded.engine import Engine
    from runtime.engines.embedded.sampling import SamplingParams

    set_sdpa_backend(v.sdpa or args.sdpa_backend)
    t0 = time.perf_counter()
    eng = Engine(
        loaded,
        model_path="bench",
        device=DEV,
        max_running_requests=batch,
        context_length=args.prompt_len + args.new_tokens + 8,
        cuda_graph=v.graph,
        graph_kv_step=v.kv_step,
        prefill_tokens=v.prefill,
        compile_decode=v.compile,
        compile_prefill=v.compile_prefill,
        fused_sampling=v.fused,
        overlap_schedule=v.overlap,
        decode_attention=v.attention,
        fuse_projections=v.fuse,
        kv_cache_dtype=v.kv_dtype,
    )
    setup_s = time.perf_counter() - t0
    eng.start()
    try:
        params = SamplingParams(
            max_new_tokens=args.new_tokens, temperature=args.temperature, ignore_eos=True
        )
        # warm-up at full length: captures (or compiles) every bucket the timed runs use
        t0 = time.perf_counter()
        engine_run(eng, prompts(batch), batch, params)
        warmup_s = time.perf_counter() - t0
        times, steps, prefills, admissions = [], [], [], []
        for _ in range(args.repeats):
            s0 = eng.stats["num_decode_steps"]
            p0 = eng.timings["prefill_s"]
            before = {**eng.timings, **eng.stats}
            times.append(engine_run(eng, prompts(batch), batch, params))
            steps.append(eng.stats["num_decode_steps"] - s0)
            # all prompts are admitted together, so prefill (synchronous: its first
            # tokens go to the host) runs once, before every decode step
            prefills.append(eng.timings["prefill_s"] - p0)
            # what each run's admission did: rounds, tokens the prefix cache served, the
            # tree's own seconds (inserts, evictions) and the wait for the first tokens; a
            # first timed run slower than the rest shows here whether it admitted differently
            after = {**eng.timings, **eng.stats}
            admissions.append({k: after.get(k, 0) - before.get(k, 0) for k in ADMISSION_KEYS})
        # one profiled run (syncs between forward and sampling) for the breakdown
        eng.profile = True
        before = dict(eng.timings)
        s0 = eng.stats["num_decode_steps"]
        prof_wall = engine_run(eng, prompts(batch), batch, params)
        eng.profile = False
        d = _timings_delta(before, eng.timings)
        n = max(1, eng.stats["num_decode_steps"] - s0)
        breakdown = {
            "steps": n,
            "wall_ms_per_step": prof_wall / n * 1e3,
            "prefill_ms_total": d["prefill_s"] * 1e3,
            "prefix_cache_ms_total": d.get("prefix_cache_s", 0.0) * 1e3,  # of prefill: the tree
            "forward_ms": d["forward_s"] / n * 1e3,
            "sample_ms": d["sample_s"] / n * 1e3,
            "other_ms": (d["decode_s"] - d["forward_s"] - d["sample_s"]) / n * 1e3,
            "outside_step_ms": (prof_wall - d["decode_s"] - d["prefill_s"]) / n * 1e3,
        }
        micro = micro_step(eng, batch, args)
        kernels = kernel_profile(eng, prompts, batch, params) if args.kernel_profile else None
        bound = bandwidth_bound(
            loaded, eng.im, batch, args.prompt_len, args.new_tokens, args.bandwidth
        )
        graphs = len(getattr(eng.im, "_graphs", {}) or {})
        stats = {
            k: eng.stats.get(k, 0)
            for k in ("num_decode_steps", "num_overlapped_steps", "num_discarded_tokens")
        }
        compiled = eng.im.compiled
        compiled_prefill = eng.im.compiled_prefill
        capture_s = float(getattr(eng.im, "capture_s", 0.0))
    finally:
        eng.stop()
        set_sdpa_backend("default")
    best = min(times)
    best_prefill = prefills[times.index(best)]
    del eng
    gc.collect()  # drop the graphs and the KV cache before the next variant allocates
    if DEV == "cuda":
        torch.cuda.empty_cache()
    tok_s = batch * args.new_tokens / best
    return {
        "variant": v.__dict__,
        "setup_s": setup_s,
        "warmup_s": warmup_s,
        "times_s": times,
        "decode_steps": steps,
        "tok_s": tok_s,
        "bound": bound,
        "fraction_of_bound": tok_s / bound["bound_tok_s"],
        # the bound counts decode steps only (weights and KV read per step); the rate
        # above also carries the prompts' prefill, a compute-bound pass the bound leaves out
        "prefill_s": prefills,
        "admissions": admissions,
        "decode_only_s": best - best_prefill,
        "decode_fraction_of_bound": bound["bound_s"] / max(best - best_prefill, 1e-9),
        "breakdown": breakdown,
        "micro": micro,
        "graphs_captured": graphs,
        "compiled": compiled,
        "compiled_prefill": compiled_prefill,
        "compile_and_capture_s": capture_s,
        "engine_stats": stats,
        "kernels": kernels,
    }


KERNEL_CLASSES = (  # first match wins: kernel name substrings -> what the kernel does
    ("attention", ("fmha", "attention", "flash", "flex", "decoding", "split_kv")),
    ("matmul", ("gemm", "cutlass", "xmma", "nvjet", "cublas", "sm90_", "sm80_", "ampere_")),
    ("sort / scan", ("sort", "radix", "scan", "cub::")),
    ("triton fused", ("triton_",)),
    ("copy / index", ("copy", "memcpy", "memset", "index", "scatter", "gather", "cat")),
)


def kernel_class(name: str) -> str:
    low = name.lower()
    for cls, keys in KERNEL_CLASSES:
        if any(k in low for k in keys):
            return cls
    return "other"


def kernel_profile(eng: Any, prompts: FreshPrompts, batch: int, params: Any) -> dict[str, Any]:
    """One run under ``torch.profiler``: GPU time per kernel (the kernels inside graph
    replays included), summed per decode step and per class (attention, matmul, ...), so
    what holds the step back is named, not guessed."""
    from torch.profiler import ProfilerActivity, profile

    s0 = eng.stats["num_decode_steps"]
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        wall = engine_run(eng, prompts(batch), batch, params)
    steps = max(1, eng.stats["num_decode_steps"] - s0)
    per: dict[str, list[float]] = {}
    for evt in prof.events():
        if getattr(evt, "device_type", None) != torch.autograd.DeviceType.CUDA:
            continue
        t = evt.time_range.elapsed_us()
        acc = per.setdefault(evt.name, [0.0, 0.0])
        acc[0] += t / 1e3  # us -> ms
        acc[1] += 1
    total = sum(v[0] for v in per.values())
    classes: dict[str, float] = {}
    for name, (ms, _) in per.items():
        cls = kernel_class(name)
        classes[cls] = classes.get(cls, 0.0) + ms / steps
    top = sorted(per.items(), key=lambda kv: -kv[1][0])[:25]
    return {
        "steps": steps,
        "wall_ms_per_step": wall / steps * 1e3,
        "gpu_ms_per_step": total / steps,
        "class_ms_per_step": dict(sorted(classes.items(), key=lambda kv: -kv[1])),
        "top": [
            {
                "kernel": n[:160],
                "calls": int(c),
                "ms_per_step": ms / steps,
                "class": kernel_class(n),
            }
            for n, (ms, c) in top
        ],
    }


def micro_step(eng: Any, batch: int, args: argparse.Namespace) -> dict[str, float]:
    """Median ms of one decode forward (context ~ prompt + new/2) and of one sample."""
    from runtime.engines.embedded.sampling import SamplingBatch, SamplingParams, sample_batch

    im = eng.im
    ctx = args.prompt_len + args.new_tokens // 2
    pos = torch.full((batch,), ctx, device=DEV)
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

    logits = im.decode_step(tok, pos, kv_len=ctx + 1)[0]
    seeds = list(range(batch))
    cnt = torch.zeros(batch, dtype=torch.long, device=DEV)
    sampled = SamplingBatch.build(
        [SamplingParams(temperature=args.temperature)] * batch, seeds, DEV
    )
    greedy = SamplingBatch.build([SamplingParams(temperature=0.0)] * batch, seeds, DEV)
    top_p = SamplingBatch.build([SamplingParams(top_p=0.95)] * batch, seeds, DEV)
    return {
        "forward_ms": timed(lambda: im.decode_step(tok, pos, kv_len=ctx + 1)),
        "sample_ms": timed(lambda: sample_batch(logits, sampled, cnt)),
        "greedy_sample_ms": timed(lambda: sample_batch(logits, greedy, cnt)),
        "top_p_sample_ms": timed(lambda: sample_batch(logits, top_p, cnt)),
    }


def bench_hf(
    hf: Any, prompts: FreshPrompts, batch: int, args: argparse.Namespace, spec: str
) -> dict[str, Any]:
    """``spec``: ``dynamic`` or ``static`` cache, optionally ``,sdpa=B``."""
    cache, _, rest = spec.partition(",")
    sdpa = rest.partition("=")[2] if rest.startswith("sdpa=") else "default"
    extra: dict[str, Any] = {}
    if cache == "static":
        extra["cache_implementation"] = "static"
    set_sdpa_backend(sdpa)

    def run(n: int) -> float:
        ids = prompts(batch).to(DEV)
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
                **extra,
            )
        sync()
        assert out.shape[1] == ids.shape[1] + n, out.shape
        return time.perf_counter() - t0

    try:
        t0 = time.perf_counter()
        run(args.new_tokens if cache == "static" else 8)  # static: same shapes as timed
        warm = time.perf_counter() - t0
        # the best of as many timed runs as the engine gets, so both sides take their best
        times = [run(args.new_tokens) for _ in range(max(1, args.repeats))]
    finally:
        set_sdpa_backend("default")
    best = min(times)
    return {
        "spec": spec,
        "warmup_s": warm,
        "times_s": times,
        "tok_s": batch * args.new_tokens / best,
    }


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


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        epilog="variants e.g.: graph  graph,kv_step=0  graph,sdpa=no-cudnn  graph,compile  eager  "
        "graph,compile,fused  graph,compile,fused,nooverlap",
    )
    ap.add_argument("--source", default="builtin:olmo3-1b?vocab_size=100352")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument(
        "--variants",
        nargs="+",
        default=["graph", "graph,kv_step=0", "graph,sdpa=no-cudnn"],
        help="engine configurations to A/B (see the module docstring)",
    )
    ap.add_argument(
        "--modes", nargs="+", choices=["eager", "graph"], help="old spelling: plain variants"
    )
    ap.add_argument("--sdpa-backend", default="default", choices=SDPA_BACKENDS)
    ap.add_argument(
        "--hf",
        nargs="*",
        default=["dynamic", "static", "dynamic,sdpa=no-cudnn"],
        help="transformers configurations: dynamic|static[,sdpa=B]; none = skip",
    )
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument(
        "--deadline-s",
        type=float,
        default=0.0,
        help="skip what is left once this many seconds have passed (0: no limit)",
    )
    ap.add_argument(
        "--bandwidth",
        type=float,
        default=None,
        help="bytes/s of the bound (default: this GPU's copy rate, measured at the start; "
        "4.3e12 on one NVIDIA H200)",
    )
    ap.add_argument(
        "--kernel-profile",
        action="store_true",
        help="profile one more run per engine variant: GPU ms per decode step by kernel and class",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu")
    ap.add_argument("--device", default="cuda", help="cpu only for smoke tests")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        variants = [parse_variant(v) for v in (args.modes or args.variants)]
        for spec in args.hf:
            cache, _, rest = spec.partition(",")
            if cache not in ("dynamic", "static") or (
                rest and rest.partition("=")[2] not in SDPA_BACKENDS
            ):
                raise ValueError(f"--hf {spec!r}: expected dynamic|static[,sdpa=B]")
    except ValueError as exc:
        ap.error(str(exc))  # exit 2
    if args.skip_hf:
        args.hf = []
    global DEV, DTYPE
    DEV = args.device
    DTYPE = torch.bfloat16 if DEV == "cuda" else torch.float32
    start = time.perf_counter()
    measured_rate = args.bandwidth is None
    if measured_rate:
        args.bandwidth = copy_rate() if DEV == "cuda" else 4.3e12
        how = "measured copy rate" if DEV == "cuda" else "an H200's copy rate: no GPU here"
        print(f"bandwidth bound at {args.bandwidth / 1e12:.2f} TB/s ({how})")

    def out_of_time(what: str) -> bool:
        if args.deadline_s and time.perf_counter() - start > args.deadline_s:
            print(f"deadline: skipping {what}", flush=True)
            return True
        return False

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
        "sdpa_backend": args.sdpa_backend,
        "bandwidth": args.bandwidth,
        "bandwidth_measured": measured_rate and DEV == "cuda",
        "build_s": build_s,
        "rows": [],
    }
    hf = None
    if args.hf:
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
    loaded.tokenizer = ByteTokenizer()  # type: ignore[assignment]  # random ids: bytes only
    vocab = int(loaded.model.embeddings.weight.shape[0])
    prompts = FreshPrompts(vocab, args.prompt_len)
    if hf is not None:
        report["parity"] = parity(loaded, hf, prompts(1)[0])
        print("parity", report["parity"], flush=True)
    path = args.out / "gpu_decode.json"

    def save() -> None:
        args.out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2) + "\n")

    rows: dict[int, dict[str, Any]] = {}
    for b in args.batch_sizes:
        rows[b] = {"batch": b, "engine": {}, "hf": {}, "hf_best_tok_s": None}
        report["rows"].append(rows[b])
    hf_specs = args.hf if hf is not None else []
    # priority order, so a deadline cuts the least important runs: the first engine variant
    # and the first transformers setting at every batch size, then the rest
    plan: list[tuple[str, Any]] = [("engine", v) for v in variants[:1]]
    plan += [("hf", s) for s in hf_specs[:1]]
    plan += [("engine", v) for v in variants[1:]] + [("hf", s) for s in hf_specs[1:]]
    for kind, item in plan:
        for b in args.batch_sizes:
            row = rows[b]
            label = item.name if kind == "engine" else f"hf {item}"
            if out_of_time(f"b{b} {label}"):
                continue
            try:
                if kind == "engine":
                    r = bench_engine(loaded, prompts, b, args, item)
                    row["engine"][item.name] = r
                    print(
                        f"b{b} {label}: {r['tok_s']:.0f} tok/s {r['breakdown']} {r['micro']} {r['engine_stats']}"
                    )
                    if r["kernels"]:
                        print_kernels(r["kernels"])
                else:
                    row["hf"][item] = bench_hf(hf, prompts, b, args, item)
                    print(f"b{b} {label}: {row['hf'][item]['tok_s']:.0f} tok/s")
            except Exception as exc:  # record and go on: one broken run must not hide the rest
                key = item.name if kind == "engine" else item
                row[kind][key] = {"error": f"{type(exc).__name__}: {exc}"}
                print(f"b{b} {label} FAILED: {exc}")
            sys.stdout.flush()
            ok = [h["tok_s"] for h in row["hf"].values() if "tok_s" in h]
            row["hf_best_tok_s"] = max(ok) if ok else None
            save()

    report["time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    report["wall_s"] = time.perf_counter() - start
    save()
    print(f"wrote {path}\n")
    print_table(report)
    return 0


def print_kernels(k: dict[str, Any]) -> None:
    print(
        f"  kernels: {k['gpu_ms_per_step']:.3f} GPU ms / {k['wall_ms_per_step']:.3f} wall ms "
        f"per decode step ({k['steps']} steps, prefill included)"
    )
    print("  " + ", ".join(f"{c} {ms:.3f}" for c, ms in k["class_ms_per_step"].items()))
    for t in k["top"]:
        print(
            f"    {t['ms_per_step']:8.4f} ms {t['calls']:>7} x  {t['class']:<13} {t['kernel'][:110]}"
        )


def print_table(report: dict[str, Any]) -> None:
    print(
        f"{report['source']} ({report['params'] / 1e9:.2f}B), prompt {report['prompt_len']}, "
        f"new {report['new_tokens']}, T={report['temperature']}"
    )
    for row in report["rows"]:
        for spec, h in row["hf"].items():
            got = f"{h['tok_s']:.0f} tok/s" if "tok_s" in h else h.get("error", "")[:60]
            print(f"  b{row['batch']} transformers {spec}: {got}")
    head = (
        f"{'batch':>5} {'variant':<28} {'tok/s':>8} {'x hf':>6} {'%bound':>7} {'%b dec':>7} "
        f"{'fwd ms':>7} {'smp ms':>7} {'oth ms':>7} {'pre ms':>8} {'cmp s':>6}"
    )
    print(head)
    for row in report["rows"]:
        hf_t = row.get("hf_best_tok_s")
        for name, r in row["engine"].items():
            if "error" in r:
                print(f"{row['batch']:>5} {name:<28} ERROR {r['error'][:70]}")
                continue
            x = f"{r['tok_s'] / hf_t:.1f}" if hf_t else "n/a"
            bd = r["breakdown"]
            print(
                f"{row['batch']:>5} {name:<28} {r['tok_s']:>8.0f} {x:>6} "
                f"{r['fraction_of_bound']:>7.1%} {r.get('decode_fraction_of_bound', 0.0):>7.1%} "
                f"{bd['forward_ms']:>7.2f} {bd['sample_ms']:>7.2f} "
                f"{bd['other_ms'] + bd['outside_step_ms']:>7.2f} {bd['prefill_ms_total']:>8.1f} "
                f"{r.get('compile_and_capture_s', 0.0):>6.1f}"
            )


if __name__ == "__main__":
    raise SystemExit(main())
