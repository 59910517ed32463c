"""``async.submission_granularity``: whole-group requests vs one request per sample.

Real embedded engine processes on loopback, the real sglang-router in front of two of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("sglang_router")
pytest.importorskip("olmo_core")

from compiled_run import run_config  # noqa: E402
from engine_procs import serve_engines  # noqa: E402

from runtime.engines.process import free_port  # noqa: E402
from runtime.engines.router import RouterSettings, start_router  # noqa: E402
from runtime.rewards.base import RewardResult, Verifier  # noqa: E402
from runtime.rollout.collect import Collector, CollectSettings, sample_seed  # noqa: E402
from runtime.rollout.driver import _make_generator, rollout_concurrency  # noqa: E402


def _cfg(tmp_path: Path, granularity: str, **inference: Any) -> Any:
    return run_config(
        tmp_path / granularity,
        training={"num_rollouts": 1},
        inference={"prompts_per_collection": 2, "samples_per_prompt": 4, **inference},
        runtime={"group_retries": 1, "retry_backoff_s": 0.01, "http_retries": 0},
        **{"async": {"submission_granularity": granularity}},
    )


@pytest.fixture(scope="module")
def two_engines(tmp_path_factory: pytest.TempPathFactory) -> Any:
    yield from serve_engines(tmp_path_factory.mktemp("engines"), 2, max_running_requests=8)


def _served(url: str) -> int:
    return int(httpx.get(f"{url}/get_server_info", timeout=5).json()["num_requests_total"])


class _Distinct(Verifier):
    """A reward that varies with the text (a random tiny model never solves a task)."""

    def score(self, response: str, target: Any, metadata: Any) -> RewardResult:
        return RewardResult(len(set(response)) / 10.0)


class _Prompt:
    def __init__(self, pid: str, target: str) -> None:
        self.id, self.target, self.verifier, self.metadata = pid, target, "arithmetic", {}


def _collect(cfg: Any, url: str) -> list[Any]:
    settings = CollectSettings(
        samples_per_prompt=4,
        sampling_params={"max_new_tokens": 6, "temperature": 1.0},
        run_seed=7,
        concurrency=2,
    )
    verifier = _Distinct()
    collector = Collector(
        _make_generator(cfg, url),
        lambda p: [3 + int(p.id[-1]), 4, 5],
        lambda _name: verifier,
        settings,
    )
    prompts = [_Prompt("p0", "1"), _Prompt("p1", "2")]
    groups = collector.generate_groups(prompts, version=0)
    from runtime.rollout.collect import CollectStats

    collector.score(groups, CollectStats())
    return groups


def test_sample_requests_reproduce_the_group_request(two_engines: list[str], tmp_path: Path):
    """Same seeds, one engine: per-sample requests give the group's tokens and rewards."""
    url = two_engines[0]
    before = _served(url)
    by_group = _collect(_cfg(tmp_path, "group"), url)
    middle = _served(url)
    by_sample = _collect(_cfg(tmp_path, "sample"), url)
    after = _served(url)
    for a, b in zip(by_group, by_sample, strict=True):
        assert [s.response_ids for s in a.samples] == [s.response_ids for s in b.samples]
        for x, y in zip(a.samples, b.samples, strict=True):  # batched vs single forward
            assert x.logprobs == pytest.approx(y.logprobs, abs=1e-5)
        assert [s.reward for s in a.samples] == [s.reward for s in b.samples]
    assert len({s.reward for g in by_group for s in g.samples}) > 1  # rewards that can differ
    # the samples differ from each other (distinct seeds), and each is one engine request
    assert len({tuple(s.response_ids) for s in by_group[0].samples}) > 1
    assert middle - before == 8 and after - middle == 8  # n=4 expands to 4 engine requests
    assert sample_seed(7, "p0", 0) != sample_seed(7, "p1", 0)


def test_router_spreads_one_groups_samples_over_both_engines(
    two_engines: list[str], tmp_path: Path
):
    router = start_router(
        two_engines,
        port=free_port(),
        log_path=tmp_path / "router.log",
        settings=RouterSettings(policy="round_robin"),
        timeout=60,
    )
    try:
        seeds = [11, 12, 13, 14]
        sampling = {"max_new_tokens": 4, "temperature": 1.0}
        for granularity, expect_both in (("group", False), ("sample", True)):
            before = [_served(u) for u in two_engines]
            out = _make_generator(_cfg(tmp_path, granularity), router.url)(
                [5, 6, 7], sampling, seeds
            )
            served = [_served(u) - b for u, b in zip(two_engines, before, strict=True)]
            assert len(out) == 4 and sum(served) == 4, served
            assert (min(served) > 0) is expect_both, (granularity, served)
    finally:
        router.stop()


def test_a_failed_sample_is_retried_alone(tmp_path: Path) -> None:
    """Per-sample retry under runtime.group_retries: only the failed sample is re-sent."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[int] = []
    failed: set[int] = set()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seed = int(body["sampling_params"]["sampling_seed"])
            assert body["sampling_params"]["n"] == 1
            seen.append(seed)
            if seed == 2 and seed not in failed:
                failed.add(seed)
                self.send_response(503)
                self.end_headers()
                return
            out = {
                "output_ids": [seed],
                "text": str(seed),
                "meta_info": {
                    "output_token_logprobs": [[-0.5, seed, None]],
                    "finish_reason": {"type": "stop"},
                },
            }
            data = json.dumps(out).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        out = _make_generator(_cfg(tmp_path, "sample"), url)([1, 2], {}, [1, 2, 3])
    finally:
        server.shutdown()
    assert [o["output_ids"] for o in out] == [[1], [2], [3]]
    assert sorted(seen) == [1, 2, 2, 3]  # the failed sample alone went out again


def test_sample_requests_take_one_slot_each(tmp_path: Path) -> None:
    inf = {"prompts_per_collection": 64, "max_running_requests": 64, "server_concurrency": 64}
    assert rollout_concurrency(_cfg(tmp_path, "group", **inf)) == 64
    assert rollout_concurrency(_cfg(tmp_path, "sample", **inf)) == 16  # 64 slots / 4 samples
