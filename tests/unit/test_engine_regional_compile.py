"""The decode step compiles by region: one block traced once for every layer (and every
batch and length bucket), the LM head, and the head with sampling. Counted with dynamo's
own compile counter (its eager backend runs the traced graphs), checked against the eager
step token for token; one case runs Inductor itself."""

from __future__ import annotations

from typing import Any

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


# ---- the prefill's blocks by region ----------------------------------------------------------

PREFILLS: list[tuple[list[list[int]], list[int], dict]] = [
    (PROMPTS[:4], [0, 1, 2, 3], {}),  # ragged
    (PROMPTS[1:5], [4, 5, 6, 7], {"want_all": [True, False, False, True]}),
    ([[1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3]], [0, 3, 6], {}),  # equal lengths, scattered slots
    ([PROMPTS[0]], [1], {}),  # one prompt: eager (size 1 would specialize the trace)
    ([[5, 4, 3, 8, 8], [6, 7, 8, 4]], [2, 5], {"starts": [3, 2]}),  # after cached prefixes
]


def _prefills(im: InferenceModel) -> list[torch.Tensor]:
    """Each prefill's last logits and all-position logits, then a greedy decode step of
    the slots it filled (which reads the K/V the prefill wrote)."""
    out: list[torch.Tensor] = []
    for seqs, slots, kw in PREFILLS:
        last, full, _ = im.prefill_batch(seqs, slots, **kw)
        out += [last, *(f for f in full if f is not None)]
    im.prefill_batch(PROMPTS[:3], [0, 1, 2])
    tok = torch.tensor([p[-1] for p in PROMPTS[:3]], device=im.device)
    pos = torch.tensor([len(p) for p in PROMPTS[:3]], device=im.device)
    out.append(im.decode(tok, pos)[0])
    return out


def test_one_prefill_trace_serves_every_shape_layer_and_path() -> None:
    """Two regions (up to the attention, after it), each traced once: every batch size,
    prompt length, layer, fresh or continued prefill reuses them, with the eager logits."""
    loaded = build_tiny("dense", seed=6, n_layers=5)
    ref = _prefills(InferenceModel(loaded.model, max_slots=8, capacity=64))
    counter = CompileCounter()
    im = InferenceModel(loaded.model, max_slots=8, capacity=64)
    im.enable_compile_prefill(backend=counter)  # type: ignore[arg-type]
    assert im.compiled_prefill and not im.compiled  # the decode step stays eager
    assert im.warm_prefill() == 2 and counter.frame_count == 2
    got = _prefills(im)
    assert counter.frame_count == 2  # nothing compiled after the warm-up
    assert max((a - b).abs().max().item() for a, b in zip(ref, got, strict=True)) < 1e-5


def test_moe_blocks_prefill_eagerly() -> None:
    loaded = build_tiny("moe", seed=2, n_layers=2)
    eager = InferenceModel(loaded.model, max_slots=4, capacity=64)
    counter = CompileCounter()
    im = InferenceModel(loaded.model, max_slots=4, capacity=64)
    im.enable_compile_prefill(backend=counter)  # type: ignore[arg-type]
    (la, _, ea), (lb, _, eb) = (m.prefill_batch(PROMPTS[:3], [0, 1, 2]) for m in (eager, im))
    assert counter.frame_count == 0 and not im.compiled_prefill  # MoE blocks stay eager
    assert ea is not None and eb is not None
    assert all(torch.equal(a, b) for a, b in zip(ea, eb, strict=True))
    assert (la - lb).abs().max().item() < 1e-6


def test_inductor_prefill_regions_match_eager() -> None:
    """The real compiler: after the warm-up, ragged, equal-length and continued prefills of
    new shapes compile nothing more."""
    from torch._dynamo.testing import CompileCounterWithBackend

    loaded = build_tiny("dense", seed=4, n_layers=3)
    ref = _prefills(InferenceModel(loaded.model, max_slots=8, capacity=64))
    counter = CompileCounterWithBackend("inductor")
    im = InferenceModel(loaded.model, max_slots=8, capacity=64)
    im.enable_compile_prefill(backend=counter)  # type: ignore[arg-type]
    im.warm_prefill()
    got = _prefills(im)
    assert counter.frame_count == 2 and im.compiled_prefill
    assert max((a - b).abs().max().item() for a, b in zip(ref, got, strict=True)) < 1e-4


def test_a_prefill_compile_failure_falls_back_to_eager() -> None:
    loaded = build_tiny("dense", seed=1, n_layers=2)
    ref = InferenceModel(loaded.model, max_slots=4, capacity=64).prefill_batch(
        PROMPTS[:3], [0, 1, 2]
    )

    def broken(gm, example_inputs):  # type: ignore[no-untyped-def]
        raise RuntimeError("no compiler here")

    im = InferenceModel(loaded.model, max_slots=4, capacity=64)
    im.enable_compile_prefill(backend=broken)  # type: ignore[arg-type]
    assert im.warm_prefill() == 0  # the warm-up says it compiled nothing
    assert not im.compiled_prefill  # eager from then on
    got = im.prefill_batch(PROMPTS[:3], [0, 1, 2])
    assert (ref[0] - got[0]).abs().max().item() < 1e-6


def test_an_engine_compiles_its_prefill_in_the_warm_up_not_at_admission(monkeypatch) -> None:
    """``compile_prefill``: the run's warm-up compiles the prefill regions; the requests
    after it (new prompt shapes, a shared prefix) compile nothing and decode the eager
    engine's greedy tokens."""
    httpx = pytest.importorskip("httpx")
    from runtime.engines.embedded.engine import Engine
    from runtime.engines.embedded.inprocess import InProcessServer

    class Counting(CompileCounter):
        """Dynamo's compile counter that also counts the traced graphs' runs."""

        runs = 0

        def __call__(self, gm, example_inputs):  # type: ignore[no-untyped-def]
            super().__call__(gm, example_inputs)

            def run(*args):  # type: ignore[no-untyped-def]
                self.runs += 1
                return gm.forward(*args)

            return run

    counter = Counting()
    enable = InferenceModel.enable_compile_prefill
    monkeypatch.setattr(
        InferenceModel,
        "enable_compile_prefill",
        lambda self, mode=None, backend="inductor": enable(self, mode, counter),  # type: ignore[arg-type]
    )
    greedy = {"temperature": 0.0, "max_new_tokens": 4}
    body = {"input_ids": [[5, 6, 7, 9, 9], [8, 9], [5, 6, 7, 1]], "sampling_params": greedy}
    assert Engine(build_tiny("dense"), model_path="t", context_length=32).compile_prefill is False
    outs = []
    for compiled in (False, True):
        loaded = build_tiny("dense", seed=8, n_layers=3)
        with InProcessServer(
            loaded, max_running_requests=4, context_length=64, compile_prefill=compiled
        ) as srv:
            if compiled:
                result = srv.engine.warm_up([SamplingParams(temperature=0.0)])
                assert result["success"] and result["compiled_prefill"], result
                assert result["prefill_compile_s"] > 0
                assert counter.frame_count == 2
            runs = counter.runs
            r = httpx.post(srv.url + "/generate", json=body, timeout=60)
            assert r.status_code == 200, r.text
            outs.append([o["output_ids"] for o in r.json()])
            if compiled:  # the admission's prefill ran through both regions of each layer
                assert counter.runs - runs >= 2 * 3
    assert counter.frame_count == 2
    assert outs[0] == outs[1]


def _variant(block: str, **attention: object) -> Any:
    """The tiny dense model with another block type or attention option."""
    from olmo_core.nn.transformer import TransformerBlockType

    from runtime.engines.embedded.tiny import tiny_config

    cfg = tiny_config("dense")
    cfg.block.name = TransformerBlockType(block)
    for key, value in attention.items():
        setattr(cfg.block.sequence_mixer, key, value)
    torch.manual_seed(11)
    return cfg.build(init_device="cpu").eval()


@pytest.mark.parametrize(
    ("block", "attention"),
    [
        ("default", {}),  # pre-norm
        ("peri_norm", {}),
        ("reordered_norm", {"gate": "headwise"}),
        ("reordered_norm", {"gate": "elementwise"}),
        ("reordered_norm", {"use_head_qk_norm": True}),
    ],
)
def test_prefill_regions_serve_every_block_wiring(block: str, attention: dict) -> None:
    """Pre-, post- and peri-norm blocks, gated attention and per-head q/k norms: the two
    regions give the model's own last-position logits, one trace for all layers."""
    from olmo_core.nn.attention import GateConfig, GateGranularity

    if "gate" in attention:
        attention = {"gate": GateConfig(granularity=GateGranularity(attention["gate"]))}
    model = _variant(block, **attention)
    counter = CompileCounter()
    im = InferenceModel(model, max_slots=4, capacity=64)
    im.enable_compile_prefill(backend=counter)  # type: ignore[arg-type]
    last, _, _ = im.prefill_batch(PROMPTS[:4], [0, 1, 2, 3])
    assert counter.frame_count == 2
    with torch.no_grad():
        for b, ids in enumerate(PROMPTS[:4]):
            ref = model(torch.tensor([ids]))[0, -1]
            assert (last[b] - ref).abs().max().item() < 1e-4, (block, b)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the CUDA prefill regions need a GPU")
def test_cuda_prefill_regions_match_eager_in_bf16() -> None:
    """On a GPU in bf16 (Inductor's Triton kernels; flash attention for the equal-length
    prefill, masked attention for the ragged and windowed ones): the eager logits within
    bf16 rounding, and no compile after the warm-up."""
    from torch._dynamo.testing import CompileCounterWithBackend

    loaded = build_tiny("dense", seed=4, n_layers=4)
    model = loaded.model.to("cuda", torch.bfloat16)
    ref = _prefills(InferenceModel(model, max_slots=8, capacity=64, device="cuda"))
    counter = CompileCounterWithBackend("inductor")
    im = InferenceModel(model, max_slots=8, capacity=64, device="cuda")
    im.enable_compile_prefill(backend=counter)  # type: ignore[arg-type]
    im.warm_prefill()
    got = _prefills(im)
    assert counter.frame_count == 2 and im.compiled_prefill
    for a, b in zip(ref, got, strict=True):
        torch.testing.assert_close(b.float(), a.float(), atol=0.05, rtol=0.05)
