"""EngineClient: retries with backoff, whole-group retry, separate pools, real engine."""

from __future__ import annotations

import json
import random

import httpx
import pytest

from runtime.engines.client import (
    ClientSettings,
    EngineClient,
    EngineFailure,
    EngineRequestError,
    Sample,
)

FAST = ClientSettings(http_retries=2, retry_backoff_s=0.001, group_retries=2, max_backoff_s=0.01)


def _ok(n, finish="length"):
    return [
        {
            "text": "ab",
            "output_ids": [97, 98],
            "meta_info": {
                "id": f"x{i}",
                "finish_reason": {"type": finish},
                "output_token_logprobs": [[-0.5, 97, None], [-0.25, 98, None]],
                "weight_version": "3",
            },
        }
        for i in range(n)
    ]


class Script:
    """A MockTransport handler that answers from a list of (status, body) in order."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        status, body = self.answers.pop(0)
        if isinstance(status, Exception):
            raise status
        return httpx.Response(status, json=body)


def _client(script, settings=FAST):
    return EngineClient(
        "http://engine", settings, transport=httpx.MockTransport(script), rng=random.Random(0)
    )


def test_http_retry_then_success():
    script = Script([(503, {}), (httpx.ConnectError("refused"), None), (200, _ok(1)[0])])
    with _client(script) as c:
        s = c.generate([1, 2], {"max_new_tokens": 2})
    assert s.output_ids == [97, 98] and s.logprobs == [-0.5, -0.25]
    assert s.finish_reason == "length" and s.weight_version == "3"
    assert len(script.requests) == 3


def test_http_retries_exhausted_raise_engine_failure():
    script = Script([(500, {})] * 3)
    with _client(script) as c, pytest.raises(EngineFailure, match="3 attempts"):
        c.generate([1], {})


def test_client_error_is_not_retried():
    script = Script([(400, {"error": "bad"})])
    with _client(script) as c, pytest.raises(EngineRequestError):
        c.generate([1], {})
    assert len(script.requests) == 1


def test_group_retry_on_abort_whole_group():
    aborted = _ok(3)
    aborted[1]["meta_info"]["finish_reason"] = {"type": "abort", "message": "Abort request"}
    script = Script([(200, aborted), (200, _ok(3))])
    with _client(script) as c:
        samples = c.generate_group([5, 6], 3, {"temperature": 1.0}, group_id="g")
    assert len(samples) == 3 and all(isinstance(s, Sample) for s in samples)
    bodies = [json.loads(r.content) for r in script.requests]
    assert len(bodies) == 2
    for b in bodies:
        assert b["input_ids"] == [[5, 6]] * 3
        assert b["sampling_params"] == {"temperature": 1.0}  # one object: the router's shape
        assert "rid" not in b  # the router rejects rid lists


def test_seeded_group_retry_keeps_per_sample_seeds():
    calls = []

    def handler(request):
        body = json.loads(request.content)
        calls.append(body)
        first_round = len(calls) <= 3
        finish = (
            "abort" if first_round and body["sampling_params"]["sampling_seed"] == 11 else "length"
        )
        return httpx.Response(200, json=_ok(1, finish=finish)[0])

    c = EngineClient("http://e", FAST, transport=httpx.MockTransport(handler))
    try:
        samples = c.generate_group([1], 3, {"sampling_seed": 10}, group_id="s")
    finally:
        c.close()
    assert len(samples) == 3 and len(calls) == 6
    seeds = sorted(b["sampling_params"]["sampling_seed"] for b in calls)
    assert seeds == [10, 10, 11, 11, 12, 12]
    assert {b["rid"] for b in calls[3:]} == {"s-0-a1", "s-1-a1", "s-2-a1"}


def test_group_retry_budget_exhausted():
    aborted = _ok(2, finish="abort")
    script = Script([(200, aborted)] * 2 + [(503, {})] * 3)
    with _client(script) as c, pytest.raises(EngineFailure, match="failed 3 times"):
        c.generate_group([1], 2, {})
    # 2 aborted group attempts, then one attempt that exhausts its 3 HTTP tries
    assert len(script.requests) == 5


def test_backoff_grows_and_is_capped():
    c = EngineClient("http://x", ClientSettings(retry_backoff_s=1.0, max_backoff_s=4.0))
    try:
        for attempt, base in [(0, 1.0), (1, 2.0), (2, 4.0), (6, 4.0)]:
            d = c.backoff(attempt)
            assert 0.5 * base <= d <= 1.5 * base
    finally:
        c.close()


def test_health_uses_its_own_pool():
    gen_calls = []

    def gen(req):
        gen_calls.append(req.url.path)
        return httpx.Response(500)

    def health(req):
        return httpx.Response(200)

    c = EngineClient(
        "http://x",
        FAST,
        transport=httpx.MockTransport(gen),
        health_transport=httpx.MockTransport(health),
    )
    try:
        assert c.health() is True
        assert gen_calls == []
    finally:
        c.close()


def test_settings_from_the_contracts_runtime_section():
    from contract.spec.runtime import RuntimeSection

    s = ClientSettings.from_contract(
        RuntimeSection(
            health_timeout_s=2.0,
            generate_timeout_s=30.0,
            http_retries=1,
            group_retries=0,
            retry_backoff_s=0.1,
            weight_audit=True,
        )
    )
    assert (s.health_timeout_s, s.generate_timeout_s, s.http_retries, s.group_retries) == (
        2,
        30,
        1,
        0,
    )


def test_against_real_engine():
    pytest.importorskip("torch")
    pytest.importorskip("olmo_core")
    from runtime.engines.embedded.inprocess import InProcessServer
    from runtime.engines.embedded.tiny import build_tiny

    with (
        InProcessServer(
            build_tiny("dense", seed=1), max_running_requests=4, context_length=64
        ) as srv,
        EngineClient(srv.url, FAST) as c,
    ):
        c.wait_healthy(10)
        assert c.health_generate()
        groups = c.generate_groups(
            [[1, 2, 3], [4, 5]],
            3,
            {"max_new_tokens": 4, "temperature": 1.0, "sampling_seed": 0},
        )
        assert [len(g) for g in groups] == [3, 3]
        assert all(s.prompt_ids == [4, 5] for s in groups[1])
        assert all(len(s.logprobs or []) == len(s.output_ids) for g in groups for s in g)
        again = c.generate_group(
            [1, 2, 3], 3, {"max_new_tokens": 4, "temperature": 1.0, "sampling_seed": 0}
        )
        assert [s.output_ids for s in again] == [s.output_ids for s in groups[0]]
        assert c.get_weight_checksum().startswith("sha256:")
        with pytest.raises(EngineFailure):
            c.update_weights_from_disk("/nonexistent/dir")
        c.flush_cache(retries=3, interval=0.01)
        c.abort("nothing")


def test_the_retry_hook_runs_before_each_http_retry():
    """Behind a router the run drops a dead engine in this hook, so the next attempt goes
    to a live one; a hook that raises (no engine left) ends the request with its error."""
    calls: list[int] = []
    script = Script([(502, {}), (503, {}), (200, _ok(1)[0])])
    c = EngineClient(
        "http://engine",
        FAST,
        transport=httpx.MockTransport(script),
        rng=random.Random(0),
        on_retry=lambda: calls.append(len(script.requests)),
    )
    with c:
        c.generate([1], {})
    assert calls == [1, 2]  # after the first and the second failed attempt, not after success

    class NoEngineLeft(RuntimeError):
        pass

    def give_up() -> None:
        raise NoEngineLeft("engine:0 exited with code -9; no engine left")

    script = Script([(502, {}), (200, _ok(1)[0])])
    c = EngineClient("http://engine", FAST, transport=httpx.MockTransport(script), on_retry=give_up)
    with c, pytest.raises(NoEngineLeft, match="no engine left"):
        c.generate([1], {})
    assert len(script.requests) == 1
