"""Engine-drain publication on two real engine processes behind the real sglang-router:
engines leave the router, drain and load one at a time while the other keeps serving the
old version; no request is lost and no response spans two versions."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("olmo_core")
pytest.importorskip("sglang_router")
httpx = pytest.importorskip("httpx")

from runtime.engines.embedded.launch import start_embedded  # noqa: E402
from runtime.engines.embedded.tiny import build_tiny  # noqa: E402
from runtime.engines.process import free_port  # noqa: E402
from runtime.engines.router import start_router  # noqa: E402
from runtime.publication.drain import EngineDrainPublisher  # noqa: E402
from runtime.publication.tensor import TensorPublisher  # noqa: E402
from runtime.rollout.collect import token_versions  # noqa: E402

BODY = {
    "input_ids": [5, 17, 33, 2, 9],
    "sampling_params": {"max_new_tokens": 16, "temperature": 1.0, "ignore_eos": True},
    "return_logprob": True,
}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    logs: Path = tmp_path_factory.mktemp("drain")
    ports = [free_port("127.0.0.1") for _ in range(2)]
    engines = []
    try:
        for p in ports:
            engines.append(
                start_embedded(
                    "engine-test:dense",
                    port=p,
                    log_path=logs / f"engine-{p}.log",
                    max_running_requests=4,
                    threads=1,
                )
            )
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        with start_router(urls, port=free_port("127.0.0.1"), log_path=logs / "router.log") as r:
            yield urls, r.url
    finally:
        for e in engines:
            e.stop()


def _generated(url: str) -> int:
    return int(httpx.get(f"{url}/get_server_info", timeout=10).json()["num_generated_tokens"])


def test_engines_drain_and_load_one_at_a_time_without_losing_a_request(fleet):
    urls, router = fleet
    new_state = {k: v.clone() for k, v in build_tiny("dense", seed=12).model.state_dict().items()}
    publisher = EngineDrainPublisher(TensorPublisher(urls, 60.0), router, 60.0)
    results: list[dict[str, Any]] = []
    failures: list[str] = []
    stop = threading.Event()

    def client() -> None:
        while not stop.is_set():
            try:
                r = httpx.post(f"{router}/generate", json=BODY, timeout=60)
            except httpx.HTTPError as exc:
                failures.append(repr(exc))
                continue
            if r.status_code != 200:
                failures.append(f"HTTP {r.status_code}: {r.text[:200]}")
            else:
                results.append(r.json())

    windows: list[dict[str, Any]] = []

    def on_drained(url: str) -> None:
        """While ``url`` is out of the router: the other engine keeps generating."""
        other = next(u for u in urls if u != url)
        workers = httpx.get(f"{router}/workers", timeout=10).json()["workers"]
        before = _generated(other)
        time.sleep(0.5)
        windows.append(
            {
                "out": url,
                "routed": sorted(w["url"].rstrip("/") for w in workers),
                "other_progress": _generated(other) - before,
                "out_load": httpx.get(f"{url}/v1/loads", timeout=10).json()["loads"][0],
            }
        )

    publisher.on_drained = on_drained
    threads = [threading.Thread(target=client) for _ in range(2)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while len(results) < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    publisher.publish(new_state, 1)
    n_at_publish = len(results)
    while len(results) < n_at_publish + 4 and time.monotonic() < deadline + 60:
        time.sleep(0.02)
    stop.set()
    for t in threads:
        t.join(timeout=60)

    # one engine at a time: out of the router and idle while the other serves and moves on
    assert [w["out"] for w in windows] == urls
    for w in windows:
        assert w["routed"] == [u for u in urls if u != w["out"]]
        assert w["other_progress"] > 0
        assert w["out_load"]["num_running_reqs"] == w["out_load"]["num_waiting_reqs"] == 0
    # after the first engine loaded, the second still served the old version
    assert publisher.timeline[0][1] == {urls[0]: "1", urls[1]: "0"}
    assert publisher.timeline[1][1] == {urls[0]: "1", urls[1]: "1"}
    workers = httpx.get(f"{router}/workers", timeout=10).json()["workers"]
    assert sorted(w["url"].rstrip("/") for w in workers if w["is_healthy"]) == sorted(urls)

    # nothing lost, every response whole, on exactly one version, the one it reports
    assert not failures, failures[:3]
    assert all(r["meta_info"]["finish_reason"]["type"] == "length" for r in results)
    assert all(len(r["output_ids"]) == 16 for r in results)
    seen = set()
    for r in results:
        spans = r["meta_info"]["weight_versions"]
        assert len(spans) == 1 and spans[0]["end"] == 16, spans
        assert spans[0]["version"] == r["meta_info"]["weight_version"]
        versions = token_versions(r, 16, fallback=-1)
        assert set(versions) == {int(spans[0]["version"])}
        seen.add(spans[0]["version"])
    assert seen == {"0", "1"}
