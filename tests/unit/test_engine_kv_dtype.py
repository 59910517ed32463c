"""The KV cache's storage type (``--kv-cache-dtype``, ``inference.kv_cache_dtype``).

An FP8 cache holds each K/V entry in one byte: twice the tokens in the same memory, half
the bytes a decode step reads of them. These tests pin what it must keep: values saturate
instead of turning into NaN, a token attends to the same rounded values whether its keys
came from the same prefill, from a cached prefix or from decode steps, and the difference
to a 16-bit cache stays bounded. The engine serving it with and without the prefix tree:
``test_engine_options.test_a_shared_prompt_is_prefilled_once_with_or_without_the_tree``."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("olmo_core")

from runtime.engines.embedded.forward import (  # noqa: E402
    KV_CACHE_DTYPES,
    InferenceModel,
    kv_cache_dtype,
    kv_pool_tokens,
)
from runtime.engines.embedded.tiny import build_tiny  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")
FP8 = torch.float8_e4m3fn


def _prompt(n: int, seed: int) -> list[int]:
    return torch.randint(1, 128, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_names_follow_sglang_and_auto_keeps_the_model_dtype() -> None:
    from runtime.engines.embedded.__main__ import KV_CACHE_DTYPE_NAMES

    assert tuple(KV_CACHE_DTYPES) == KV_CACHE_DTYPE_NAMES
    assert kv_cache_dtype("auto", torch.bfloat16) is torch.bfloat16
    assert kv_cache_dtype("auto", torch.float32) is torch.float32
    assert kv_cache_dtype("bf16", torch.float32) is torch.bfloat16
    assert kv_cache_dtype("fp8_e4m3", torch.bfloat16) is torch.float8_e4m3fn
    assert kv_cache_dtype("fp8_e5m2", torch.bfloat16) is torch.float8_e5m2
    with pytest.raises(ValueError, match="kv cache dtype must be one of"):
        kv_cache_dtype("nvfp4", torch.bfloat16)


def test_an_fp8_cache_takes_a_quarter_of_fp32_and_stores_one_byte_entries() -> None:
    loaded = build_tiny("dense", seed=1)
    full = InferenceModel(loaded.model, max_slots=2, capacity=64)
    fp8 = InferenceModel(loaded.model, max_slots=2, capacity=64, kv_dtype=FP8)
    assert all(c.dtype is FP8 for c in fp8.kv_rows())
    assert fp8.kv_bytes_per_token() * 4 == full.kv_bytes_per_token()
    # so the same memory holds four times the tokens (the pool sizes slots from it)
    pool = dict(mem_fraction_static=0.5, total_bytes=2**30, used_bytes=2**28)
    assert kv_pool_tokens(None, bytes_per_token=fp8.kv_bytes_per_token(), **pool) == 4 * (
        kv_pool_tokens(None, bytes_per_token=full.kv_bytes_per_token(), **pool) or 0
    )


def test_values_beyond_the_fp8_range_saturate() -> None:
    """An unclamped cast of 1000 to e4m3 is NaN, which would poison every later step."""
    loaded = build_tiny("dense", seed=1)
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        im = InferenceModel(loaded.model, max_slots=1, capacity=64, kv_dtype=dtype)
        stored = im._to_cache(torch.tensor([1e6, -1e6, 0.5]))
        back = im._from_cache(stored)
        big = torch.finfo(dtype).max
        assert stored.dtype is dtype and back.dtype is torch.float32
        assert back.tolist() == [big, -big, 0.5]


def _decode(im: InferenceModel, ids: list[int], prefix: int) -> list[torch.Tensor]:
    """Prefill ``ids[:prefix]`` (in two parts: a cached prefix, then the rest) and decode the
    rest one token at a time; each step's logits."""
    out = []
    for p in range(prefix, len(ids)):
        logits, _ = im.decode(torch.tensor([ids[p]]), torch.tensor([p]))
        out.append(logits[0])
    return out


def test_a_token_attends_the_same_fp8_values_however_its_keys_arrived() -> None:
    """The prompt prefilled whole, prefilled after a cached prefix, or decoded token by
    token: with an FP8 cache every path attends to the stored (rounded) K/V, so they agree
    as closely as they do with a 16-bit cache, far closer than FP8's own rounding."""
    loaded = build_tiny("dense", seed=2)
    ids = _prompt(24, 3)
    whole = InferenceModel(loaded.model, max_slots=1, capacity=32, kv_dtype=FP8)
    last_whole, _ = whole.prefill(ids[:16], slot=0)
    steps_whole = _decode(whole, ids, 16)

    cached = InferenceModel(loaded.model, max_slots=1, capacity=32, kv_dtype=FP8)
    cached.prefill(ids[:9], slot=0)
    last_cached, _, _ = cached.prefill_batch([ids[9:16]], [0], starts=[9])
    steps_cached = _decode(cached, ids, 16)

    stepped = InferenceModel(loaded.model, max_slots=1, capacity=32, kv_dtype=FP8)
    stepped.prefill(ids[:4], slot=0)
    steps_stepped = _decode(stepped, ids, 4)[12:]  # the steps at positions 16..23

    assert (last_whole - last_cached[0]).abs().max().item() < 1e-4
    for a, b, c in zip(steps_whole, steps_cached, steps_stepped, strict=True):
        assert (a - b).abs().max().item() < 1e-4
        assert (a - c).abs().max().item() < 1e-4


def test_fp8_logprobs_stay_near_the_16bit_caches() -> None:
    """The cost of the narrower type, bounded: on the tiny random model the FP8 cache's
    log-probs move by at most a few tenths from the model's own, against a few
    thousandths for bf16 (the GPU benchmark measures the real model's gap)."""
    loaded = build_tiny("dense", seed=2)
    ids = _prompt(20, 3)
    with torch.no_grad():
        ref = torch.log_softmax(loaded.model(torch.tensor([ids]))[0], -1)
    worst = {}
    for name in ("bf16", "fp8_e4m3", "fp8_e5m2"):
        im = InferenceModel(
            loaded.model, max_slots=1, capacity=32, kv_dtype=kv_cache_dtype(name, torch.float32)
        )
        im.prefill(ids[:12], slot=0)
        steps = _decode(im, ids, 12)
        worst[name] = max(
            (torch.log_softmax(lg, -1) - ref[12 + i]).abs().max().item()
            for i, lg in enumerate(steps)
        )
    assert worst["bf16"] < 0.02
    assert worst["fp8_e4m3"] < 0.5 and worst["fp8_e5m2"] < 0.5
    assert worst["fp8_e4m3"] > worst["bf16"]  # the narrower type really is in use
