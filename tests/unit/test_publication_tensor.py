"""Tensor publication: in-process copies, shared-memory handles to a second engine process,
the device checksum audit, and `/update_weights_from_tensor` input validation."""

from __future__ import annotations

import base64
import os
import pickle
import threading
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("olmo_core")
httpx = pytest.importorskip("httpx")

from runtime.engines.embedded.inprocess import InProcessServer  # noqa: E402
from runtime.engines.embedded.launch import start_embedded  # noqa: E402
from runtime.engines.embedded.tiny import build_tiny  # noqa: E402
from runtime.engines.process import free_port  # noqa: E402
from runtime.publication.audit import WeightAuditError  # noqa: E402
from runtime.publication.checksum import device_checksum  # noqa: E402
from runtime.publication.ipc import serialize_named_tensors  # noqa: E402
from runtime.publication.tensor import (  # noqa: E402
    ColocatedPublisher,
    TensorPublisher,
    buckets,
)

GREEDY = {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}
PROMPT = [5, 17, 33, 2, 9]


def generate(url: str) -> dict:
    r = httpx.post(
        url + "/generate", json={"input_ids": PROMPT, "sampling_params": GREEDY}, timeout=60
    )
    assert r.status_code == 200, r.text
    return r.json()


def fresh_state(seed: int) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in build_tiny("dense", seed=seed).model.state_dict().items()}


@pytest.fixture(scope="module")
def reference():
    """Outputs of an engine built directly with the seed-12 weights (the 'new policy')."""
    with InProcessServer(build_tiny("dense", seed=12), max_running_requests=2) as srv:
        yield generate(srv.url)


@pytest.fixture(scope="module")
def server():
    with InProcessServer(build_tiny("dense", seed=11), max_running_requests=2) as srv:
        yield srv


@pytest.fixture(scope="module")
def engine_process(tmp_path_factory):
    port = free_port("127.0.0.1")
    log = tmp_path_factory.mktemp("engine") / "engine.log"
    proc = start_embedded(
        "engine-test:dense", port=port, log_path=log, max_running_requests=2, threads=1
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.stop()


def test_colocated_publication_switches_outputs_and_version(server, reference):
    before = generate(server.url)
    assert before["output_ids"] != reference["output_ids"]
    res = ColocatedPublisher([server.engine]).publish(fresh_state(12), 3)
    assert res.version == 3
    after = generate(server.url)
    assert after["output_ids"] == reference["output_ids"]
    assert after["meta_info"]["weight_version"] == "3"
    info = httpx.get(server.url + "/get_model_info").json()
    assert info["weight_version"] == "3"


def test_colocated_audit_detects_a_wrong_tensor(server):
    state = fresh_state(12)
    pub = ColocatedPublisher([server.engine])
    pub.publish(state, 4)
    name = sorted(state)[0]
    state[name].view(-1)[0] += 0.5
    with pytest.raises(WeightAuditError, match="differ"):
        pub.audit(state)


def test_cross_process_publication_over_shared_memory(engine_process, reference):
    url = engine_process
    before = generate(url)
    assert before["output_ids"] != reference["output_ids"]
    state = fresh_state(12)
    # small buckets: several chunks, the engine holds admission until the last
    pub = TensorPublisher([url], 60.0, bucket_bytes=64 * 1024)
    res = pub.publish(state, 7)
    assert res.buckets > 1
    after = generate(url)
    assert after["output_ids"] == reference["output_ids"]
    assert after["meta_info"]["weight_version"] == "7"
    # the engine copied: changing the trainer's tensors now does not reach it
    for t in state.values():
        t.add_(1.0)
    assert generate(url)["output_ids"] == reference["output_ids"]
    with pytest.raises(WeightAuditError, match="differ from the trainer"):
        pub.audit(state)
    pub.audit(fresh_state(12))


def test_sha256_startup_checksum_matches_after_publication(engine_process):
    from runtime.models.weights import state_checksum

    state = fresh_state(13)
    TensorPublisher([engine_process], 60.0).publish(state, 8)
    got = httpx.get(engine_process + "/get_weight_checksum").json()["checksum"]
    assert got == state_checksum(state)


def test_non_final_chunk_holds_admission(server):
    state = fresh_state(12)
    groups = list(buckets(state, 64 * 1024))
    assert len(groups) > 1
    first = {
        "serialized_named_tensors": [serialize_named_tensors(groups[0])],
        "flush_cache": False,
    }
    r = httpx.post(server.url + "/update_weights_from_tensor", json=first, timeout=30)
    assert r.status_code == 200 and r.json()["success"], r.text
    out: dict = {}
    worker = threading.Thread(target=lambda: out.update(generate(server.url)))
    worker.start()
    deadline = time.monotonic() + 10
    while server.engine.load()["num_waiting_reqs"] != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    assert server.engine.load()["num_waiting_reqs"] == 1 and not out
    rest = [t for g in groups[1:] for t in g]
    last = {
        "serialized_named_tensors": [serialize_named_tensors(rest)],
        "weight_version": "9",
    }
    r = httpx.post(server.url + "/update_weights_from_tensor", json=last, timeout=30)
    assert r.status_code == 200 and r.json()["success"], r.text
    worker.join(30)
    assert out["meta_info"]["weight_version"] == "9"


class _Evil:
    def __reduce__(self):
        return (os.system, ("true",))


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("not json", "must be JSON"),
        ([1, 2], "JSON object"),
        ({}, "serialized_named_tensors must be a non-empty list"),
        ({"serialized_named_tensors": ["a", "b"]}, "one rank"),
        ({"serialized_named_tensors": [3]}, "base64 strings"),
        ({"serialized_named_tensors": ["@@@"]}, "not valid base64"),
        (
            {"serialized_named_tensors": [base64.b64encode(pickle.dumps(_Evil())).decode()]},
            "posix.system, which is not allowed",
        ),
        (
            {"serialized_named_tensors": [base64.b64encode(pickle.dumps([1, 2])).decode()]},
            "(name, tensor) pairs",
        ),
        (
            {"serialized_named_tensors": ["eA=="], "load_format": "flattened_bucket"},
            "load_format 'flattened_bucket' is not supported",
        ),
        ({"serialized_named_tensors": ["eA=="], "flush_cache": "yes"}, "flush_cache must be"),
    ],
)
def test_bad_bodies_get_400_with_a_message(server, body, needle):
    if isinstance(body, str):
        r = httpx.post(
            server.url + "/update_weights_from_tensor",
            content=body,
            headers={"content-type": "application/json"},
        )
    else:
        r = httpx.post(server.url + "/update_weights_from_tensor", json=body, timeout=30)
    assert r.status_code == 400
    assert needle in r.json()["message"]


def test_unknown_names_and_wrong_shapes_are_refused_whole(server):
    version = server.engine.weight_version
    before = server.engine.checksum("wsum64")
    for named, needle in (
        ([("no.such.weight", torch.zeros(2))], "unknown parameter names"),
        ([("embeddings.weight", torch.zeros(3, 3))], "shape mismatch"),
    ):
        body = {"serialized_named_tensors": [serialize_named_tensors(named)]}
        r = httpx.post(server.url + "/update_weights_from_tensor", json=body, timeout=30)
        assert r.status_code == 400 and needle in r.json()["message"], r.text
    assert server.engine.checksum("wsum64") == before
    assert server.engine.weight_version == version


def test_device_checksum_detects_changes_and_matches_casts():
    g = torch.Generator().manual_seed(0)
    state = {"a": torch.randn(300, 7, generator=g), "b": torch.randn(5, generator=g)}
    base = device_checksum(state)
    assert base.startswith("wsum64:") and device_checksum(dict(state)) == base
    bumped = {k: v.clone() for k, v in state.items()}
    bumped["a"].view(-1)[123] = torch.nextafter(bumped["a"].view(-1)[123], torch.tensor(9.0))
    assert device_checksum(bumped) != base
    swapped = {k: v.clone() for k, v in state.items()}
    swapped["a"][[0, 1]] = swapped["a"][[1, 0]]
    assert device_checksum(swapped) != base
    renamed = {"c": state["a"], "b": state["b"]}
    assert device_checksum(renamed) != base
    bf16 = {k: v.to(torch.bfloat16) for k, v in state.items()}
    assert device_checksum(state, dtype=torch.bfloat16) == device_checksum(bf16)
    assert device_checksum(state, dtype=torch.bfloat16) != base
