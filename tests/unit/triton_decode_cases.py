"""Cases for ``test_engine_triton_decode``, run in a child process with
``TRITON_INTERPRET=1`` (Triton reads it when the kernels are decorated, so it must be set
before ``runtime.engines.embedded.triton_decode`` is first imported). Prints one JSON
object of measured errors and counts; the test asserts on it."""

from __future__ import annotations

import json
import sys

import torch
from decode_runs import decode_logits
from torch._dynamo.testing import CompileCounter

from runtime.engines.embedded.tiny import build_tiny
from runtime.engines.embedded.triton_decode import decode_attention, split_count


def reference(q, k, v, lo, hi, scale):  # type: ignore[no-untyped-def]
    """Row by row, head by head, in float64: softmax over entries lo..hi-1."""
    group = q.shape[1] // k.shape[1]
    out = torch.zeros(q.shape, dtype=torch.float64)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            keys = k[b, h // group, lo[b] : hi[b]].double()
            vals = v[b, h // group, lo[b] : hi[b]].double()
            w = torch.softmax(keys @ q[b, h].double() * scale, dim=0)
            out[b, h] = w @ vals
    return out


def own_rows(bsz: int) -> tuple[torch.Tensor, torch.Tensor]:
    """No shared entries: every row reads only its own cache row."""
    return torch.arange(bsz), torch.zeros(bsz, dtype=torch.long)


def shared_prompt_cases() -> dict[str, float]:
    """Rows that read their entries below ``shared[b]`` from row ``src[b]`` (a group's
    prompt held once) against the same rows with the prompt copied into each: the kernel
    gives the same output bit for bit (the same blocks and sums, other addresses), with
    windows that start inside and past the shared part, split chunks and one chunk."""
    from runtime.engines.embedded.triton_decode import _launch

    g = torch.Generator().manual_seed(5)
    out: dict[str, float] = {}
    bsz, heads, kv_heads, length, dim = 6, 4, 2, 300, 64
    src = torch.tensor([0, 0, 0, 3, 3, 5])  # two groups of three and two, one alone
    shared = torch.tensor([150, 150, 150, 70, 70, 0])
    for dtype in (torch.float32, torch.bfloat16, torch.float8_e4m3fn):
        q_dtype = torch.float32 if dtype == torch.float32 else torch.bfloat16
        q = torch.randn(bsz, heads, dim, generator=g).to(q_dtype)
        k = torch.randn(bsz, kv_heads, length, dim, generator=g).to(dtype)
        v = torch.randn(bsz, kv_heads, length, dim, generator=g).to(dtype)
        copied_k, copied_v = k.clone(), v.clone()
        for b in range(bsz):  # each row's own copy of its prompt (what sharing replaces)
            n = int(shared[b])
            copied_k[b, :, :n] = k[src[b], :, :n]
            copied_v[b, :, :n] = v[src[b], :, :n]
            if src[b] != b:  # the shared part of a follower's own row: never read
                k[b, :, :n] = float("nan")
                v[b, :, :n] = float("nan")
        hi = torch.tensor([290, 151, 160, 71, 200, 40])
        lo = torch.tensor([0, 0, 140, 0, 100, 0])  # windows from inside and past the prompt
        name = str(dtype).removeprefix("torch.")
        for splits in (1, 3):
            got = _launch(q, k, v, lo, hi, 0.125, splits, src=src, shared=shared)
            want = _launch(q, copied_k, copied_v, lo, hi, 0.125, splits)
            out[f"{name}-splits{splits}"] = (got.float() - want.float()).abs().max().item()
        ref = reference(q, copied_k.float(), copied_v.float(), lo, hi, 0.125)
        out[f"{name}-reference"] = (got.double() - ref).abs().max().item()
    return out


def kernel_errors() -> dict[str, float]:
    """The kernel against the reference: ragged bounds, windows (lo > 0), grouped heads,
    a head size that is not a power of two, cache rows wider than the batch."""
    g = torch.Generator().manual_seed(0)
    errors = {}
    shapes = {"mha": (3, 4, 4, 300, 64), "gqa": (4, 8, 2, 200, 48), "mqa": (2, 4, 1, 130, 64)}
    from runtime.engines.embedded.triton_decode import _launch

    for name, (bsz, heads, kv_heads, length, dim) in shapes.items():
        for dtype in (torch.float32, torch.bfloat16):
            q = torch.randn(bsz, heads, dim, generator=g).to(dtype)
            k = torch.randn(bsz + 2, kv_heads, length, dim, generator=g).to(dtype)
            v = torch.randn(bsz + 2, kv_heads, length, dim, generator=g).to(dtype)
            hi = torch.randint(1, length + 1, (bsz,), generator=g)
            lo = (hi - torch.randint(1, 160, (bsz,), generator=g)).clamp(min=0)
            hi[0], lo[0] = length, 0  # one full row
            want = reference(q, k, v, lo, hi, 0.125)
            # the batch's own split count, and one chunk a row (no merge kernel)
            for label, got in (
                ("", decode_attention(q, k[:bsz], v[:bsz], lo, hi, *own_rows(bsz), 0.125)),
                ("-whole", _launch(q, k[:bsz], v[:bsz], lo, hi, 0.125, 1)),
            ):
                assert got.dtype == dtype and got.shape == q.shape
                errors[f"{name}{label}-{str(dtype).removeprefix('torch.')}"] = (
                    (got.double() - want).abs().max().item()
                )
    # an FP8 cache: the kernel converts the stored values as it loads them
    for kv_dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        bsz, heads, kv_heads, length, dim = shapes["gqa"]
        q = torch.randn(bsz, heads, dim, generator=g).to(torch.bfloat16)
        k = torch.randn(bsz, kv_heads, length, dim, generator=g).to(kv_dtype)
        v = torch.randn(bsz, kv_heads, length, dim, generator=g).to(kv_dtype)
        hi = torch.randint(1, length + 1, (bsz,), generator=g)
        lo = (hi - torch.randint(1, 160, (bsz,), generator=g)).clamp(min=0)
        want = reference(q, k.float(), v.float(), lo, hi, 0.125)
        got = decode_attention(q, k, v, lo, hi, *own_rows(bsz), 0.125)
        assert got.dtype == torch.bfloat16
        errors[f"gqa-kv-{str(kv_dtype).removeprefix('torch.')}"] = (
            (got.double() - want).abs().max().item()
        )
    return errors


def model_errors() -> dict[str, float]:
    """The engine's decode step with the kernel against SDPA's: windowed layers, grouped
    heads, and through the compiled regions (one trace for windowed and full layers)."""
    out: dict[str, float] = {}
    for name, overrides in {"window": {"window": 130}, "gqa": {"n_kv_heads": 1}}.items():
        loaded = build_tiny("dense", seed=2, n_layers=2, **overrides)
        ref, _ = decode_logits(loaded, "sdpa")
        got, _ = decode_logits(loaded, "triton")
        out[name] = (ref - got).abs().max().item()
    # an FP8 cache: SDPA reads the values converted back, the kernel converts as it loads
    loaded = build_tiny("dense", seed=2, n_layers=2, window=130)
    fp8 = torch.float8_e4m3fn
    ref, _ = decode_logits(loaded, "sdpa", kv_dtype=fp8)
    got, _ = decode_logits(loaded, "triton", kv_dtype=fp8)
    out["fp8"] = (ref - got).abs().max().item()
    torch._dynamo.reset()
    loaded = build_tiny("dense", seed=2, window=130, n_layers=4)
    ref, _ = decode_logits(loaded, "sdpa")
    counter = CompileCounter()
    got, im = decode_logits(loaded, "triton", compile_backend=counter)
    out["compiled"] = (ref - got).abs().max().item()
    out["compiled_frames"] = counter.frame_count
    out["compiled_on"] = float(im.compiled)
    return out


def main() -> None:
    result = {
        "kernel": kernel_errors(),
        "shared": shared_prompt_cases(),
        "model": model_errors(),
        "splits": {
            str(rows): split_count(rows, 16, torch.device("cpu")) for rows in (1, 2, 64, 256)
        },
    }
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
