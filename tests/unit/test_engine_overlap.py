"""Overlap schedule: the fused decode step N+1 is launched before step N's tokens are read.
The overlapped engine returns what the plain one returns (tokens, log-probs, versions,
finish reasons, routed experts, prefix-cache contents); tokens of requests that stopped at
step N are thrown away; no K/V row is written past a request's context capacity."""

from __future__ import annotations

import threading
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("olmo_core")

from runtime.engines.embedded.engine import Engine  # noqa: E402
from runtime.engines.embedded.sampling import SamplingParams  # noqa: E402
from runtime.engines.embedded.tiny import build_tiny  # noqa: E402

SLOTS = 4
CONTEXT = 48
LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _engine(overlap: bool, kind: str = "dense", **kw: Any) -> Engine:
    eng = Engine(
        build_tiny(kind, seed=7),
        model_path="test",
        max_running_requests=kw.pop("slots", SLOTS),
        context_length=kw.pop("context", CONTEXT),
        fused_sampling=True,
        overlap_schedule=overlap,
        **kw,
    )
    # every step runs SLOTS rows (the padded batch bucket a GPU engine has): the rows a
    # request shares its step with never change its arithmetic
    eng.im.graph_batch_sizes = [eng.max_running]
    return eng


class _Collector:
    def __init__(self, n: int):
        self.results: list[Any] = [None] * n
        self.done = threading.Event()
        self.hooks: dict[int, Any] = {}
        self._lock = threading.Lock()

    def cb(self, i: int):  # type: ignore[no-untyped-def]
        def f(res: dict) -> None:
            self.results[i] = res
            if i in self.hooks:
                self.hooks[i]()
            with self._lock:
                if all(r is not None for r in self.results):
                    self.done.set()

        return f


def _params(i: int, **over: Any) -> SamplingParams:
    kinds = [
        {"temperature": 0.0},
        {"temperature": 1.0},
        {"temperature": 0.7, "top_k": 20},
        {"temperature": 1.0, "top_p": 0.9},
    ]
    stops = [
        {"ignore_eos": True},
        {"stop_token_ids": list(range(40, 70))},  # frequent stop tokens
        {"stop": LETTERS[::2]},  # stop strings (the byte tokenizer: one letter a token)
        {"ignore_eos": False, "stop_token_ids": list(range(100, 128))},
    ]
    args: dict[str, Any] = {
        "max_new_tokens": 2 + (i * 5) % 9,
        "sampling_seed": 1000 + i,
        **kinds[i % 4],
        **stops[(i // 2) % 4],
    }
    args.update(over)
    return SamplingParams(**args)


def _mixed(overlap: bool, kind: str = "dense") -> tuple[list[dict], Engine]:
    """An anchor request (longest prompt, admitted first, runs to the context capacity:
    every step attends its length) and twelve mixed ones through its three other slots;
    request 3 finishing aborts request 1 (from the scheduler thread, deterministically)."""
    eng = _engine(overlap, kind)
    gen = torch.Generator().manual_seed(3)
    n = 13
    col = _Collector(n)
    moe = kind != "dense"
    prompts = [torch.randint(1, 128, (12,), generator=gen).tolist()]
    prompts += [torch.randint(1, 128, (3 + i % 8,), generator=gen).tolist() for i in range(1, n)]
    params = [SamplingParams(max_new_tokens=10_000, temperature=0.0, ignore_eos=True)]
    params += [_params(i) for i in range(1, n)]
    params[1] = _params(1, max_new_tokens=30, ignore_eos=True, stop_token_ids=[], stop=[])
    reqs = [
        eng.make_request(p, sp, col.cb(i), return_logprob=True, return_routed_experts=moe)
        for i, (p, sp) in enumerate(zip(prompts, params, strict=True))
    ]
    col.hooks[3] = lambda: eng.abort(reqs[1].rid)
    for r in reqs:
        eng.submit(r)
    eng.start()  # everything queued first: the same admissions in both engines
    try:
        assert col.done.wait(120), "engine did not finish"
    finally:
        eng.stop()
    return col.results, eng


def _serve(eng: Engine, prompts: list[list[int]], params: list[SamplingParams], wait: float):
    """Queue every request first (the same admissions in both engines), then run them."""
    col = _Collector(len(prompts))
    for i, (p, sp) in enumerate(zip(prompts, params, strict=True)):
        eng.submit(eng.make_request(p, sp, col.cb(i), return_logprob=True))
    eng.start()
    try:
        assert col.done.wait(wait), "engine did not finish"
    finally:
        eng.stop()
    return col.results


def _assert_same_outputs(plain: list[dict], over: list[dict], tol: float) -> None:
    """Tokens, finish reasons, versions, experts and text equal; log-probs within ``tol``."""
    for x, y in zip(_outputs(plain), _outputs(over), strict=True):
        assert x[0] == y[0] and x[2:] == y[2:]
        assert max((abs(u - v) for u, v in zip(x[1], y[1], strict=True)), default=0) < tol


def _outputs(results: list[dict]) -> list[tuple]:
    return [
        (
            r["output_ids"],
            [x[0] for x in r["meta_info"]["output_token_logprobs"]],
            r["meta_info"]["finish_reason"],
            r["meta_info"]["weight_versions"],
            r["meta_info"].get("routed_experts"),
            r["text"],
        )
        for r in results
    ]


def _tree(eng: Engine) -> dict[tuple[int, ...], list[torch.Tensor]]:
    """Every cached sequence (root to each node) with its nodes' K/V."""
    assert eng.prefix is not None
    out: dict[tuple[int, ...], list[torch.Tensor]] = {}
    stack = [(eng.prefix.root, (), [])]
    while stack:
        node, path, kv = stack.pop()
        for child in node.children.values():
            p, k = path + tuple(child.key), kv + list(child.kv)
            out[p] = k
            stack.append((child, p, k))
    return out


@pytest.mark.parametrize("kind", ["dense", "moe"])
def test_overlapped_engine_returns_what_the_plain_one_returns(kind: str) -> None:
    plain_res, plain = _mixed(False, kind)
    over_res, over = _mixed(True, kind)
    a, b = _outputs(plain_res), _outputs(over_res)
    # token for token; log-probs to the bit except where a request's steps attended a
    # different length (a request admitted one step later, behind a step in flight)
    _assert_same_outputs(plain_res, over_res, tol=1e-5)
    if kind == "dense":  # the anchor: every step the same shapes in both engines (an MoE
        assert a[0] == b[0]  # step groups rows by expert: its other rows matter)
    reasons = {r["meta_info"]["finish_reason"]["type"] for r in plain_res}
    assert reasons == {"stop", "length", "abort"}
    assert any(isinstance(r["meta_info"]["finish_reason"].get("matched"), str) for r in plain_res)
    assert plain_res[0]["meta_info"]["completion_tokens"] == CONTEXT - 12  # the capacity
    # the discarded tokens are not generated tokens
    assert over.stats["num_overlapped_steps"] > 0
    assert over.stats["num_discarded_tokens"] > 0
    assert plain.stats["num_overlapped_steps"] == plain.stats["num_discarded_tokens"] == 0
    total = sum(len(r["output_ids"]) for r in over_res)
    assert over.stats["num_generated_tokens"] == plain.stats["num_generated_tokens"] == total
    # the prefix cache holds the same sequences: no discarded token entered it
    ta, tb = _tree(plain), _tree(over)
    assert ta.keys() == tb.keys()
    for key in ta:
        for u, v in zip(ta[key], tb[key], strict=True):
            assert torch.allclose(u, v, atol=1e-5)


def test_one_request_at_the_context_capacity_and_at_max_new() -> None:
    """The step launched after a request's last token writes one K/V row at most at
    position ``context - 1`` (inside its slot, past what the prefix cache takes); its token
    is dropped. Alone in the engine, every step has one shape: bit-identical."""
    context = 40
    for max_new, prompt in ((10_000, [5, 6, 7, 8, 9]), (6, [3, 4])):
        outs = []
        for overlap in (False, True):
            eng = _engine(overlap, context=context, slots=2)
            done: list[dict] = []
            sp = SamplingParams(max_new_tokens=max_new, temperature=1.0, ignore_eos=True)
            eng.submit(eng.make_request(prompt, sp, done.append, return_logprob=True))
            eng.start()
            try:
                while not done:
                    threading.Event().wait(0.01)
            finally:
                eng.stop()
            outs.append(_outputs(done))
            expect = min(max_new, context - len(prompt))
            assert done[0]["meta_info"]["completion_tokens"] == expect
            assert eng.stats["num_generated_tokens"] == expect
            assert eng.stats["num_discarded_tokens"] == (1 if overlap else 0)
            for c in eng.im.kv_rows():  # nothing written at or past the context length
                assert not c[:, :, context:].any()
            # the cached sequence ends before the last token (whose K/V was never needed)
            assert max(len(k) for k in _tree(eng)) == len(prompt) + expect - 1
        assert outs[0] == outs[1]


def test_plain_schedule_when_switched_off_or_not_fused() -> None:
    loaded = build_tiny("dense", seed=7)
    assert not Engine(loaded, model_path="t", fused_sampling=False).overlap_schedule
    assert Engine(loaded, model_path="t", fused_sampling=True).overlap_schedule
    off = Engine(loaded, model_path="t", fused_sampling=True, overlap_schedule=False)
    assert not off.overlap_schedule


@pytest.mark.parametrize("mode", ["in_place", "retract"])
def test_pause_and_weight_update_mid_run_drain_the_step_in_flight(mode: str) -> None:
    """A pause mid-run reads the step in flight first; a weight update (the same values
    under a new version) applies while paused; decoding resumes with the same tokens."""

    def run(overlap: bool, pause: bool) -> tuple[list[dict], Engine]:
        eng = _engine(overlap)
        col = _Collector(6)
        for i in range(6):
            sp = _params(i, max_new_tokens=25, ignore_eos=True, stop_token_ids=[], stop=[])
            eng.submit(eng.make_request([3, 4, 5 + i], sp, col.cb(i), return_logprob=True))
        eng.start()
        try:
            if pause:
                while eng.stats["num_decode_steps"] < 5:
                    threading.Event().wait(0.001)
                assert eng.pause_generation(mode)
                assert eng._inflight is None  # drained before pausing
                named = [(k, v.clone()) for k, v in eng.model.state_dict().items()]
                assert eng.update_weights_from_tensors(named, version="1")["success"]
                assert eng.continue_generation()
            assert col.done.wait(120), "engine did not finish"
        finally:
            eng.stop()
        return col.results, eng

    plain, _ = run(False, pause=False)
    paused, eng = run(True, pause=True)
    assert eng.stats["num_overlapped_steps"] > 0
    for x, y in zip(plain, paused, strict=True):
        assert x["output_ids"] == y["output_ids"]
        lx = [t[0] for t in x["meta_info"]["output_token_logprobs"]]
        ly = [t[0] for t in y["meta_info"]["output_token_logprobs"]]
        assert max(abs(u - v) for u, v in zip(lx, ly, strict=True)) < 1e-4
        spans = y["meta_info"]["weight_versions"]
        assert [s["version"] for s in spans] in (["0"], ["1"], ["0", "1"])
        assert spans[-1]["end"] == len(y["output_ids"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_graph_engine_overlapped_on_gpu() -> None:
    """On a GPU: the captured fused step, its tokens copied to pinned memory behind an
    event; the overlapped engine gives the plain one's tokens (log-probs to 1e-4)."""

    def run(overlap: bool) -> tuple[list[dict], Engine]:
        loaded = build_tiny("dense", seed=7)
        loaded.model.to("cuda")
        eng = Engine(
            loaded,
            model_path="test",
            device="cuda",
            max_running_requests=SLOTS,
            context_length=CONTEXT,
            cuda_graph=True,
            fused_sampling=True,
            overlap_schedule=overlap,
            graph_kv_step=64,
        )
        prompts = [[3 + i, 4, 5 + i] for i in range(10)]
        params = [_params(i, max_new_tokens=40 if i == 0 else 2 + (i * 5) % 9) for i in range(10)]
        return _serve(eng, prompts, params, wait=300), eng

    (plain, _), (over, eng) = run(False), run(True)
    assert eng.stats["num_overlapped_steps"] > 0
    _assert_same_outputs(plain, over, tol=1e-4)


def test_recurrent_model_overlapped(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """GatedDeltaNet layers: the step launched ahead also advances the recurrent state of
    a request that stopped (its slot is freed; a prefill resets it) and of the survivors
    (moved with their slots after it): the same tokens as the plain schedule."""
    pytest.importorskip("transformers.models.olmo_hybrid")
    from test_hf_families import write_hf_checkpoint

    from runtime.models import load_model
    from runtime.models.gdn_cpu import install_transformers_cpu_fallbacks

    install_transformers_cpu_fallbacks()
    write_hf_checkpoint(tmp_path, "olmo_hybrid")

    def run(overlap: bool) -> tuple[list[dict], Engine]:
        eng = Engine(
            load_model(str(tmp_path)),
            model_path="t",
            max_running_requests=3,
            context_length=40,
            fused_sampling=True,
            overlap_schedule=overlap,
        )
        assert eng.im.recurrent is not None
        eng.im.graph_batch_sizes = [3]
        prompts = [[3 + i, 4, 5, 6] for i in range(7)]
        params = [
            _params(i, stop=[], stop_token_ids=list(range(10, 30)) if i % 2 else [])
            for i in range(7)
        ]
        return _serve(eng, prompts, params, wait=120), eng

    (plain, _), (over, eng) = run(False), run(True)
    assert eng.stats["num_overlapped_steps"] > 0 and eng.stats["num_discarded_tokens"] > 0
    _assert_same_outputs(plain, over, tol=1e-5)
