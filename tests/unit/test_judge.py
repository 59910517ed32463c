"""Judge rubrics and the judge verifier against real OpenAI-compatible servers on loopback."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from aiohttp import web

from runtime.rewards.base import ScoreItem, VerifierFailure, get_verifier
from runtime.rewards.judge import RUBRICS, Rubric, judge_url, rubric_from_config
from runtime.rewards.judge_server import add_openai_routes, render_chat


class LoopbackServer:
    """An aiohttp app served from a background thread on 127.0.0.1 (port picked by the OS)."""

    def __init__(self, app: web.Application) -> None:
        self.loop = asyncio.new_event_loop()
        self.runner = web.AppRunner(app, access_log=None)
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(self.runner.setup())
            site = web.TCPSite(self.runner, "127.0.0.1", 0)
            self.loop.run_until_complete(site.start())
            self.port = self.runner.addresses[0][1]
            ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        assert ready.wait(30)
        self.url = f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


def serve(generate_fn: Callable[[Any, dict[str, Any]], Any], tokenizer: Any = None):
    app = web.Application()
    add_openai_routes(app, generate_fn, tokenizer)
    return LoopbackServer(app)


class Scripted:
    """A deterministic judge: answers by markers in the graded response."""

    def __init__(self) -> None:
        self.calls = 0
        self.flaky_left = 0
        self.prompts: list[str] = []
        self.slow_in_flight = 0
        self.most_slow_in_flight = 0

    async def __call__(self, prompt: str, params: dict[str, Any]) -> str:
        self.calls += 1
        self.prompts.append(prompt)
        if "MODE=slow" in prompt:
            self.slow_in_flight += 1
            self.most_slow_in_flight = max(self.most_slow_in_flight, self.slow_in_flight)
            try:
                await asyncio.sleep(1.0)
            finally:
                self.slow_in_flight -= 1
            return "SCORE: 9"
        if "MODE=flaky" in prompt and self.flaky_left > 0:
            self.flaky_left -= 1
            raise RuntimeError("engine hiccup")
        if "MODE=broken" in prompt:
            raise RuntimeError("always down")
        if "MODE=garbage" in prompt:
            return "I refuse to grade this."
        if "MODE=json" in prompt:
            return 'My verdict: {"score": 4, "why": "meh"}'
        if "MODE=range" in prompt:
            return "SCORE: 42"
        return "The response is decent.\nSCORE: 8"


@pytest.fixture(scope="module")
def scripted():
    fn = Scripted()
    server = serve(fn)
    yield fn, server
    server.close()


def judge(server, **cfg):
    base = {"url": server.url, "timeout_s": 5, "retries": 2, "backoff_s": 0.01}
    return get_verifier("judge", {**base, **cfg})


def test_rubric_parse_and_normalise():
    r = RUBRICS["helpfulness"]
    assert r.parse("blah\nSCORE: 8") == pytest.approx(7 / 9)
    assert r.parse("SCORE: 2 ... on reflection SCORE: 10") == 1.0
    assert r.parse('{"score": 1}') == 0.0
    assert r.parse("SCORE: 11") is None and r.parse("no score") is None
    assert RUBRICS["binary"].parse("SCORE: 1") == 1.0
    with pytest.raises(ValueError):
        Rubric(name="bad", system="s", template="t", pattern="no group")
    custom = rubric_from_config(
        "stars", {"system": "s", "template": "{response}", "pattern": r"(\d) stars", "max_score": 5}
    )
    assert custom.parse("I give it 4 stars") == pytest.approx(0.75)
    with pytest.raises(ValueError, match="unknown keys"):
        rubric_from_config("x", {"system": "s", "template": "t", "colour": 1})


def test_judge_url_forms():
    assert judge_url("http://h:1") == "http://h:1/v1/chat/completions"
    assert judge_url("http://h:1/v1/") == "http://h:1/v1/chat/completions"


def test_render_chat_plain():
    text = render_chat([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])
    assert text == "<|system|>\nS\n<|user|>\nU\n<|assistant|>\n"


def test_endpoint_is_openai_shaped(scripted):
    _, server = scripted
    with httpx.Client(trust_env=False) as c:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 2}
        data = c.post(server.url + "/v1/chat/completions", json=body).json()
        assert data["object"] == "chat.completion" and len(data["choices"]) == 2
        assert data["choices"][0]["message"] == {
            "role": "assistant",
            "content": data["choices"][0]["message"]["content"],
        }
        assert "SCORE: 8" in data["choices"][0]["message"]["content"]
        assert c.post(server.url + "/v1/chat/completions", json={"messages": []}).status_code == 400
        assert c.get(server.url + "/v1/models").json()["data"][0]["id"] == "rlc-judge"


def test_judge_scores_and_fills_template(scripted):
    fn, server = scripted
    v = judge(server, rubric="correctness")
    res = v.score("The answer is 4.", "4", {"prompt": "What is 2+2?"})
    assert res.ok and res.score == pytest.approx(0.8)
    assert res.detail["rubric"] == "correctness"
    sent = fn.prompts[-1]
    assert "What is 2+2?" in sent and "[Reference answer]\n4" in sent and "The answer is 4." in sent
    res = v.score("MODE=json", None, {"prompt": "q", "rubric": "helpfulness"})
    assert res.ok and res.score == pytest.approx(3 / 9)
    v.close()


def test_retry_after_5xx(scripted):
    fn, server = scripted
    fn.flaky_left = 2
    before = fn.calls
    v = judge(server, retries=2)
    res = v.score("MODE=flaky", None, {"prompt": "q"})
    assert res.ok and res.score == pytest.approx(7 / 9)
    assert fn.calls - before == 3
    fn.flaky_left = 5
    v1 = judge(server, retries=1)
    res = v1.score("MODE=flaky", None, {"prompt": "q"})
    assert not res.ok and res.score == 0.0 and "HTTP 500" in res.failure
    fn.flaky_left = 0


def test_timeout_unparsable_and_out_of_range(scripted):
    _, server = scripted
    v = judge(server, timeout_s=0.3, retries=1)
    t0 = time.monotonic()
    res = v.score("MODE=slow", None, {"prompt": "q"})
    assert not res.ok and "timeout" in res.failure and time.monotonic() - t0 < 3
    res = v.score("MODE=garbage", None, {"prompt": "q"})
    assert not res.ok and res.score == 0.0 and "unparsable" in res.failure
    assert "refuse" in res.detail["judge_output"]
    assert not v.score("MODE=range", None, {"prompt": "q"}).ok
    assert not v.score("x", None, {"rubric": "nope"}).ok


def test_failure_policy_fail_raises(scripted):
    _, server = scripted
    v = judge(server, failure_policy="fail", retries=0)
    with pytest.raises(VerifierFailure):
        v.score("MODE=garbage", None, {"prompt": "q"})
    with pytest.raises(VerifierFailure):
        v.score_batch([ScoreItem("MODE=broken", None, {"prompt": "q"})])


def test_unreachable_judge_is_a_failure():
    v = get_verifier("judge", {"url": "http://127.0.0.1:9", "retries": 1, "backoff_s": 0.01})
    res = v.score("r", None, {"prompt": "q"})
    assert not res.ok and "unreachable" in res.failure


def test_batch_is_concurrent_and_ordered(scripted):
    fn, server = scripted
    v = judge(server, concurrency=4)
    items = [
        ScoreItem("MODE=slow" if i % 2 else "fine", None, {"prompt": str(i)}) for i in range(8)
    ]
    fn.most_slow_in_flight = 0
    out = v.score_batch(items)
    assert [r.score for r in out] == [pytest.approx(7 / 9), pytest.approx(8 / 9)] * 4
    assert fn.most_slow_in_flight > 1  # the slow calls overlapped: sent in parallel, not in a row


def test_tokenizer_path_round_trips():
    class Chars:
        def encode(self, text):
            return [ord(c) for c in text]

        def decode(self, ids):
            return "".join(chr(i) for i in ids)

    seen = {}

    def gen(ids, params):
        seen["ids"], seen["params"] = ids, params
        return [ord(c) for c in "SCORE: 10"]

    server = serve(gen, Chars())
    try:
        res = judge(server, max_tokens=7).score("resp", None, {"prompt": "q"})
        assert res.ok and res.score == 1.0
        assert isinstance(seen["ids"], list) and "resp" in "".join(map(chr, seen["ids"]))
        assert seen["params"]["max_new_tokens"] == 7 and seen["params"]["temperature"] == 0.0
    finally:
        server.close()


@pytest.mark.slow  # importing torch + OLMo-core dominates (~20-40 s on a loaded 2-core box)
def test_against_embedded_engine():
    pytest.importorskip("torch")
    try:
        from runtime.engines.embedded.engine import Engine
        from runtime.engines.embedded.sampling import SamplingParams
        from runtime.engines.embedded.server import build_app
        from runtime.engines.embedded.tiny import build_tiny
    except ImportError as exc:
        pytest.skip(f"embedded engine not available: {exc}")
    loaded = build_tiny("dense", seed=0)
    engine = Engine(loaded, model_path="engine-test:dense", context_length=1024, seed=0)
    engine.start()
    app = build_app(engine, {"model_path": "engine-test:dense"})

    async def generate(ids: list[int], params: dict[str, Any]) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[dict[str, Any]] = loop.create_future()

        def done(result: dict[str, Any]) -> None:
            loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(result))

        engine.submit(engine.make_request(ids, SamplingParams.from_json(params), done))
        return await fut

    add_openai_routes(app, generate, engine.tokenizer)
    server = LoopbackServer(app)
    try:
        v = judge(server, max_tokens=12, retries=0, timeout_s=60)
        first = v.score("a response", None, {"prompt": "q"})
        second = v.score("a response", None, {"prompt": "q"})
        # A random tiny model rarely emits a score: the point is the real path end to end.
        assert first.ok or "unparsable" in (first.failure or "")
        assert first.detail is not None and isinstance(first.detail["judge_output"], str)
        assert first.detail == second.detail  # temperature 0 is greedy: deterministic
        with httpx.Client(trust_env=False) as c:
            body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
            data = c.post(server.url + "/v1/chat/completions", json=body, timeout=60).json()
            assert data["usage"]["completion_tokens"] <= 5
            assert data["usage"]["prompt_tokens"] > 0
    finally:
        server.close()
