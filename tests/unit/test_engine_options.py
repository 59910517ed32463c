"""The embedded engine honours the options the compiler emits for it: KV token pool,
memory fraction, CUDA-graph batch cap, chunked prefill, prefix cache (in-process, CPU)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("olmo_core")

from test_engine_scheduler import _run  # noqa: E402

from runtime.engines.embedded.engine import Engine, prefill_chunks  # noqa: E402
from runtime.engines.embedded.forward import (  # noqa: E402
    graph_batch_sizes,
    kv_pool_tokens,
    prefix_cache_tokens,
)
from runtime.engines.embedded.sampling import SamplingParams  # noqa: E402
from runtime.engines.embedded.tiny import build_tiny  # noqa: E402


@pytest.fixture(scope="module")
def loaded():
    return build_tiny("dense", seed=7)


def test_the_kv_pool_is_max_total_tokens(loaded) -> None:
    """The cache holds as many context-length slots as the pool has room for."""
    small = Engine(loaded, model_path="t", max_running_requests=8, context_length=64,
                   max_total_tokens=128)  # fmt: skip
    assert (small.max_total_tokens, small.im.max_slots, small.max_running) == (128, 2, 2)
    big = Engine(loaded, model_path="t", max_running_requests=8, context_length=64,
                 max_total_tokens=10**6)  # fmt: skip
    assert big.im.max_slots == 8 and big.im.kv_bytes() == 4 * small.im.kv_bytes()
    default = Engine(loaded, model_path="t", max_running_requests=3, context_length=64)
    assert (default.max_total_tokens, default.im.max_slots) == (192, 3)


def test_mem_fraction_static_caps_the_pool_from_the_engines_own_memory() -> None:
    gib = 2**30
    # 80 GiB device, the engine's weights 10 GiB: 0.5 leaves 30 GiB for the pool
    assert kv_pool_tokens(None, bytes_per_token=gib // 1024, mem_fraction_static=0.5,
                          total_bytes=80 * gib, used_bytes=10 * gib) == 30 * 1024  # fmt: skip
    assert kv_pool_tokens(1000, bytes_per_token=gib // 1024, mem_fraction_static=0.5,
                          total_bytes=80 * gib, used_bytes=10 * gib) == 1000  # fmt: skip
    assert kv_pool_tokens(1000, bytes_per_token=8) == 1000  # CPU: no memory bound
    with pytest.raises(ValueError, match="leaves no room"):
        kv_pool_tokens(None, bytes_per_token=8, mem_fraction_static=0.1,
                       total_bytes=80 * gib, used_bytes=20 * gib)  # fmt: skip


def test_prefix_cache_stays_inside_the_engines_memory_fraction() -> None:
    """The tree's copies come out of the fraction the compiler gave the engine: on an
    80 GiB GPU at 0.4, weights and slots holding 29 GiB leave the tree 3 GiB, not half of
    the 51 GiB unused (which a colocated trainer needs)."""
    gib, per = 2**30, 2**17  # 128 KiB a token: the 1.48B model's K/V
    tokens = gib // per
    inside = (int(80 * gib * 0.4) - 29 * gib) // per
    assert prefix_cache_tokens(10**7, bytes_per_token=per, reserved_bytes=29 * gib,
                               total_bytes=80 * gib, mem_fraction_static=0.4) == inside  # fmt: skip
    assert prefix_cache_tokens(10**7, bytes_per_token=per, reserved_bytes=29 * gib,
                               total_bytes=80 * gib) == 51 * tokens // 2  # fmt: skip
    # the token cap still holds, and a full fraction leaves no tree rather than failing
    assert prefix_cache_tokens(1000, bytes_per_token=per, reserved_bytes=gib,
                               total_bytes=80 * gib, mem_fraction_static=0.4) == 1000  # fmt: skip
    assert prefix_cache_tokens(10**7, bytes_per_token=per, reserved_bytes=40 * gib,
                               total_bytes=80 * gib, mem_fraction_static=0.4) == 0  # fmt: skip
    assert prefix_cache_tokens(1234, bytes_per_token=per) == 1234  # CPU: the token cap only


def test_cuda_graph_max_bs_caps_the_captured_batches() -> None:
    assert graph_batch_sizes(256) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert graph_batch_sizes(256, max_bs=48) == [1, 2, 4, 8, 16, 32, 48]
    assert graph_batch_sizes(4, max_bs=64) == [1, 2, 4]


def test_chunked_prefill_size_sets_the_prefill_chunks(loaded) -> None:
    eng = Engine(loaded, model_path="t", max_running_requests=4, context_length=64,
                 prefill_tokens=16)  # fmt: skip
    assert eng.prefill_tokens == 16
    assert prefill_chunks([8, 8, 8, 8], eng.prefill_tokens) == [[0, 1], [2, 3]]
    whole = Engine(loaded, model_path="t", max_running_requests=4, context_length=64,
                   prefill_tokens=-1)  # fmt: skip
    assert prefill_chunks([8, 8, 8, 8], whole.prefill_tokens) == [[0, 1, 2, 3]]


@pytest.mark.parametrize("kv_cache_dtype", ["auto", "fp8_e4m3"])
def test_a_shared_prompt_is_prefilled_once_with_or_without_the_tree(
    loaded, kv_cache_dtype: str
) -> None:
    """GRPO's samples of one prompt: the prompt is prefilled once and its KV copied to the
    other samples' slots, with the prefix tree or without it (only the tree keeps the K/V
    afterwards); the sampled tokens and log-probs are the same either way, with an FP8
    cache too (its bytes move through the same copies)."""
    prompt = [5, 9, 3, 7, 2, 11]
    params = [SamplingParams(max_new_tokens=6, temperature=1.0, sampling_seed=100 + i)
              for i in range(4)]  # fmt: skip
    out = {}
    for radix in (True, False):
        eng = Engine(loaded, model_path="t", max_running_requests=4, context_length=64,
                     radix_cache=radix, kv_cache_dtype=kv_cache_dtype)  # fmt: skip
        assert eng.kv_cache_dtype == kv_cache_dtype
        eng.start()
        try:
            prompts = [prompt] * 4 + [[1, 2, 3]]
            out[radix] = _run(eng, prompts, [*params, params[0]], return_logprob=True)
            cached = eng.stats["num_cached_prompt_tokens"]
            tree = eng.prefix_cache_tokens
        finally:
            eng.stop()
        # the group's prompt is prefilled once either way; only the tree keeps it after
        assert cached == 3 * len(prompt)
        assert (tree > 0) == radix
    for a, b in zip(out[True], out[False], strict=True):
        assert a["output_ids"] == b["output_ids"]
        lp_a = [x[0] for x in a["meta_info"]["output_token_logprobs"]]
        lp_b = [x[0] for x in b["meta_info"]["output_token_logprobs"]]
        assert max(abs(x - y) for x, y in zip(lp_a, lp_b, strict=True)) < 1e-4
    assert len({tuple(r["output_ids"]) for r in out[True][:4]}) > 1  # seeds still differ
