"""HTTP API of the embedded engine (SGLang native shapes), served in-process."""

from __future__ import annotations

import base64
import threading
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("olmo_core")
httpx = pytest.importorskip("httpx")

from runtime.engines.embedded.inprocess import InProcessServer  # noqa: E402
from runtime.engines.embedded.tiny import build_tiny  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def server():
    with InProcessServer(
        build_tiny("dense", seed=11), max_running_requests=4, context_length=256, seed=5
    ) as srv:
        yield srv


@pytest.fixture(scope="module")
def moe_server():
    with InProcessServer(
        build_tiny("moe", seed=2), max_running_requests=2, context_length=64
    ) as srv:
        yield srv


def post(srv, path, body, timeout=30.0):
    return httpx.post(srv.url + path, json=body, timeout=timeout)


def test_generate_single_shape(server):
    r = post(
        server,
        "/generate",
        {
            "input_ids": [1, 2, 3],
            "sampling_params": {"max_new_tokens": 5, "temperature": 0, "ignore_eos": True},
            "return_logprob": True,
            "rid": "r1",
        },
    )
    assert r.status_code == 200
    out = r.json()
    assert set(out) == {"text", "output_ids", "meta_info"}
    meta = out["meta_info"]
    assert meta["id"] == "r1"
    assert meta["finish_reason"] == {"type": "length", "length": 5}
    assert meta["prompt_tokens"] == 3 and meta["completion_tokens"] == 5
    lps = meta["output_token_logprobs"]
    assert [t for _, t, _ in lps] == out["output_ids"]
    assert all(lp <= 0 and txt is None for lp, _, txt in lps)
    assert "weight_version" in meta


def test_generate_batch_text_and_n(server):
    r = post(
        server,
        "/generate",
        {
            "input_ids": [[1, 2], [3, 4, 5]],
            "sampling_params": [{"max_new_tokens": 2}, {"max_new_tokens": 3}],
        },
    )
    assert r.status_code == 200
    out = r.json()
    assert isinstance(out, list) and len(out) == 2
    assert [o["meta_info"]["prompt_tokens"] for o in out] == [2, 3]
    t = post(server, "/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 1}})
    assert t.json()["meta_info"]["prompt_tokens"] == 2
    n = post(
        server,
        "/generate",
        {"input_ids": [7, 7], "sampling_params": {"max_new_tokens": 4, "n": 3, "sampling_seed": 1}},
    )
    assert len(n.json()) == 3


def test_input_logprobs(server):
    r = post(
        server,
        "/generate",
        {
            "input_ids": [4, 5, 6, 7],
            "sampling_params": {"max_new_tokens": 1, "temperature": 0},
            "return_logprob": True,
            "logprob_start_len": 0,
        },
    ).json()
    ilp = r["meta_info"]["input_token_logprobs"]
    assert [t for _, t, _ in ilp] == [4, 5, 6, 7]
    assert ilp[0][0] is None and all(x[0] <= 0 for x in ilp[1:])


@pytest.mark.parametrize(
    "body",
    [
        {"sampling_params": {}},
        {"input_ids": [1], "text": "a"},
        {"input_ids": [1], "stream": True},
        {"input_ids": [1], "sampling_params": {"top_p": 2}},
        {"input_ids": [100000]},
        {"input_ids": [[1], [2]], "sampling_params": [{}]},
        {"input_ids": list(range(1, 128)) * 3},
    ],
)
def test_generate_bad_requests_are_400(server, body):
    assert post(server, "/generate", body).status_code == 400


def test_health_endpoints_and_info(server):
    assert httpx.get(server.url + "/health").status_code == 200
    assert httpx.get(server.url + "/health_generate", timeout=30).status_code == 200
    assert httpx.post(server.url + "/health_generate", timeout=30).status_code == 200
    assert httpx.post(server.url + "/flush_cache").status_code == 200
    info = httpx.get(server.url + "/get_model_info").json()
    assert info["is_generation"] is True and "weight_version" in info and "model_path" in info
    srv_info = httpx.get(server.url + "/get_server_info").json()
    assert srv_info["num_requests_total"] >= 1
    assert srv_info["kv_cache_storage_dtype"] == "float32"  # the tiny model's own dtype
    assert httpx.get(server.url + "/get_weight_checksum").json()["checksum"].startswith("sha256:")
    r = post(server, "/update_weights_from_tensor", {"serialized_named_tensors": []})
    assert r.status_code == 400 and "serialized_named_tensors" in r.json()["message"]


def test_abort_request_returns_abort_reason(server):
    result: dict = {}

    def run():
        result["r"] = post(
            server,
            "/generate",
            {
                "input_ids": [1, 2],
                "sampling_params": {"max_new_tokens": 250, "temperature": 0, "ignore_eos": True},
                "rid": "to-abort",
            },
        ).json()

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 10
    while httpx.get(server.url + "/get_server_info").json()["num_running_reqs"] == 0:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    # flushing is refused while a request runs (SGLang semantics)
    assert httpx.post(server.url + "/flush_cache").status_code == 400
    assert post(server, "/abort_request", {"rid": "to-abort"}).status_code == 200
    t.join(30)
    fr = result["r"]["meta_info"]["finish_reason"]
    assert fr["type"] == "abort"
    assert post(server, "/abort_request", {}).status_code == 400


def test_update_weights_from_disk(tmp_path, server):
    from safetensors.torch import save_file

    other = build_tiny("dense", seed=12)
    save_file(
        {k: v.contiguous() for k, v in other.model.state_dict().items()},
        str(tmp_path / "w.safetensors"),
    )
    body = {
        "input_ids": [9, 9],
        "sampling_params": {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True},
    }
    before = post(server, "/generate", body).json()
    r = post(
        server, "/update_weights_from_disk", {"model_path": str(tmp_path), "weight_version": "7"}
    )
    assert r.status_code == 200 and r.json()["success"] is True
    assert "num_paused_requests" in r.json()
    after = post(server, "/generate", body).json()
    assert after["meta_info"]["weight_version"] == "7"
    assert httpx.get(server.url + "/get_model_info").json()["weight_version"] == "7"
    assert after["output_ids"] != before["output_ids"]
    bad = post(server, "/update_weights_from_disk", {"model_path": str(tmp_path / "missing")})
    assert bad.status_code == 400 and bad.json()["success"] is False
    assert post(server, "/update_weights_from_disk", {}).status_code == 400
    # wrong parameter names are rejected, weights untouched
    save_file({"bogus": torch.zeros(2)}, str(tmp_path / "bogus.safetensors"))
    (tmp_path / "w.safetensors").unlink()
    assert (
        post(server, "/update_weights_from_disk", {"model_path": str(tmp_path)}).status_code == 400
    )
    assert post(server, "/generate", body).json()["output_ids"] == after["output_ids"]


def test_routed_experts_moe_and_dense(server, moe_server):
    body = {
        "input_ids": [1, 2, 3],
        "sampling_params": {"max_new_tokens": 3, "temperature": 0, "ignore_eos": True},
        "return_routed_experts": True,
    }
    moe = post(moe_server, "/generate", body).json()
    raw = base64.b64decode(moe["meta_info"]["routed_experts"])
    assert len(raw) == 4 * (3 + 3 - 1) * 2 * 2  # int32 x (tokens-1, layers, top_k)
    dense = post(server, "/generate", body).json()
    assert dense["meta_info"]["routed_experts"] == ""


def test_http2_probe_is_not_logged_as_an_error(server, caplog):
    """sglang-router sends an HTTP/2 preface first; it must not spam the log with tracebacks."""
    import logging
    import socket
    from urllib.parse import urlparse

    u = urlparse(server.url)
    with caplog.at_level(logging.INFO, logger="aiohttp.server"):
        with socket.create_connection((u.hostname, u.port), timeout=5) as s:
            s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            s.recv(1024)
        time.sleep(0.2)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert httpx.get(server.url + "/health", timeout=5).status_code == 200


def test_warm_up_names_the_sampling_mode_and_generation_goes_on(server):
    """On CPU there is nothing to capture; the mode comes from the engine's own sampler."""
    from runtime.engines.warmup import WarmUpError, warm_up_engines

    answers = warm_up_engines(
        [server.url],
        [{"temperature": 1.0}, {"temperature": 0.0}, {"temperature": 1.0, "top_p": 0.9}],
        timeout_s=30.0,
        max_kv_len=128,
    )
    got = answers[server.url]
    assert got["success"] and got["graphs"] == 0
    assert "frozen_objects" not in got  # an in-process server leaves its host's heap alone
    assert got["modes"] == ["truncate"]  # the widest sampler serves the other rows too
    greedy = warm_up_engines([server.url], [{"temperature": 0.0}], timeout_s=30.0)
    assert greedy[server.url]["modes"] == ["greedy"]
    r = post(server, "/warm_up", {"sampling_params": {"temperature": 1.0}})
    assert r.status_code == 400
    with pytest.raises(WarmUpError, match="temperature must be >= 0"):
        warm_up_engines([server.url], [{"temperature": -1.0}], timeout_s=30.0)
    r = post(
        server,
        "/generate",
        {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 3, "temperature": 0.0}},
    )
    assert r.status_code == 200 and len(r.json()["output_ids"]) == 3
