"""A GRPO group's samples read their prompt's K/V from one slot (the split-KV kernel):
the engine returns, bit for bit, what it returns when every sample's slot holds its own
copy (tokens, log-probs, and the K/V each finished request puts in the prefix cache),
also when the slot holding a prompt finishes before the samples reading it, with the
overlap schedule and without, and with GatedDeltaNet layers (whose recurrent state each
sample still copies). Runs under Triton's interpreter in a child process
(``shared_prompt_cases.py``)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("olmo_core")
pytest.importorskip("triton")

from interpreted import run_interpreted  # noqa: E402


@pytest.fixture(scope="module")
def cases() -> dict:
    return run_interpreted("shared_prompt_cases.py")


@pytest.mark.parametrize("case", ["dense", "dense_plain", "hybrid"])
def test_shared_prompts_change_nothing_but_the_bytes_read(cases: dict, case: str) -> None:
    if cases[case] is None:
        pytest.skip("this transformers has no Olmo hybrid model")
    shared, copied = cases[case]["shared"], cases[case]["copied"]
    assert shared["recurrent"] == (case == "hybrid")
    assert shared["errors"] == [] and copied["errors"] == []
    # the samples of each group differ (seeded sampling), and each side returns the same
    assert len({tuple(t) for t in shared["tokens"][:3]}) == 3
    assert shared["tokens"] == copied["tokens"]
    assert shared["logprobs"] == copied["logprobs"]
    # a follower's K/V as the prefix cache takes it: its prompt part from the holder's slot
    assert shared["cached"] == copied["cached"]
    assert all(c is not None for c in shared["cached"])
    # the first two groups share in their admission (2 + 2 samples; the third group's
    # samples come in as slots free up); the copying engine shares none
    assert shared["shared_rows"] >= 4 and copied["shared_rows"] == 0
    # the first group's leader stops first, the second's stops with one sample: both hand
    # their prompt to a running sample
    assert shared["handed_over"] == 2 and copied["handed_over"] == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the compiled kernel needs a GPU")
def test_shared_prompts_on_gpu_through_the_captured_step() -> None:
    """On a GPU (compiled regions, CUDA graphs, the overlap schedule: the engine's
    defaults there), bf16: the same tokens and log-probs with shared and copied prompts."""
    from shared_prompt_cases import serve_once

    from runtime.engines.embedded.engine import Engine
    from runtime.engines.embedded.tiny import build_tiny

    out = {}
    for sharing in (True, False):
        loaded = build_tiny("dense", seed=4, n_layers=2)
        loaded.model.to(device="cuda", dtype=torch.bfloat16)
        eng = Engine(
            loaded, model_path="test", device="cuda", max_running_requests=7, context_length=40
        )
        assert eng.im.decode_attention == "triton" and eng.im.shares_prompts
        out[sharing] = serve_once(eng, sharing)
    assert out[True]["shared_rows"] >= 4 and out[True]["handed_over"] == 2
    assert out[True]["tokens"] == out[False]["tokens"]
    assert out[True]["logprobs"] == out[False]["logprobs"]
