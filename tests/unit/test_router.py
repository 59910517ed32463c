"""The real sglang-router in front of two embedded engine processes."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("sglang_router")
pytest.importorskip("olmo_core")

from engine_procs import serve_engines  # noqa: E402

from runtime.engines.client import ClientSettings, EngineClient  # noqa: E402
from runtime.engines.process import free_port  # noqa: E402
from runtime.engines.router import RouterSettings, router_argv, start_router  # noqa: E402


def test_router_argv_carries_policy_and_thresholds():
    s = RouterSettings(
        policy="cache_aware",
        cache_threshold=0.5,
        balance_abs_threshold=10,
        balance_rel_threshold=1.2,
    )
    argv = router_argv(["http://a:1", "http://b:2"], port=29000, settings=s, python="py")
    assert argv[:3] == ["py", "-m", "sglang_router.launch_router"]
    joined = " ".join(argv)
    assert "--worker-urls http://a:1 http://b:2" in joined
    assert "--policy cache_aware" in joined and "--cache-threshold 0.5" in joined
    assert "--balance-abs-threshold 10" in joined and "--balance-rel-threshold 1.2" in joined
    rr = router_argv(["http://a:1"], port=1, settings=RouterSettings(policy="round_robin"))
    assert "--cache-threshold" not in rr
    with pytest.raises(ValueError):
        RouterSettings(policy="fastest")
    from contract.spec.inference import InferenceSection

    inference = InferenceSection(router_policy="random", router_cache_threshold=0.1)
    cfg = RouterSettings.from_contract(inference)
    assert (cfg.policy, cfg.cache_threshold) == ("random", 0.1)


@pytest.fixture(scope="module")
def two_engines(tmp_path_factory):
    yield from serve_engines(tmp_path_factory.mktemp("engines"), 2, max_running_requests=4)


def _requests_served(url):
    return httpx.get(f"{url}/get_server_info", timeout=5).json()["num_requests_total"]


@pytest.mark.slow
def test_round_robin_router_reaches_both_engines(two_engines, tmp_path):
    before = [_requests_served(u) for u in two_engines]
    router = start_router(
        two_engines,
        port=free_port(),
        log_path=tmp_path / "router.log",
        settings=RouterSettings(policy="round_robin"),
        timeout=60,
    )
    try:
        assert router.alive()
        assert {w["url"] for w in router.workers()} == set(two_engines)
        with EngineClient(router.url, ClientSettings(http_retries=1, retry_backoff_s=0.01)) as c:
            with ThreadPoolExecutor(4) as pool:
                samples = list(
                    pool.map(
                        lambda i: c.generate(
                            [1 + i, 2, 3], {"max_new_tokens": 2, "temperature": 0}
                        ),
                        range(8),
                    )
                )
            assert all(len(s.output_ids) == 2 and s.logprobs for s in samples)
            group = c.generate_group([5, 6], 2, {"max_new_tokens": 2})
            assert len(group) == 2
    finally:
        code = router.stop()
    assert not router.alive() and code is not None
    served = [_requests_served(u) - b for u, b in zip(two_engines, before, strict=True)]
    assert sum(served) >= 9 and min(served) >= 3, served


@pytest.mark.slow
def test_cache_aware_router_routes_and_stops(two_engines, tmp_path):
    """Default (compiled) policy: requests go through; the pinned router drops
    return_routed_experts, which is why MoE replay talks to engines directly."""
    router = start_router(
        two_engines, port=free_port(), log_path=tmp_path / "router.log", timeout=60
    )
    try:
        body = {
            "input_ids": [1, 2, 3],
            "sampling_params": {"max_new_tokens": 2, "temperature": 0},
            "return_routed_experts": True,
        }
        out = httpx.post(f"{router.url}/generate", json=body, timeout=30).json()
        assert out["meta_info"]["completion_tokens"] == 2
        direct = httpx.post(f"{two_engines[0]}/generate", json=body, timeout=30).json()
        assert "routed_experts" in direct["meta_info"]
        assert "routed_experts" not in out["meta_info"]
        # sampling_seed and n pass through: a seeded group is reproducible via the router
        seeded = {
            "input_ids": [4, 5],
            "sampling_params": {
                "max_new_tokens": 5,
                "temperature": 1.0,
                "sampling_seed": 3,
                "n": 2,
            },
        }
        via = httpx.post(f"{router.url}/generate", json=seeded, timeout=30).json()
        ref = httpx.post(f"{two_engines[1]}/generate", json=seeded, timeout=30).json()
        assert [o["output_ids"] for o in via] == [o["output_ids"] for o in ref]
    finally:
        router.stop()


@pytest.fixture(scope="module")
def builtin_engine(tmp_path_factory):
    """One engine serving a builtin model (its tokenizer exists only in memory)."""
    from runtime.engines.embedded.launch import embedded_argv
    from runtime.engines.process import ServerProcess

    port = free_port()
    argv = embedded_argv(
        "builtin:tiny-digits", port=port, max_running_requests=4, context_length=64, seed=0
    )
    log = tmp_path_factory.mktemp("builtin-engine") / "engine.log"
    proc = ServerProcess("engine", argv, f"http://127.0.0.1:{port}/health", log).start()
    try:
        proc.wait_healthy(timeout=120)
        yield [f"http://127.0.0.1:{port}"]
    finally:
        proc.stop(grace=5)


@pytest.mark.slow
def test_router_loads_the_engines_tokenizer_from_disk_never_the_hub(builtin_engine, tmp_path):
    """sglang-router registers a tokenizer for every worker from the path the worker's
    /get_model_info names, and downloads it from the Hugging Face Hub when that is not a
    local directory. Every outbound connection here goes to a recording proxy: none comes."""
    import socket
    import threading
    import time

    from runtime.engines.process import ServerProcess

    proxy = socket.socket()
    proxy.bind(("127.0.0.1", 0))
    proxy.listen(8)
    proxy.settimeout(0.2)
    attempts: list[bytes] = []
    done = threading.Event()

    def record() -> None:
        while not done.is_set():
            try:
                conn, _ = proxy.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    attempts.append(conn.recv(4096))
                except OSError:
                    attempts.append(b"")

    threading.Thread(target=record, daemon=True).start()
    info = httpx.get(f"{builtin_engine[0]}/get_model_info", timeout=5).json()
    assert (Path(info["model_path"]) / "tokenizer.json").is_file()
    assert info["served_model_name"] == "builtin:tiny-digits"

    port = free_port()
    log = tmp_path / "router.log"
    argv = router_argv(builtin_engine, port=port, log_level="debug")
    url = f"http://127.0.0.1:{proxy.getsockname()[1]}"
    env = {k: url for k in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy")}
    env.update(NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    router = ServerProcess("router", argv, f"http://127.0.0.1:{port}/health", log, env=env)
    router.start()
    try:
        router.wait_healthy(60)
        deadline = time.monotonic() + 120
        text = ""
        while time.monotonic() < deadline:  # until both registrations have an outcome
            text = log.read_text(errors="replace")
            outcomes = text.count("Successfully registered tokenizer") + text.count(
                "Failed to load tokenizer"
            )
            if outcomes >= len(builtin_engine):
                break
            time.sleep(0.25)
        assert "Failed to load tokenizer" not in text, text[-2000:]
        assert "HuggingFace" not in text
        assert text.count("Successfully registered tokenizer") >= len(builtin_engine)
    finally:
        router.stop(grace=2)
        done.set()
        proxy.close()
    assert attempts == []
