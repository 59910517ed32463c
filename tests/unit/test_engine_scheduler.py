"""Scheduler, sampling and weight reload of the embedded engine (in-process, no HTTP)."""

from __future__ import annotations

import threading
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("olmo_core")

from runtime.engines.embedded.engine import (  # noqa: E402
    Engine,
    decode_routed_experts,
    state_checksum,
)
from runtime.engines.embedded.sampling import BadRequest, SamplingParams, sample  # noqa: E402
from runtime.engines.embedded.tiny import build_tiny  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def loaded():
    return build_tiny("dense", seed=7)


def _engine(loaded, **kw):
    kw.setdefault("max_running_requests", 4)
    kw.setdefault("context_length", 128)
    eng = Engine(loaded, model_path="test", **kw)
    eng.start()
    return eng


def _run(eng, prompts, params, **kw):
    """Submit all at once, wait for all; returns results in order."""
    results: list = [None] * len(prompts)
    done = threading.Event()
    left = [len(prompts)]
    lock = threading.Lock()

    def cb(i):
        def f(res):
            results[i] = res
            with lock:
                left[0] -= 1
                if left[0] == 0:
                    done.set()

        return f

    reqs = [
        eng.make_request(p, params[i] if isinstance(params, list) else params, cb(i), **kw)
        for i, p in enumerate(prompts)
    ]
    for r in reqs:
        eng.submit(r)
    assert done.wait(60), "engine did not finish"
    return results


def test_continuous_batching_matches_one_at_a_time(loaded):
    """Ten greedy requests through 4 slots (admitted as others finish) give the same
    tokens as running each alone: batching and slot compaction do not leak state."""
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, 128, (int(n),), generator=gen).tolist() for n in range(3, 13)]
    params = [SamplingParams(max_new_tokens=4 + i % 5, temperature=0.0) for i in range(10)]
    eng = _engine(loaded)
    try:
        together = _run(eng, prompts, params, return_logprob=True)
        alone = [
            _run(eng, [p], [sp], return_logprob=True)[0]
            for p, sp in zip(prompts, params, strict=True)
        ]
    finally:
        eng.stop()
    for a, b, sp in zip(together, alone, params, strict=True):
        assert a["output_ids"] == b["output_ids"]
        assert len(a["output_ids"]) == sp.max_new_tokens
        assert a["meta_info"]["finish_reason"] == {"type": "length", "length": sp.max_new_tokens}
        lp_a = [x[0] for x in a["meta_info"]["output_token_logprobs"]]
        lp_b = [x[0] for x in b["meta_info"]["output_token_logprobs"]]
        assert max(abs(x - y) for x, y in zip(lp_a, lp_b, strict=True)) < 1e-4
    assert eng.stats["num_decode_steps"] > 0


def test_greedy_logprobs_are_model_logprobs(loaded):
    eng = _engine(loaded)
    try:
        res = _run(
            eng, [[5, 6, 7]], SamplingParams(max_new_tokens=3, temperature=0.0), return_logprob=True
        )[0]
    finally:
        eng.stop()
    ids = [5, 6, 7] + res["output_ids"]
    with torch.no_grad():
        ref = torch.log_softmax(loaded.model(torch.tensor([ids]))[0], dim=-1)
    for k, (lp, tok, _) in enumerate(res["meta_info"]["output_token_logprobs"]):
        assert tok == int(ref[2 + k].argmax())
        assert abs(lp - float(ref[2 + k, tok])) < 1e-4


def test_seeded_sampling_reproduces_and_seeds_differ(loaded):
    eng = _engine(loaded, seed=3)
    try:
        sp = [
            SamplingParams(max_new_tokens=12, temperature=1.0, sampling_seed=s) for s in (1, 1, 2)
        ]
        a = _run(eng, [[1, 2, 3]] * 3, sp)
        # alone (different batch composition) with the same seed: same tokens
        b = _run(eng, [[1, 2, 3]], [sp[0]])[0]
    finally:
        eng.stop()
    assert a[0]["output_ids"] == a[1]["output_ids"] == b["output_ids"]
    assert a[0]["output_ids"] != a[2]["output_ids"]


def test_stop_token_and_stop_string(loaded):
    eng = _engine(loaded)
    try:
        free = _run(
            eng, [[9, 8, 7]], SamplingParams(max_new_tokens=6, temperature=0.0, ignore_eos=True)
        )[0]
        ids = free["output_ids"]
        stop_tok = ids[2]
        first = ids.index(stop_tok)
        by_token = _run(
            eng,
            [[9, 8, 7]],
            SamplingParams(
                max_new_tokens=6, temperature=0.0, stop_token_ids=[stop_tok], ignore_eos=True
            ),
        )[0]
        text = loaded.tokenizer.decode(ids)
        assert len(text) >= 2
        stop_str = text[-2:]
        by_string = _run(
            eng,
            [[9, 8, 7]],
            SamplingParams(max_new_tokens=6, temperature=0.0, stop=[stop_str], ignore_eos=True),
        )[0]
    finally:
        eng.stop()
    assert by_token["output_ids"] == ids[: first + 1]
    assert by_token["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop_tok}
    assert by_string["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop_str}
    assert stop_str not in by_string["text"]
    assert text.startswith(by_string["text"])


def test_token_budget_limits_concurrency(loaded):
    """max_total_tokens 40 with requests reserving 3+16=19 tokens: at most 2 run at once."""
    eng = _engine(loaded, max_total_tokens=40)
    peak = [0]
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            peak[0] = max(peak[0], eng.load()["num_running_reqs"])
            time.sleep(0.001)

    t = threading.Thread(target=watch)
    t.start()
    try:
        res = _run(
            eng,
            [[1, 2, 3]] * 5,
            SamplingParams(max_new_tokens=16, temperature=0.0, ignore_eos=True),
        )
    finally:
        stop.set()
        t.join()
        eng.stop()
    assert all(len(r["output_ids"]) == 16 for r in res)
    assert 1 <= peak[0] <= 2


def test_abort_running_and_waiting(loaded):
    eng = _engine(loaded, max_running_requests=1, context_length=1024)
    results: dict[str, dict] = {}
    done = threading.Event()

    def cb(res):
        results[res["meta_info"]["id"]] = res
        if len(results) == 2:
            done.set()

    long = SamplingParams(max_new_tokens=1000, temperature=0.0, ignore_eos=True)
    try:
        for rid in ("a", "b"):
            eng.submit(eng.make_request([1, 2], long, cb, rid=rid))
        time.sleep(0.05)
        eng.abort("b")  # waiting (one slot)
        eng.abort("a")  # running
        assert done.wait(30)
    finally:
        eng.stop()
    for rid in ("a", "b"):
        assert results[rid]["meta_info"]["finish_reason"]["type"] == "abort"
    assert len(results["a"]["output_ids"]) < 1000


def test_weight_update_from_safetensors(tmp_path, loaded):
    from safetensors.torch import save_file

    other = build_tiny("dense", seed=99)
    state = {k: v.contiguous() for k, v in other.model.state_dict().items()}
    save_file(state, str(tmp_path / "model.safetensors"))
    fresh = build_tiny("dense", seed=7)
    eng = _engine(fresh)
    try:
        sp = SamplingParams(max_new_tokens=8, temperature=0.0, ignore_eos=True)
        before = _run(eng, [[3, 4, 5]], sp)[0]
        assert eng.checksum() == state_checksum(loaded.model.state_dict())
        res = eng.update_weights(str(tmp_path), version="v2", abort_all=False)
        assert res["success"], res
        after = _run(eng, [[3, 4, 5]], sp)[0]
        bad = eng.update_weights(str(tmp_path / "nope"), version="v3", abort_all=False)
    finally:
        eng.stop()
    assert eng.checksum() == state_checksum(other.model.state_dict())
    assert after["meta_info"]["weight_version"] == "v2"
    assert before["meta_info"]["weight_version"] == "0"
    assert after["output_ids"] != before["output_ids"]
    assert not bad["success"] and eng.weight_version == "v2"


def test_a_weight_load_that_would_leave_the_fused_projections_stale_fails(loaded):
    """The engine's fused q/k/v and gate/up products view the model's parameters; a load
    that replaced a parameter object instead of copying into it is refused by name."""
    fresh = build_tiny("dense", seed=7)
    eng = _engine(fresh)
    try:
        w_q = fresh.model.blocks["0"].attention.w_q
        w_q.weight = torch.nn.Parameter(w_q.weight.detach().clone())
        named = [(k, v.clone()) for k, v in fresh.model.state_dict().items()]
        res = eng.update_weights_from_tensors(named, version="v2")
    finally:
        eng.stop()
    assert not res["success"] and "fused projections" in res["message"]


def test_moe_routed_experts_cover_prompt_and_output():
    moe = build_tiny("moe", seed=1)
    eng = _engine(moe)
    try:
        res = _run(
            eng,
            [[1, 2, 3, 4]],
            SamplingParams(max_new_tokens=5, temperature=0.0, ignore_eos=True),
            return_routed_experts=True,
        )[0]
    finally:
        eng.stop()
    arr = decode_routed_experts(res["meta_info"]["routed_experts"], num_layers=2, top_k=2)
    assert arr.shape == (4 + 5 - 1, 2, 2)
    assert int(arr.min()) >= 0 and int(arr.max()) < 8


def test_request_validation(loaded):
    eng = Engine(loaded, model_path="t", max_running_requests=1, context_length=16)
    with pytest.raises(BadRequest):
        eng.make_request([], SamplingParams(), print)
    with pytest.raises(BadRequest):
        eng.make_request([500], SamplingParams(), print)
    with pytest.raises(BadRequest):
        eng.make_request(list(range(1, 17)), SamplingParams(), print)
    req = eng.make_request([1, 2, 3], SamplingParams(max_new_tokens=100), print)
    assert req.max_new == 13  # clipped to the context length
    for bad in ({"top_p": 0}, {"top_k": 0}, {"temperature": -1}, {"bogus": 1}, {"regex": "a"}):
        with pytest.raises(BadRequest):
            SamplingParams.from_json(bad)
    assert SamplingParams.from_json({"stop": "x"}).stop == ["x"]


def test_sampler_truncation():
    logits = torch.tensor([[0.0, 5.0, 4.9, -3.0]] * 3)
    params = [
        SamplingParams(temperature=0.0),
        SamplingParams(temperature=1.0, top_k=1),
        SamplingParams(temperature=1.0, top_p=0.3),
    ]
    for step in range(20):
        toks, lps = sample(logits, params, [0, 1, 2], [step] * 3)
        assert toks.tolist() == [1, 1, 1]
    # top_k=2 only ever yields the two best tokens
    seen = set()
    for i in range(200):
        toks, lps = sample(logits[:1], [SamplingParams(top_k=2)], [i], [0])
        seen.add(int(toks[0]))
        assert lps[0] <= 0
    assert seen == {1, 2}


def test_batched_prefill_admission_matches_one_at_a_time(loaded):
    """Eight seeded, sampled requests with ragged prompts admitted together (one ragged
    prefill, split into chunks by a small token budget) give the same tokens and logprobs
    as each request alone; input logprobs too."""
    gen = torch.Generator().manual_seed(11)
    prompts = [
        torch.randint(1, 128, (n,), generator=gen).tolist() for n in (3, 9, 4, 14, 1, 7, 12, 5)
    ]
    params = [
        SamplingParams(max_new_tokens=6, temperature=0.8, sampling_seed=100 + i, ignore_eos=True)
        for i in range(8)
    ]
    eng = _engine(loaded, max_running_requests=8, prefill_tokens=40)
    try:
        together = _run(eng, prompts, params, return_logprob=True, logprob_start_len=0)
        alone = [
            _run(eng, [p], [sp], return_logprob=True, logprob_start_len=0)[0]
            for p, sp in zip(prompts, params, strict=True)
        ]
    finally:
        eng.stop()
    for a, b in zip(together, alone, strict=True):
        assert a["output_ids"] == b["output_ids"]
        for key in ("output_token_logprobs", "input_token_logprobs"):
            xs, ys = a["meta_info"][key], b["meta_info"][key]
            assert [x[1] for x in xs] == [y[1] for y in ys]
            for x, y in zip(xs, ys, strict=True):
                assert (x[0] is None) == (y[0] is None)
                if x[0] is not None:
                    assert abs(x[0] - y[0]) < 1e-4
    assert eng.stats["num_prompt_tokens"] == 2 * sum(map(len, prompts))


def test_prefill_chunks_respect_the_padded_budget():
    from runtime.engines.embedded.engine import prefill_chunks

    assert prefill_chunks([4, 4, 4, 4], 8) == [[0, 1], [2, 3]]
    assert prefill_chunks([2, 3, 10, 3], 12) == [[0, 1], [2], [3]]
    assert prefill_chunks([50], 16) == [[0]]  # longer than the budget: alone
    assert prefill_chunks([128] * 256, 16384) == [list(range(128)), list(range(128, 256))]
    assert prefill_chunks([], 16) == []


def test_timings_are_recorded_with_profile(loaded):
    eng = _engine(loaded, profile=True)
    try:
        _run(eng, [[1, 2, 3]] * 2, SamplingParams(max_new_tokens=5, ignore_eos=True))
    finally:
        eng.stop()
    t = eng.timings
    assert t["prefill_s"] > 0 and t["decode_s"] > 0
    assert 0 < t["prefill_wait_s"] < t["prefill_s"]
    assert 0 < t["forward_s"] + t["sample_s"] <= t["decode_s"]
    # the radix tree's copies happen inside admission and retirement
    assert 0 < t["prefix_cache_s"] <= t["prefill_s"] + t["decode_s"]


def test_sampled_tokens_survive_composition_changes_and_long_runs(loaded):
    """Seeded sampling over more steps than the engine's uniform table (64), while other
    requests join and finish around it: same tokens as the request alone."""
    sp = SamplingParams(max_new_tokens=70, temperature=1.0, sampling_seed=77, ignore_eos=True)
    others = [
        SamplingParams(max_new_tokens=n, temperature=0.7, sampling_seed=n, ignore_eos=True)
        for n in (3, 20, 66)
    ]
    eng = _engine(loaded, max_running_requests=3)
    try:
        mixed = _run(eng, [[4, 5, 6], [7], [8, 9], [1, 2, 3, 4]], [sp, *others])
        alone = _run(eng, [[4, 5, 6]], [sp])[0]
    finally:
        eng.stop()
    assert mixed[0]["output_ids"] == alone["output_ids"]
    assert len(alone["output_ids"]) == 70


def test_failed_prefill_fails_every_admitted_request_and_engine_recovers(loaded):
    eng = _engine(loaded, max_running_requests=4, prefill_tokens=4)
    real = eng.im.prefill_batch
    calls = [0]

    def flaky(*a, **kw):
        calls[0] += 1
        if calls[0] == 2:  # the second chunk
            raise RuntimeError("boom")
        return real(*a, **kw)

    eng.im.prefill_batch = flaky
    try:
        sp = SamplingParams(max_new_tokens=3, temperature=0.0, ignore_eos=True)
        res = _run(eng, [[1, 2], [3, 4], [5, 6]], sp)  # chunks: [0, 1], [2]
        after = _run(eng, [[1, 2]], sp)[0]
    finally:
        eng.stop()
    kinds = [r["meta_info"]["finish_reason"]["type"] for r in res]
    assert kinds == ["abort"] * 3
    assert all(r["meta_info"]["finish_reason"]["status_code"] == 500 for r in res)
    assert len(after["output_ids"]) == 3


def test_graph_bucket_path_matches_eager(loaded):
    """decode_step's graph path (static buffers, padded rows into free slots, KV-length
    buckets) with an eager stand-in for graph replay: same tokens/logprobs as plain eager
    under continuous batching with slot compaction."""
    from runtime.engines.embedded.forward import graph_batch_sizes

    gen = torch.Generator().manual_seed(3)
    prompts = [torch.randint(1, 128, (int(n),), generator=gen).tolist() for n in range(2, 12)]
    params = [
        SamplingParams(max_new_tokens=5 + i % 7, temperature=0.9, sampling_seed=i)
        for i in range(10)
    ]
    plain = _engine(loaded, max_running_requests=5, context_length=40)
    try:
        ref = _run(plain, prompts, params, return_logprob=True)
    finally:
        plain.stop()

    eng = _engine(loaded, max_running_requests=5, context_length=40)
    im = eng.im
    shapes = []

    class Replay:
        def __init__(self, tok, pos, length, out):
            self.args = (tok, pos, length, out)

        def replay(self):
            tok, pos, length, out = self.args
            out[0].copy_(im.decode(tok, pos, kv_len=length)[0])

    def fake_graph(bs, length):
        shapes.append((bs, length))
        tok = torch.zeros(bs, dtype=torch.long)
        pos = torch.zeros(bs, dtype=torch.long)
        out = (torch.empty(bs, eng.vocab_size), None)  # (logits, routed experts)
        return Replay(tok, pos, length, out), tok, pos, out

    im._graph = fake_graph
    im.graph_batch_sizes = graph_batch_sizes(5, [1, 2, 4])
    im.graph_kv_step = 16
    try:
        got = _run(eng, prompts, params, return_logprob=True)
    finally:
        eng.stop()
    assert {b for b, _ in shapes} <= {1, 2, 4, 5} and {n for _, n in shapes} <= {16, 32, 48, 64}
    assert any(b == 4 for b, _ in shapes) and any(n == 32 for _, n in shapes)
    for a, b in zip(got, ref, strict=True):
        assert a["output_ids"] == b["output_ids"]
        lp_a = [x[0] for x in a["meta_info"]["output_token_logprobs"]]
        lp_b = [x[0] for x in b["meta_info"]["output_token_logprobs"]]
        assert max(abs(x - y) for x, y in zip(lp_a, lp_b, strict=True)) < 1e-4


def test_requests_submitted_together_share_one_admission(loaded):
    """``submit_many`` (the server's path for a batch or a group's ``n`` samples) queues a
    burst at once: one admission round prefills all of it, and the results are those of
    requests submitted one by one."""
    prompts = [[5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16], [3, 4]]
    params = SamplingParams(max_new_tokens=5, temperature=0.0)
    eng = _engine(loaded, max_running_requests=4)
    try:
        one_by_one = _run(eng, prompts, params)
        done = threading.Event()
        results: list = [None] * len(prompts)

        def cb(i):
            def f(res):
                results[i] = res
                if all(r is not None for r in results):
                    done.set()

            return f

        before = eng.stats["num_admissions"]
        eng.submit_many([eng.make_request(p, params, cb(i)) for i, p in enumerate(prompts)])
        assert done.wait(60), "engine did not finish"
        assert eng.stats["num_admissions"] - before == 1
    finally:
        eng.stop()
    assert [r["output_ids"] for r in results] == [r["output_ids"] for r in one_by_one]


def test_a_group_never_straddles_two_prefill_chunks(loaded):
    """A chunk's token budget counts one row per group of identical prompts, and a group is
    prefilled whole inside one chunk: its samples copy the leader's K/V (no second forward
    from the tree), and each sample's seeded tokens are those it gets alone."""
    a, b = [5, 6, 7, 8, 9, 10, 11, 12], [20, 21, 22, 23, 24, 25, 26, 27]
    prompts = [a, a, a, b, b, b]
    params = [
        SamplingParams(max_new_tokens=4, temperature=0.9, sampling_seed=40 + i, ignore_eos=True)
        for i in range(6)
    ]
    # 20 padded tokens: two 8-token rows fit, so per request the groups would straddle
    eng = _engine(loaded, max_running_requests=6, prefill_tokens=20)
    rows: list[int] = []
    prefill = eng.im.prefill_batch

    def counted(seqs, slots, **kw):
        rows.append(len(seqs))
        return prefill(seqs, slots, **kw)

    eng.im.prefill_batch = counted
    try:
        together = _run(eng, prompts, params)
        eng.flush_cache()
        rows_together = list(rows)
        alone = [_run(eng, [p], [sp])[0] for p, sp in zip(prompts, params, strict=True)]
    finally:
        eng.stop()
    assert rows_together == [2]  # one forward, one row per distinct prompt
    assert [r["output_ids"] for r in together] == [r["output_ids"] for r in alone]


def test_admission_waits_for_a_burst_to_settle(loaded):
    """The hold before admitting: until arrivals have paused ``admission_quiet_s``, never
    past ``admission_window_s`` after the first waiting arrival; nothing waiting, no hold."""
    eng = Engine(
        loaded,
        model_path="test",
        max_running_requests=4,
        context_length=128,
        admission_quiet_s=0.01,
        admission_window_s=0.05,
    )
    params = SamplingParams(max_new_tokens=2)
    assert eng.admission_wait(100.0) == 0.0
    eng.submit_many([eng.make_request([1, 2], params, lambda r: None)])
    t0 = eng._first_arrival
    assert eng.admission_wait(t0) == pytest.approx(0.01)
    assert eng.admission_wait(t0 + 0.011) == 0.0  # quiet long enough
    for k in range(1, 6):  # arrivals keep coming: the window caps the hold
        eng._last_arrival = t0 + 0.009 * k
    assert eng.admission_wait(t0 + 0.045) == pytest.approx(0.005)
    assert eng.admission_wait(t0 + 0.05) == 0.0


def test_groups_arriving_apart_are_admitted_in_one_round(loaded):
    """Four groups submitted 20 ms apart from another thread (a collection's HTTP
    requests) are held and admitted in one round; with gathering off, each group that
    arrives to an idle engine is admitted on its own."""
    params = SamplingParams(max_new_tokens=3, temperature=0.0)
    groups = [[[5, 6, 7]] * 2, [[8, 9]] * 2, [[10, 11, 12, 13]] * 2, [[14]] * 2]

    def admissions(gap: float, **kw) -> int:
        eng = _engine(loaded, max_running_requests=8, **kw)
        done = threading.Semaphore(0)
        try:
            for g in groups:
                eng.submit_many([eng.make_request(p, params, lambda r: done.release()) for p in g])
                time.sleep(gap)
            for _ in range(8):
                assert done.acquire(timeout=60)
            return eng.stats["num_admissions"]
        finally:
            eng.stop()

    assert admissions(0.02, admission_quiet_s=0.5, admission_window_s=10.0) == 1
    assert admissions(0.3, admission_quiet_s=0.0, admission_window_s=0.0) == 4
