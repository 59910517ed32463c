"""Sampling inside the decode step: the static-shape sampler gives the batch sampler's
tokens and logprobs, and an engine whose step forwards, samples and advances its own
buffers generates exactly what the engine with the separate sampler generates."""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("olmo_core")

from runtime.engines.embedded.engine import Engine  # noqa: E402
from runtime.engines.embedded.sampling import (  # noqa: E402
    SamplingBatch,
    SamplingParams,
    sample_batch,
    sample_rows,
)
from runtime.engines.embedded.tiny import build_tiny  # noqa: E402

MIXED = [
    SamplingParams(temperature=1.0),
    SamplingParams(temperature=0.0),
    SamplingParams(temperature=0.5, top_k=20),
    SamplingParams(temperature=1.2),
    SamplingParams(temperature=1.0, top_p=0.9),
    SamplingParams(temperature=0.9, min_p=0.05),
]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _rows(logits: torch.Tensor, batch: SamplingBatch, counters: torch.Tensor):  # type: ignore[no-untyped-def]
    return sample_rows(
        logits,
        batch.temps,
        batch.greedy,
        batch.seeds,
        counters,
        batch.row_trunc,
        batch.row_top_k,
        batch.row_top_p,
        batch.row_min_p,
        batch.mode,
    )


@pytest.mark.parametrize(
    "params",
    [
        MIXED,
        [SamplingParams(temperature=0.0)] * 3,
        [SamplingParams(temperature=1.0)] * 4,
        [SamplingParams(temperature=0.7), SamplingParams(temperature=0.0)],
        [SamplingParams(temperature=1.0, top_p=0.8)] * 3,
    ],
)
def test_static_sampler_equals_batch_sampler(params: list[SamplingParams]) -> None:
    gen = torch.Generator().manual_seed(len(params))
    batch = SamplingBatch.build(params, [11 * i + 3 for i in range(len(params))], "cpu")
    for step in range(5):
        logits = torch.randn(len(params), 1000, generator=gen) * 3
        counters = torch.arange(len(params), dtype=torch.long) + step
        t0, l0 = sample_batch(logits, batch, counters)
        t1, l1 = _rows(logits, batch, counters)
        assert t1.tolist() == t0.tolist()
        assert torch.equal(l1, l0)


def _generate(
    fused: bool, compile_decode: bool = False, kind: str = "dense", overlap: bool = False
) -> list[dict]:
    loaded = build_tiny(kind, seed=7)
    eng = Engine(
        loaded,
        model_path="test",
        max_running_requests=4,
        context_length=96,
        fused_sampling=fused,
        compile_decode=compile_decode,
        overlap_schedule=overlap,
    )
    eng.start()
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, 128, (3 + i,), generator=gen).tolist() for i in range(9)]
    results: list = [None] * len(prompts)
    done = threading.Event()
    lock = threading.Lock()

    def cb(i: int):  # type: ignore[no-untyped-def]
        def f(res: dict) -> None:
            results[i] = res
            with lock:
                if all(r is not None for r in results):
                    done.set()

        return f

    try:
        for i, p in enumerate(prompts):
            base = MIXED[i % len(MIXED)]
            sp = SamplingParams(
                max_new_tokens=5 + 3 * (i % 4),  # finishes at different steps: reloads
                temperature=base.temperature,
                top_k=base.top_k,
                top_p=base.top_p,
                min_p=base.min_p,
                ignore_eos=True,
                sampling_seed=100 + i,
            )
            moe = kind != "dense"
            req = eng.make_request(p, sp, cb(i), return_logprob=True, return_routed_experts=moe)
            eng.submit(req)
        assert done.wait(120), "engine did not finish"
    finally:
        eng.stop()
    assert eng.stats["num_decode_steps"] > 0
    return results


def _tokens_and_logprobs(results: list[dict]) -> list[tuple[list[int], list[float]]]:
    return [
        (r["output_ids"], [x[0] for x in r["meta_info"]["output_token_logprobs"]]) for r in results
    ]


def test_engine_fused_step_generates_the_same_tokens() -> None:
    """Nine requests through four slots, mixed greedy/temperature/top-k/top-p/min-p, per
    request seeds: token for token and logprob for logprob the same as the separate sampler
    (eager on the CPU, where both run the same forward)."""
    plain = _tokens_and_logprobs(_generate(fused=False))
    fused = _tokens_and_logprobs(_generate(fused=True))
    assert fused == plain
    # the overlap schedule (the default): the same tokens; a step launched ahead keeps the
    # rows of requests that stopped meanwhile, and a different batch size changes the last
    # bit of a CPU matmul (tests/unit/test_engine_overlap.py pins the rows: bit-identical)
    _close(_tokens_and_logprobs(_generate(fused=True, overlap=True)), plain)


def _close(got: list, want: list) -> None:
    for (ta, la), (tb, lb) in zip(got, want, strict=True):
        assert ta == tb
        assert max(abs(x - y) for x, y in zip(la, lb, strict=True)) < 1e-5


def test_engine_fused_step_moe_routes_the_same_experts() -> None:
    """MoE: the experts each decoded token was routed to come out of the fused step too."""
    plain, fused = _generate(fused=False, kind="moe"), _generate(fused=True, kind="moe")
    assert _tokens_and_logprobs(fused) == _tokens_and_logprobs(plain)
    overlapped = _generate(fused=True, kind="moe", overlap=True)
    _close(_tokens_and_logprobs(overlapped), _tokens_and_logprobs(plain))
    for a, b, c in zip(plain, fused, overlapped, strict=True):
        assert a["meta_info"]["routed_experts"] == b["meta_info"]["routed_experts"]
        assert a["meta_info"]["routed_experts"] == c["meta_info"]["routed_experts"]
        assert a["meta_info"]["routed_experts"]


def test_fused_sampling_is_opt_in() -> None:
    eng = Engine(build_tiny("dense", seed=7), model_path="test", max_running_requests=2)
    assert eng.fused_sampling is False  # until the captured path is measured on a GPU
    assert Engine(
        build_tiny("dense", seed=7), model_path="t", max_running_requests=2, fused_sampling=True
    ).fused_sampling


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("compiled", [False, True])
def test_graph_fused_step_matches_separate_sampler_on_gpu(compiled: bool) -> None:
    """On a GPU: the captured decode+sample graph (compiled or not, 64-entry KV buckets:
    the graph attends its own bucket) against the eager step and sampler."""

    def run(fused: bool) -> list[tuple[list[int], list[float]]]:
        loaded = build_tiny("dense", seed=7)
        loaded.model.to("cuda")
        eng = Engine(
            loaded,
            model_path="test",
            device="cuda",
            max_running_requests=4,
            context_length=96,
            cuda_graph=fused,
            compile_decode=compiled and fused,
            fused_sampling=fused,
            graph_kv_step=64,
        )
        eng.start()
        try:
            out = []
            for i, base in enumerate(MIXED):
                done: list[dict] = []
                sp = SamplingParams(
                    max_new_tokens=12,
                    temperature=base.temperature,
                    top_k=base.top_k,
                    top_p=base.top_p,
                    min_p=base.min_p,
                    ignore_eos=True,
                    sampling_seed=7 + i,
                )
                eng.submit(eng.make_request([3, 4, 5 + i], sp, done.append, return_logprob=True))
                while not done:
                    threading.Event().wait(0.01)
                out.append(done[0])
        finally:
            eng.stop()
        return _tokens_and_logprobs(out)

    plain, fused = run(False), run(True)
    for (ta, la), (tb, lb) in zip(plain, fused, strict=True):
        assert ta == tb
        assert max(abs(x - y) for x, y in zip(la, lb, strict=True)) < (1e-3 if compiled else 1e-4)


def test_compacted_step_rows_are_the_survivors_rows() -> None:
    """After requests finish, the fused step's buffers keep the survivors' rows (gathered
    on the device in their new slot order) in the bucket of the smaller batch; the rest is
    padding (greedy, position 0)."""
    from runtime.engines.embedded.forward import InferenceModel

    im = InferenceModel(build_tiny("dense", seed=1).model, max_slots=8, capacity=64)
    im.graph_batch_sizes = [2, 4, 8]  # the buckets a GPU engine would have
    params = [SamplingParams(temperature=0.5 + 0.1 * i, top_k=i) for i in range(5)]
    batch = SamplingBatch.build(params, [40 + i for i in range(5)], "cpu")
    im.load_step(
        torch.tensor([11, 12, 13, 14, 15]),
        torch.tensor([3, 4, 5, 6, 7]),
        torch.tensor([1, 2, 3, 4, 5]),
        batch,
    )
    before = [t.clone() for t in im._states[8].tensors()]
    im.compact_step([0, 4, 2])  # row 4 moved into the hole at slot 1
    assert im._live == (4, 3)
    after = im._states[4].tensors()
    for old, new in zip(before, after, strict=True):
        assert torch.equal(new[:3], old[[0, 4, 2]])
    assert after[1][3].item() == 0 and bool(after[4][3])  # padding: position 0, greedy
    im.compact_step([1])  # a smaller bucket again, from the compacted rows
    assert im._live == (2, 1)
    assert im._states[2].tokens[0].item() == 15
