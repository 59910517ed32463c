"""The ``code`` verifier: code extraction, payloads, scoring modes and executor failures."""

from __future__ import annotations

import asyncio
import threading

import pytest
from aiohttp import web

from runtime.executor.client import LocalExecutor
from runtime.executor.settings import ExecutorSettings
from runtime.rewards.base import ScoreItem, VerifierFailure, get_verifier
from runtime.rewards.code import build_payload, extract_code

PROMPT = 'from typing import List\n\n\ndef inc(xs: List[int]) -> List[int]:\n    """Add one."""\n'
TEST = "def check(c):\n    assert c([1, 2]) == [2, 3]\n    assert c([]) == []\n"
TARGET = {"mode": "function", "test": TEST, "entry_point": "inc"}
META = {"prompt": PROMPT}


def test_extract_raw_completion_is_appended_to_prompt():
    assert extract_code("    return [x + 1 for x in xs]\n", PROMPT, "inc") == (
        PROMPT + "    return [x + 1 for x in xs]\n"
    )


def test_extract_fenced_function_keeps_prompt_context():
    resp = "Sure:\n```python\ndef inc(xs):\n    return [x + 1 for x in xs]\n```\nbye"
    code = extract_code(resp, PROMPT, "inc")
    assert code.startswith(PROMPT.rstrip("\n")) and code.endswith("return [x + 1 for x in xs]\n")
    # The last block that defines the entry point wins over a later usage example.
    resp2 = "```python\ndef inc(xs):\n    return xs\n```\n```py\ndef inc(xs):\n    return 1\n```\n```python\nprint(inc([1]))\n```"
    assert "return 1" in extract_code(resp2, PROMPT, "inc")
    # A fenced body without the def is a completion; an unclosed fence still counts.
    assert extract_code("```python\n    return xs\n", PROMPT, "inc") == PROMPT + "    return xs\n"
    # No prompt: the block alone.
    assert extract_code("```\nprint(1)\n```", None, None) == "print(1)\n"


def test_extract_prompt_that_is_not_python_is_not_prepended():
    resp = "```python\ndef inc(xs):\n    return xs\n```"
    assert extract_code(resp, "Write a function inc.", "inc") == "def inc(xs):\n    return xs\n"


def test_build_payload_shapes():
    p = build_payload("    return xs\n", TARGET, META, {"wall_s": 3})
    assert p["mode"] == "function" and p["entry_point"] == "inc" and p["limits"] == {"wall_s": 3}
    stdio = build_payload("print(1)", [{"input": "", "output": "1"}], {}, None)
    assert stdio["mode"] == "stdio" and stdio["code"] == "print(1)"
    for bad in ({"mode": "function", "test": TEST}, {"mode": "stdio", "tests": []}, {"mode": "x"}):
        with pytest.raises(ValueError):
            build_payload("x", bad, {}, None)


@pytest.fixture(scope="module")
def executor():
    with LocalExecutor(ExecutorSettings(workers=2)) as ex:
        yield ex


def test_scores_through_real_executor(executor):
    v = get_verifier("code", {"executor_url": executor.url})
    good = v.score("    return [x + 1 for x in xs]\n", TARGET, META)
    assert good.ok and good.score == 1.0 and good.detail["statuses"] == ["ok"]
    bad = v.score("    return xs\n", TARGET, META)
    assert bad.ok and bad.score == 0.0 and bad.detail["status"] == "failed"
    err = v.score("    return nope\n", TARGET, META)
    assert err.ok and err.score == 0.0 and err.detail["status"] == "error"
    malformed = v.score("x", {"mode": "function"}, {})
    assert not malformed.ok and "bad target" in malformed.failure
    v.close()


def test_stdio_fraction_and_all_or_nothing(executor):
    tests = [
        {"input": "2\n", "output": "4\n"},
        {"input": "3\n", "output": "6\n"},
        {"input": "5\n", "output": "11\n"},
        {"input": "0\n", "output": "1\n"},
    ]
    resp = "```python\nn = int(input())\nprint(n * 2)\n```"
    frac = get_verifier("code", {"executor_url": executor.url, "scoring": "fraction"})
    res = frac.score(resp, {"mode": "stdio", "tests": tests}, {})
    assert res.ok and res.score == 0.5 and res.detail["passed"] == 2
    strict = get_verifier("code", {"executor_url": executor.url})
    assert strict.score(resp, {"mode": "stdio", "tests": tests}, {}).score == 0.0
    assert strict.score(resp, {"mode": "stdio", "tests": tests[:2]}, {}).score == 1.0
    with pytest.raises(ValueError):
        get_verifier("code", {"scoring": "most"})


def test_limits_are_forwarded(executor):
    v = get_verifier("code", {"executor_url": executor.url, "time_limit_s": 1})
    res = v.score("import time\ntime.sleep(30)\n", {"mode": "stdio", "tests": [{"output": ""}]}, {})
    assert res.ok and res.score == 0.0 and res.detail["statuses"] == ["timeout"]


def test_batch_keeps_order(executor):
    v = get_verifier("code", {"executor_url": executor.url, "concurrency": 4})
    answers = ["    return [x + 1 for x in xs]\n", "    return xs\n"] * 4
    out = v.score_batch([ScoreItem(a, TARGET, META) for a in answers])
    assert [r.score for r in out] == [1.0, 0.0] * 4


def test_starts_a_local_executor_when_no_url():
    v = get_verifier("code", {"workers": 1})
    try:
        assert v.score("    return [x + 1 for x in xs]\n", TARGET, META).score == 1.0
        assert v.url.startswith("http://127.0.0.1:")
    finally:
        v.close()


def test_unreachable_executor_is_a_failure_and_policy_applies():
    cfg = {"executor_url": "http://127.0.0.1:9", "retries": 1, "backoff_s": 0.01}
    res = get_verifier("code", cfg).score("    return xs\n", TARGET, META)
    assert not res.ok and res.score == 0.0 and "unreachable" in res.failure
    strict = get_verifier("code", {**cfg, "failure_policy": "fail"})
    with pytest.raises(VerifierFailure):
        strict.score_batch([ScoreItem("    return xs\n", TARGET, META)])


def test_executor_5xx_is_retried():
    calls = {"n": 0}

    async def run(request: web.Request) -> web.Response:
        calls["n"] += 1
        if calls["n"] < 3:
            return web.Response(status=503, text="busy")
        return web.json_response(
            {"results": [{"passed": True, "status": "ok"}], "status": "ok", "passed": 1, "total": 1}
        )

    app = web.Application()
    app.router.add_post("/run", run)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app, access_log=None)
    ready = threading.Event()
    port = {}

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", 0).start())
        port["p"] = runner.addresses[0][1]
        ready.set()
        loop.run_forever()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    assert ready.wait(30)
    try:
        url = f"http://127.0.0.1:{port['p']}"
        v = get_verifier("code", {"executor_url": url, "retries": 2, "backoff_s": 0.01})
        assert v.score("    return xs\n", TARGET, META).score == 1.0
        assert calls["n"] == 3
        calls["n"] = 0
        v0 = get_verifier("code", {"executor_url": url, "retries": 1, "backoff_s": 0.01})
        res = v0.score("    return xs\n", TARGET, META)
        assert not res.ok and "HTTP 503" in res.failure
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        t.join(30)


# -- the [rewards.code] spec fields, as the manifest carries them ----------------------------

STDIO_OK = {"mode": "stdio", "tests": [{"input": "", "output": "done"}]}


def _spec(**fields):
    """A compiled ``[rewards.code]`` section (the spec's defaults, then ``fields``)."""
    base = {
        "endpoint": None,
        "time_limit_s": 10.0,
        "memory_limit_mb": 1024,
        "max_processes": 16,
        "network": False,
        "allow_unsandboxed": False,
        "concurrency": 8,
    }
    return {**base, **fields}


def test_spec_endpoint_selects_the_executor(executor):
    import httpx

    before = httpx.get(executor.url + "/health", trust_env=False).json()["runs"]
    v = get_verifier("code", _spec(endpoint=executor.url))
    assert v.score("print('done')\n", STDIO_OK, {}).score == 1.0
    assert not v._executor.started_locally
    after = httpx.get(executor.url + "/health", trust_env=False).json()["runs"]
    assert after == before + 1


def test_spec_time_limit(executor):
    code = "import time\ntime.sleep(3)\nprint('done')\n"
    short = get_verifier("code", _spec(endpoint=executor.url, time_limit_s=1.0))
    res = short.score(code, STDIO_OK, {})
    assert res.ok and res.score == 0.0 and res.detail["statuses"] == ["timeout"]
    assert get_verifier("code", _spec(endpoint=executor.url)).score(code, STDIO_OK, {}).score == 1.0


def test_spec_memory_limit(executor):
    code = "x = bytearray(300 * 1024 * 1024)\nprint('done')\n"
    small = get_verifier("code", _spec(endpoint=executor.url, memory_limit_mb=128))
    res = small.score(code, STDIO_OK, {})
    assert res.score == 0.0 and res.detail["statuses"] == ["memory"]
    assert get_verifier("code", _spec(endpoint=executor.url)).score(code, STDIO_OK, {}).score == 1.0


def test_spec_max_processes(executor):
    code = (
        "import subprocess, sys\n"
        "ps = [subprocess.Popen([sys.executable, '-S', '-c', 'import time; time.sleep(3)'])"
        " for _ in range(8)]\nprint('done')\n"
    )
    few = get_verifier("code", _spec(endpoint=executor.url, max_processes=4))
    assert few.score(code, STDIO_OK, {}).score == 0.0
    assert get_verifier("code", _spec(endpoint=executor.url)).score(code, STDIO_OK, {}).score == 1.0


def test_spec_network_starts_an_executor_that_allows_it():
    code = "import socket\nsocket.socket().bind(('127.0.0.1', 0))\nprint('done')\n"
    with_net = get_verifier("code", _spec(network=True))
    without = get_verifier("code", _spec())
    try:
        assert with_net.score(code, STDIO_OK, {}).score == 1.0
        assert without.score(code, STDIO_OK, {}).score == 0.0
    finally:
        with_net.close()
        without.close()


def test_function_payload_carries_the_prompt_for_the_judge():
    payload = build_payload("    return [x + 1 for x in xs]\n", TARGET, META, None)
    assert payload["context"] == PROMPT
    assert "network" not in payload
    assert build_payload("x", STDIO_OK, {}, None, network=True)["network"] is True


def test_request_timeout_covers_every_test_at_its_limit():
    v = get_verifier("code", _spec(endpoint="http://127.0.0.1:9", time_limit_s=100.0))
    tests = [{"input": "", "output": ""}] * 4
    payload = build_payload("print()", {"mode": "stdio", "tests": tests}, {}, v.limits)
    assert v._request_timeout(payload) >= 4 * 100.0
    assert get_verifier("code", _spec())._request_timeout({"tests": "t"}) == 120.0
