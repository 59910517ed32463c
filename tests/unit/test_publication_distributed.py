"""Distributed publication in SGLang's protocol: a trainer-side broadcast group (gloo, real
processes) streams bucketed weights to two embedded engine processes, which then generate
exactly what an engine built with those weights generates; the audit and the endpoints'
error answers."""

from __future__ import annotations

import socket

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("olmo_core")
httpx = pytest.importorskip("httpx")

from runtime.engines.embedded.inprocess import InProcessServer  # noqa: E402
from runtime.engines.embedded.launch import start_embedded  # noqa: E402
from runtime.engines.embedded.tiny import build_tiny  # noqa: E402
from runtime.engines.process import free_port  # noqa: E402
from runtime.publication.audit import WeightAuditError  # noqa: E402
from runtime.publication.disk import PublicationError  # noqa: E402
from runtime.publication.distributed import DistributedPublisher  # noqa: E402

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
def engines(tmp_path_factory):
    procs, urls = [], []
    try:
        for i in range(2):
            port = free_port("127.0.0.1")
            log = tmp_path_factory.mktemp(f"engine{i}") / "engine.log"
            procs.append(
                start_embedded(
                    "engine-test:dense", port=port, log_path=log, max_running_requests=2, threads=1
                )
            )
            urls.append(f"http://127.0.0.1:{port}")
        yield urls
    finally:
        for p in procs:
            p.stop()


def test_broadcast_publication_to_two_engine_processes(engines):
    with InProcessServer(build_tiny("dense", seed=12), max_running_requests=2) as srv:
        want = generate(srv.url)["output_ids"]
    assert generate(engines[0])["output_ids"] != want
    pub = DistributedPublisher(
        engines,
        60,
        master_address="127.0.0.1",
        master_port=free_port("127.0.0.1"),
        backend="gloo",
        bucket_bytes=64 * 1024,  # several buckets: non-final ones keep admission paused
    )
    try:
        res = pub.publish(fresh_state(12), 4)
        assert res.buckets > 1 and res.version == 4
        for url in engines:
            out = generate(url)
            assert out["output_ids"] == want
            assert out["meta_info"]["weight_version"] == "4"
        # the group is kept: the next version goes over the same group
        pub.publish(fresh_state(13), 5)
        assert httpx.get(engines[1] + "/get_weight_version").json()["weight_version"] == "5"
        with pytest.raises(WeightAuditError):
            pub.audit(fresh_state(12))
    finally:
        pub.close()


def test_update_without_group_is_refused(engines):
    r = httpx.post(
        engines[0] + "/update_weights_from_distributed",
        json={"names": ["x"], "dtypes": ["float32"], "shapes": [[1]], "group_name": "nope"},
    )
    assert r.status_code == 400 and not r.json()["success"]
    assert "init_weights_update_group" in r.json()["message"]


def test_unreachable_rendezvous_fails_with_the_engine_cause(engines):
    pub = DistributedPublisher(
        engines[:1], 3, master_address="127.0.0.1", master_port=free_port(), backend="nosuch"
    )
    with pytest.raises(PublicationError):
        pub.connect()
    pub.close()


def test_engine_killed_in_the_group_then_survivors_regroup(engines, tmp_path):
    """kill -9 of an engine that is in the weight-update group: the next publication fails
    as a PublicationError (no hang, no raw collective error); once the dead engine is
    dropped (the node's health check does it) the survivor forms a new group and loads."""
    import os
    import signal

    port = free_port("127.0.0.1")
    doomed = start_embedded(
        "engine-test:dense",
        port=port,
        log_path=tmp_path / "doomed.log",
        max_running_requests=2,
        threads=1,
    )
    pub = DistributedPublisher(
        [engines[0], f"http://127.0.0.1:{port}"],
        20,
        master_address="127.0.0.1",
        master_port=free_port("127.0.0.1"),
        backend="gloo",
        bucket_bytes=64 * 1024,
        audit=False,
    )
    try:
        pub.publish(fresh_state(21), 7)
        assert doomed.pid is not None
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.stop(grace=1.0)
        with pytest.raises(PublicationError):
            pub.publish(fresh_state(22), 8)
        pub.urls = [engines[0]]  # what NodeRunner.health_check does with a dead engine
        # the port after the old group's is taken by someone else (another run on the host):
        # the new group rendezvouses on a port that is free, not on the next one up
        taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            taken.bind(("127.0.0.1", pub.master_port + 1))
            taken.listen()
        except OSError:
            pass  # already somebody else's: the same situation
        try:
            pub.publish(fresh_state(22), 8)
        finally:
            taken.close()
        assert httpx.get(engines[0] + "/get_weight_version").json()["weight_version"] == "8"
        pub.audit(fresh_state(22))
    finally:
        pub.close()
        doomed.stop(grace=1.0)


def test_an_engine_refusing_to_join_ends_the_rendezvous_with_its_answer(engines):
    """rank 0's rendezvous would wait its whole timeout for an engine that refused to join
    (here: it still holds another group of that name); the refusal ends it at once, naming
    the engine's reason, and the next publication frees the name on that engine and forms
    the group on a fresh port."""
    import time

    first = DistributedPublisher(
        engines[:1], 60, master_address="127.0.0.1", master_port=free_port(), audit=False
    )
    second = DistributedPublisher(
        engines[:1], 60, master_address="127.0.0.1", master_port=free_port(), audit=False
    )
    try:
        first.publish(fresh_state(31), 3)
        # the engine keeps that group; this process lets go of its side (one trainer
        # process holds one group of a name), as a trainer that went away would
        torch.distributed.destroy_process_group(first.group)
        first.group = None
        t0 = time.monotonic()
        with pytest.raises(PublicationError, match="exists"):
            second.publish(fresh_state(32), 4)
        assert time.monotonic() - t0 < 20
        refused_port = second.master_port
        second.publish(fresh_state(32), 4)
        assert second.master_port != refused_port
        assert httpx.get(engines[0] + "/get_weight_version").json()["weight_version"] == "4"
    finally:
        first.close()
        second.close()
