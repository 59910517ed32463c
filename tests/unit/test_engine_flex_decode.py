"""FlexAttention decode (``--attention-backend flex_attention``): the block lists name
exactly the KV blocks each row attends (the GPU kernel reads only those), and the decode
step gives SDPA's logits, eagerly and through the compiled regions, with one block trace
for windowed and full layers alike."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("olmo_core")

from decode_runs import captured_logits, decode_logits  # noqa: E402
from torch._dynamo.testing import CompileCounter  # noqa: E402

from runtime.engines.embedded.flex_decode import KV_BLOCK, decode_blocks  # noqa: E402
from runtime.engines.embedded.forward import InferenceModel  # noqa: E402
from runtime.engines.embedded.tiny import build_tiny  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("window", [None, 8, 130, 4096])
def test_block_lists_name_exactly_the_attended_blocks(window: int | None) -> None:
    length = 600
    positions = torch.tensor([0, 1, 127, 128, 129, 255, 256, 383, 400, 599])
    num, idx, lo = decode_blocks(positions, length, window)
    nblk = -(-length // KV_BLOCK)
    assert num.shape == (len(positions), 1, 1) and idx.shape == (len(positions), 1, 1, nblk)
    assert num.dtype == idx.dtype == torch.int32
    for b, p in enumerate(positions.tolist()):
        first = 0 if window is None else max(0, p - window + 1)
        assert lo[b].item() == first
        want = sorted({i // KV_BLOCK for i in range(first, p + 1)})
        got = idx[b, 0, 0, : num[b, 0, 0]].tolist()
        assert got == want, (p, window)
        assert max(idx[b, 0, 0].tolist()) < nblk  # the padding entries stay in range


@pytest.mark.parametrize("window", [8, 130])
def test_flex_decode_gives_sdpa_logits(window: int) -> None:
    """Ragged rows, a sliding window inside one block (8) and across blocks (130)."""
    loaded = build_tiny("dense", seed=2, window=window)
    ref, _ = decode_logits(loaded, "sdpa")
    got, _ = decode_logits(loaded, "flex")
    assert (ref - got).abs().max().item() < 1e-5


def test_flex_decode_with_grouped_query_heads() -> None:
    loaded = build_tiny("dense", seed=4, n_kv_heads=1)
    ref, _ = decode_logits(loaded, "sdpa", steps=3)
    got, im = decode_logits(loaded, "flex", steps=3)
    assert any(layer.gqa for layer in im.layers)
    assert (ref - got).abs().max().item() < 1e-5


def test_compiled_flex_decode_traces_one_block_for_windowed_and_full_layers() -> None:
    """The window travels in the block tensors, so the regional compile still traces the
    block once (windowed and full layers), plus the head."""
    loaded = build_tiny("dense", seed=2, window=130, n_layers=4)
    ref, _ = decode_logits(loaded, "sdpa")
    counter = CompileCounter()
    got, im = decode_logits(loaded, "flex", compile_backend=counter)
    assert im.compiled
    assert (ref - got).abs().max().item() < 1e-5
    assert counter.frame_count == 2


def test_unknown_decode_attention_is_refused() -> None:
    loaded = build_tiny("dense", seed=1)
    with pytest.raises(ValueError, match="decode attention"):
        InferenceModel(loaded.model, max_slots=1, capacity=32, decode_attention="paged")


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="FlexAttention's decode kernel needs a GPU"
)
def test_captured_flex_decode_matches_sdpa_on_gpu() -> None:
    """Inductor's flex decoding kernel inside the captured step against SDPA (bf16)."""
    loaded = build_tiny("dense", seed=2, window=130, n_layers=4)
    loaded.model.to(device="cuda", dtype=torch.bfloat16)
    outs = {a: captured_logits(loaded, a, steps=5)[0] for a in ("sdpa", "flex")}
    assert (outs["sdpa"] - outs["flex"]).abs().max().item() < 0.05
