"""The real sglang-router in front of two embedded engine processes."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

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
    cfg = RouterSettings.from_config({"router_policy": "random", "router_cache_threshold": 0.1})
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
