"""The decode step compiles by region: one block traced once for every layer (and every
batch and length bucket), the LM head, and the head with sampling. Counted with dynamo's
own compile counter (its eager backend runs the traced graphs), checked against the eager
step token for token; one case runs Inductor itself."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("olmo_core")

from torch._dynamo.testing import CompileCounter  # noqa: E402

from runtime.engines.embedded.forward import InferenceModel  # noqa: E402
from runtime.engines.embedded.sampling import SamplingBatch, SamplingParams  # noqa: E402
from runtime.engines.embedded.tiny import build_tiny  # noqa: E402

PROMPTS = [[1, 2, 3, 4, 5], [6, 7, 8], [9, 10, 11, 12], [3, 3], [5, 4, 3, 2, 1, 9]]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _decode_logits(im: InferenceModel, batches: tuple[int, ...], steps: int = 3) -> list:
    """Greedy decode of each batch size in turn (a new batch bucket each time)."""
    out = []
    for bs in batches:
        im.prefill_batch(PROMPTS[:bs], list(range(bs)))
        tok = torch.tensor([p[-1] for p in PROMPTS[:bs]])
        pos = torch.tensor([len(p) for p in PROMPTS[:bs]])
        for _ in range(steps):
            logits, _ = im.decode(tok, pos)
            out.append(logits)
            tok, pos = logits.argmax(-1), pos + 1
    return out


@pytest.mark.parametrize("n_layers", [2, 6])
def test_one_block_trace_serves_every_layer_and_batch(n_layers: int) -> None:
    loaded = build_tiny("dense", seed=3, n_layers=n_layers)
    ref = _decode_logits(InferenceModel(loaded.model, max_slots=4, capacity=64), (4, 2, 3))
    counter = CompileCounter()
    im = InferenceModel(loaded.model, max_slots=4, capacity=64)
    im.enable_compile(backend=counter)  # type: ignore[arg-type]
    got = _decode_logits(im, (4, 2, 3))
    assert max((a - b).abs().max().item() for a, b in zip(ref, got, strict=True)) < 1e-5
    # the block once, the head once: neither the layer count nor the batch buckets add any
    assert counter.frame_count == 2


def test_sampled_step_compiles_per_mode_not_per_layer() -> None:
    """The fused step (forward, sample, advance) through its regions gives the eager
    step's tokens and log-probs; each sampling mode adds only its head-and-sample region."""
    loaded = build_tiny("dense", seed=5, n_layers=4)

    def run(im: InferenceModel) -> list[tuple[list[int], list[float]]]:
        out = []
        for params in (
            [SamplingParams(temperature=0.0)] * 3,
            [SamplingParams(temperature=1.0), SamplingParams(temperature=0.7)],
            [SamplingParams(temperature=1.0, top_k=5)] * 3,
        ):
            bs = len(params)
            im.prefill_batch(PROMPTS[:bs], list(range(bs)))
            batch = SamplingBatch.build(params, [17 + i for i in range(bs)], "cpu")
            tok = torch.tensor([p[-1] for p in PROMPTS[:bs]])
            pos = torch.tensor([len(p) for p in PROMPTS[:bs]])
            im.load_step(tok, pos, torch.zeros(bs, dtype=torch.long), batch)
            for _ in range(4):
                kv = int(pos.max()) + 1
                toks, lps, _ = im.step_sampled(kv, batch.mode)
                out.append((toks.tolist(), lps.tolist()))
                pos = pos + 1
        return out

    ref = run(InferenceModel(loaded.model, max_slots=4, capacity=64))
    counter = CompileCounter()
    im = InferenceModel(loaded.model, max_slots=4, capacity=64)
    im.enable_compile(backend=counter)  # type: ignore[arg-type]
    got = run(im)
    assert [t for t, _ in got] == [t for t, _ in ref]
    for (_, a), (_, b) in zip(got, ref, strict=True):
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-5
    # one block region, one head-and-sample region per sampling mode (three here)
    assert counter.frame_count == 1 + 3


def test_moe_decode_regions_route_the_same_experts() -> None:
    loaded = build_tiny("moe", seed=2, n_layers=3)
    eager = InferenceModel(loaded.model, max_slots=4, capacity=64)
    compiled = InferenceModel(loaded.model, max_slots=4, capacity=64)
    compiled.enable_compile(backend=CompileCounter())  # type: ignore[arg-type]
    for im in (eager, compiled):
        im.prefill_batch(PROMPTS[:3], [0, 1, 2])
    tok = torch.tensor([p[-1] for p in PROMPTS[:3]])
    pos = torch.tensor([len(p) for p in PROMPTS[:3]])
    (la, ea), (lb, eb) = eager.decode(tok, pos), compiled.decode(tok, pos)
    assert ea is not None and eb is not None and torch.equal(ea, eb)
    assert (la - lb).abs().max().item() < 1e-5


def test_inductor_regions_match_eager() -> None:
    """The real compiler (Inductor's CPU code) over the same regions."""
    loaded = build_tiny("dense", seed=4, n_layers=3)
    ref = _decode_logits(InferenceModel(loaded.model, max_slots=4, capacity=64), (3, 2), 2)
    im = InferenceModel(loaded.model, max_slots=4, capacity=64)
    im.enable_compile()
    got = _decode_logits(im, (3, 2), 2)
    assert im.compiled
    assert max((a - b).abs().max().item() for a, b in zip(ref, got, strict=True)) < 1e-4
