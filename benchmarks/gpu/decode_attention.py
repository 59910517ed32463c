"""GPU decode attention alone: SDPA over the batch's length bucket (what the engine's
``torch_native`` backend runs) against the split-KV Triton kernel reading each row's own
entries (``--attention-backend triton``), on the engine's cache layout. With ``--group G``:
rows in GRPO groups of ``G`` that share a prompt, the kernel with each row holding its own
copy against the kernel reading each group's prompt from one slot (the engine's shared
prompts).

Per batch size: ``B`` rows at positions drawn uniformly from ``--min-len..--max-len``
(the decode benchmark's 129..384 by default), the model's 16 heads of 128 (OLMo 1B), a
cache row of ``--cache-len`` entries. SDPA attends ``cache[:B, :, :L]`` with the boolean
mask, ``L`` the batch's longest row rounded up to ``--kv-step`` (the graph bucket); the
kernel reads ``lo..hi`` per row. Each call is timed by CUDA events over a CUDA graph of
``--calls`` back-to-back calls (as the engine replays them), best of ``--repeats``; the
effective rate counts the K/V bytes each side reads (SDPA: the bucket; the kernel: the
rows' own entries) and the bytes the rows need. Also sweeps the kernel's block size,
warps and split count, and checks both agree.

    python benchmarks/gpu/decode_attention.py --batch-sizes 64 256
    python benchmarks/gpu/decode_attention.py --batch-sizes 128 --group 8 --new-lens 1 1024
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from runtime.engines.embedded.__main__ import KV_CACHE_DTYPE_NAMES  # noqa: E402


def graph_time_us(fn: Any, calls: int, repeats: int) -> float:
    """Microseconds per call: ``calls`` calls captured in one CUDA graph, best replay."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    best = float("inf")
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) * 1000 / calls)
    return best


def run_batch(args: argparse.Namespace, bsz: int) -> dict[str, Any]:
    from runtime.engines.embedded import triton_decode as td
    from runtime.engines.embedded.forward import kv_cache_dtype

    dev, dtype = "cuda", torch.bfloat16
    kv_dtype = kv_cache_dtype(args.kv_dtype, dtype)
    heads, dim = args.heads, args.head_dim
    g = torch.Generator(device="cpu").manual_seed(bsz)
    hi = torch.randint(args.min_len, args.max_len + 1, (bsz,), generator=g).to(dev)
    lo = torch.zeros_like(hi)
    shape = (bsz, heads, args.cache_len, dim)
    k = torch.randn(shape, device=dev, dtype=dtype).to(kv_dtype)
    v = torch.randn(shape, device=dev, dtype=dtype).to(kv_dtype)
    q = torch.randn(bsz, heads, dim, device=dev, dtype=dtype)
    longest = int(hi.max())
    step = args.kv_step
    bucket = min(args.cache_len, -(-longest // step) * step) if step > 0 else args.cache_len
    mask = (torch.arange(bucket, device=dev).view(1, -1) < hi.view(-1, 1)).view(bsz, 1, 1, -1)
    scale = dim**-0.5

    def sdpa() -> torch.Tensor:  # an FP8 cache's bucket converted first, as the engine does
        return F.scaled_dot_product_attention(
            q.unsqueeze(2),
            k[:, :, :bucket].to(dtype),
            v[:, :, :bucket].to(dtype),
            attn_mask=mask,
            scale=scale,
        )

    entry = 2 * heads * dim * k.element_size()  # K and V bytes of one entry as stored
    needed = int(hi.sum()) * entry
    padded = bsz * bucket * entry
    ref = sdpa()[:, :, 0].float()
    out: dict[str, Any] = {
        "batch": bsz,
        "kv_dtype": str(kv_dtype).removeprefix("torch."),
        "bucket": bucket,
        "mean_len": float(hi.float().mean()),
        "needed_mb": needed / 1e6,
        "bucket_mb": padded / 1e6,
    }
    us = graph_time_us(sdpa, args.calls, args.repeats)
    out["sdpa"] = {"us": us, "read_tb_s": padded / us / 1e6, "needed_tb_s": needed / us / 1e6}
    default_splits = td.split_count(bsz, heads, torch.device(dev))
    # every row reads only its own entries (made once: not timed inside the calls)
    own = torch.arange(bsz, device=dev)
    unshared = torch.zeros(bsz, dtype=torch.long, device=dev)
    rows = []
    configs = [
        (block, warps, splits, stages)
        for block in args.blocks
        for warps in args.warps
        for splits in sorted({default_splits, *args.splits})
        for stages in args.stages
    ]
    block, stages = td.launch_config(k.element_size())
    default = (block, td.NUM_WARPS, default_splits, stages)
    for block, warps, splits, stages in [default, *(c for c in configs if c != default)]:

        def kernel(b: int = block, w: int = warps, s: int = splits, n: int = stages) -> Any:
            return td._launch(q, k, v, lo, hi, scale, s, b, w, n, src=own, shared=unshared)

        row: dict[str, Any] = {
            "block": block,
            "warps": warps,
            "splits": splits,
            "stages": stages,
            "default": (block, warps, splits, stages) == default,
        }
        try:
            row["max_abs_err"] = (kernel().float() - ref).abs().max().item()
            us = graph_time_us(kernel, args.calls, args.repeats)
        except Exception as exc:  # a config this Triton cannot build: named, not fatal
            row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            rows.append(row)
            continue
        row.update(us=us, needed_tb_s=needed / us / 1e6)
        rows.append(row)
    out["triton"] = rows
    return out


def run_shared(args: argparse.Namespace, bsz: int) -> dict[str, Any]:
    """GRPO groups: ``--group`` rows share one prompt (per group, ``--prompt-lens``
    entries) and add their own generated entries (per row, ``--new-lens``). The kernel
    with every row holding its own copy of its prompt against the kernel reading each
    group's prompt from its first row's slot (the engine's shared prompts); both with the
    default block, warps, stages and split count."""
    from runtime.engines.embedded import triton_decode as td
    from runtime.engines.embedded.forward import kv_cache_dtype

    dev, dtype = "cuda", torch.bfloat16
    kv_dtype = kv_cache_dtype(args.kv_dtype, dtype)
    heads, dim, group = args.heads, args.head_dim, args.group
    g = torch.Generator(device="cpu").manual_seed(bsz)
    groups = -(-bsz // group)
    prompt = torch.randint(args.prompt_lens[0], args.prompt_lens[1] + 1, (groups,), generator=g)
    new = torch.randint(args.new_lens[0], args.new_lens[1] + 1, (bsz,), generator=g)
    leader = (torch.arange(bsz) // group) * group
    plen = prompt[torch.arange(bsz) // group]
    hi = (plen + new).to(dev)
    lo = torch.zeros_like(hi)
    cache_len = int(hi.max())
    shape = (bsz, heads, cache_len, dim)
    k = torch.randn(shape, device=dev, dtype=dtype).to(kv_dtype)
    v = torch.randn(shape, device=dev, dtype=dtype).to(kv_dtype)
    for b in range(bsz):  # the copies the shared variant does not read
        n = int(plen[b])
        k[b, :, :n] = k[int(leader[b]), :, :n]
        v[b, :, :n] = v[int(leader[b]), :, :n]
    q = torch.randn(bsz, heads, dim, device=dev, dtype=dtype)
    scale = dim**-0.5
    splits = td.split_count(bsz, heads, torch.device(dev))
    block, stages = td.launch_config(k.element_size())
    own = (torch.arange(bsz, device=dev), torch.zeros(bsz, dtype=torch.long, device=dev))
    shared = (leader.to(dev), plen.to(dev))
    entry = 2 * heads * dim * k.element_size()
    needed = int(hi.sum()) * entry
    unique = (int(prompt.sum()) + int(new.sum())) * entry
    out: dict[str, Any] = {
        "batch": bsz,
        "group": group,
        "kv_dtype": str(kv_dtype).removeprefix("torch."),
        "splits": splits,
        "mean_prompt": float(prompt.float().mean()),
        "mean_len": float(hi.float().mean()),
        "needed_mb": needed / 1e6,
        "unique_mb": unique / 1e6,
    }
    results = {}
    for name, (src, upto) in (("copied", own), ("shared", shared)):

        def kernel(src: torch.Tensor = src, upto: torch.Tensor = upto) -> Any:
            return td._launch(
                q, k, v, lo, hi, scale, splits, block, stages=stages, src=src, shared=upto
            )

        results[name] = kernel().float()
        us = graph_time_us(kernel, args.calls, args.repeats)
        out[name] = {"us": us, "needed_tb_s": needed / us / 1e6, "unique_tb_s": unique / us / 1e6}
    out["max_abs_diff"] = (results["copied"] - results["shared"]).abs().max().item()
    out["speedup"] = out["copied"]["us"] / out["shared"]["us"]
    # the other ``--blocks`` x ``--warps`` for both layouts, at the default stages
    out["block"], out["warps"], out["stages"] = block, td.NUM_WARPS, stages
    out["sweep"] = []
    for other in args.blocks:
        for warps in args.warps:
            if (other, warps) == (block, td.NUM_WARPS):
                continue
            row: dict[str, Any] = {"block": other, "warps": warps}
            for name, (src, upto) in (("copied", own), ("shared", shared)):

                def tuned(
                    src: torch.Tensor = src,
                    upto: torch.Tensor = upto,
                    b: int = other,
                    w: int = warps,
                ) -> Any:
                    return td._launch(
                        q, k, v, lo, hi, scale, splits, b, w, stages, src=src, shared=upto
                    )

                try:
                    row[name + "_us"] = graph_time_us(tuned, args.calls, args.repeats)
                except Exception as e:  # a config the compiler rejects (registers, shared memory)
                    row[name + "_error"] = f"{type(e).__name__}: {str(e)[:200]}"
            out["sweep"].append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--min-len", type=int, default=129)
    ap.add_argument("--max-len", type=int, default=384)
    ap.add_argument("--cache-len", type=int, default=448, help="the decode benchmark's rows")
    ap.add_argument("--kv-step", type=int, default=256)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--calls", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--blocks", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--warps", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--splits", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--stages", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument(
        "--kv-dtype",
        default="auto",
        choices=KV_CACHE_DTYPE_NAMES,
        help="the cache's storage type (the engine's --kv-cache-dtype; auto: bf16)",
    )
    ap.add_argument(
        "--group",
        type=int,
        default=0,
        help="rows per shared prompt: time the kernel with copied against shared prompts",
    )
    ap.add_argument("--prompt-lens", type=int, nargs=2, default=[150, 310], metavar=("MIN", "MAX"))
    ap.add_argument("--new-lens", type=int, nargs=2, default=[1, 256], metavar=("MIN", "MAX"))
    ap.add_argument("--out", default=None, help="directory for decode_attention.json")
    ap.add_argument("--label", default="", help="decode_attention-LABEL.json")
    args = ap.parse_args()
    t0 = time.perf_counter()
    if args.group > 1:
        shared_prompts(args, t0)
        return
    results = [run_batch(args, b) for b in args.batch_sizes]
    print(f"{'batch':>5} {'variant':>24} {'us':>8} {'TB/s needed':>11} {'err':>8}")
    for r in results:
        s = r["sdpa"]
        print(
            f"{r['batch']:>5} {'sdpa bucket ' + str(r['bucket']):>24} {s['us']:8.1f} "
            f"{s['needed_tb_s']:11.2f} {'':>8}  (reads {s['read_tb_s']:.2f} TB/s)"
        )
        timed = [row for row in r["triton"] if "us" in row]
        for row in sorted(timed, key=lambda x: x["us"])[:6]:
            name = f"b{row['block']} w{row['warps']} s{row['splits']} p{row['stages']}" + (
                " *" if row["default"] else ""
            )
            print(
                f"{r['batch']:>5} {name:>24} {row['us']:8.1f} {row['needed_tb_s']:11.2f} "
                f"{row['max_abs_err']:8.4f}"
            )
        failed = [row for row in r["triton"] if "error" in row]
        if failed:
            print(f"{r['batch']:>5} {len(failed)} configs failed, e.g. {failed[0]['error']}")
        default = [row for row in timed if row["default"]]
        if default:
            d = default[0]
            print(f"{r['batch']:>5} {'default (*)':>24} {d['us']:8.1f} {d['needed_tb_s']:11.2f}")
    name = f"decode_attention-{args.label}.json" if args.label else "decode_attention.json"
    write_results(args, results, t0, name)


def write_results(args: argparse.Namespace, results: list[Any], t0: float, name: str) -> None:
    """``results`` with the arguments and the device, as ``--out``/``name`` (if given)."""
    if not args.out:
        return
    payload = {
        "args": vars(args),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "results": results,
        "seconds": time.perf_counter() - t0,
    }
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / name).write_text(json.dumps(payload, indent=1))


def shared_prompts(args: argparse.Namespace, t0: float) -> None:
    results = [run_shared(args, b) for b in args.batch_sizes]
    print(
        f"{'batch':>5} {'group':>5} {'kv':>13} {'mean len':>8} {'copied us':>9} "
        f"{'shared us':>9} {'speed-up':>8} {'unique TB/s':>11} {'diff':>6}"
    )
    for r in results:
        print(
            f"{r['batch']:>5} {r['group']:>5} {r['kv_dtype']:>13} {r['mean_len']:8.0f} "
            f"{r['copied']['us']:9.1f} {r['shared']['us']:9.1f} {r['speedup']:8.2f} "
            f"{r['shared']['unique_tb_s']:11.2f} {r['max_abs_diff']:6.3f}"
        )
        for row in r["sweep"]:
            times = " ".join(
                f"{name} {row[name + '_us']:.1f} us" if name + "_us" in row else f"{name} failed"
                for name in ("copied", "shared")
            )
            print(f"{'':>5} b{row['block']} w{row['warps']}: {times}")
    write_results(args, results, t0, f"decode_attention_shared-{args.label or 'default'}.json")


if __name__ == "__main__":
    main()
