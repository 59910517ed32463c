"""The embedded engine starts on zeros while its checkpoint is read, and serves nothing but
the checkpoint: every request, weight update and checksum waits for the copy; a failed
read fails each of them with its cause, and the server process exits with it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("olmo_core")
httpx = pytest.importorskip("httpx")

from runtime.engines.embedded.__main__ import DEFER_WEIGHTS_ENV, defers_weights  # noqa: E402
from runtime.engines.embedded.inprocess import InProcessServer  # noqa: E402
from runtime.engines.embedded.sampling import SamplingParams  # noqa: E402
from runtime.engines.process import free_port  # noqa: E402
from runtime.models import load_model, loader, save_native  # noqa: E402
from runtime.node.failure import cause_from_log  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

GREEDY = {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("native")
    save_native(load_model("builtin:tiny", seed=4), out)
    return out


@pytest.fixture(scope="module")
def reference(checkpoint) -> dict:
    """What an engine that loaded the checkpoint first answers, and its weights."""
    loaded = load_model(str(checkpoint))
    with InProcessServer(loaded, max_running_requests=2, context_length=64) as srv:
        return {
            "generate": _generate(srv.url),
            "checksum": srv.engine.checksum(),
            "state": {k: v.clone() for k, v in loaded.model.state_dict().items()},
        }


@pytest.fixture
def gate(monkeypatch) -> threading.Event:
    """The checkpoint's read waits for this event (the engine meanwhile starts and serves)."""
    opened = threading.Event()
    read = loader.load_safetensors

    def gated(*args, **kwargs):
        assert opened.wait(60), "the test never opened the gate"
        return read(*args, **kwargs)

    monkeypatch.setattr(loader, "load_safetensors", gated)
    return opened


def _generate(url: str) -> dict:
    body = {"input_ids": [[5, 6, 7], [8, 9]], "sampling_params": GREEDY, "return_logprob": True}
    r = httpx.post(url + "/generate", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def _tokens(out: list[dict]) -> list:
    """Each row's tokens and their log-probs (not its timings)."""
    return [(o["output_ids"], o["meta_info"]["output_token_logprobs"]) for o in out]


def _in_thread(fn, *args):
    out: dict = {}
    thread = threading.Thread(target=lambda: out.setdefault("value", fn(*args)), daemon=True)
    thread.start()
    return thread, out


def test_requests_wait_for_the_read_then_match_an_engine_that_loaded_first(
    checkpoint, reference, gate
):
    deferred = load_model(str(checkpoint), defer_weights=True)
    assert deferred.pending is not None
    with InProcessServer(deferred, max_running_requests=2, context_length=64) as srv:
        assert srv.engine.weights_pending
        assert httpx.get(srv.url + "/health", timeout=10).status_code == 200
        thread, out = _in_thread(_generate, srv.url)
        time.sleep(0.5)
        assert thread.is_alive() and srv.engine.weights_pending  # held: the model is zeros
        gate.set()
        thread.join(60)
        assert _tokens(out["value"]) == _tokens(reference["generate"])
        assert not srv.engine.weights_pending
        assert srv.engine.checksum() == reference["checksum"]
        assert srv.engine.startup_phases[-1]["name"].startswith("weights (read ")


def test_a_warm_up_runs_on_zeros_and_copies_the_weights_in_after_it(checkpoint, reference, gate):
    deferred = load_model(str(checkpoint), defer_weights=True)
    with InProcessServer(deferred, max_running_requests=2, context_length=64) as srv:
        thread, out = _in_thread(srv.engine.warm_up, [SamplingParams.from_json(GREEDY)])
        time.sleep(0.3)
        assert thread.is_alive()  # the warm-up's own work is done; it waits for the weights
        gate.set()
        thread.join(60)
        result = out["value"]
        assert result["success"], result
        assert result["weights_read_s"] >= 0.25 and result["weights_wait_s"] >= 0.0
        assert srv.engine.checksum() == reference["checksum"]


def test_an_update_sent_during_the_read_lands_on_top_of_the_checkpoint(checkpoint, reference, gate):
    deferred = load_model(str(checkpoint), defer_weights=True)
    with InProcessServer(deferred, max_running_requests=2, context_length=64) as srv:
        name = "blocks.0.attention.w_q.weight"
        value = torch.full_like(srv.engine.model.state_dict()[name], 0.5)
        thread, out = _in_thread(
            lambda: srv.engine.update_weights_from_tensors([(name, value)], version="1")
        )
        time.sleep(0.3)
        assert thread.is_alive()
        gate.set()
        thread.join(60)
        assert out["value"]["success"], out["value"]
        state = srv.engine.model.state_dict()
        assert torch.equal(state[name], value)  # the update, not the checkpoint's value
        other = "blocks.0.attention.w_k.weight"
        assert torch.equal(state[other], reference["state"][other])
        assert srv.engine.weight_version == "1"


def test_a_failed_read_fails_every_caller_with_its_cause(checkpoint, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("the disk went away")

    monkeypatch.setattr(loader, "load_safetensors", broken)
    deferred = load_model(str(checkpoint), defer_weights=True)
    failures: list[str] = []
    with InProcessServer(
        deferred, max_running_requests=2, context_length=64, on_weights_failed=failures.append
    ) as srv:
        reason = _generate(srv.url)[0]["meta_info"]["finish_reason"]
        assert reason["status_code"] == 500
        assert "model weights failed to load: OSError: the disk went away" in reason["message"]
        r = httpx.get(srv.url + "/get_weight_checksum", timeout=10)
        assert r.status_code == 503 and "the disk went away" in r.json()["error"]["message"]
        result = srv.engine.warm_up([SamplingParams.from_json(GREEDY)])
        assert not result["success"] and "the disk went away" in result["message"]
    assert failures == ["OSError: the disk went away"]


def test_the_server_process_exits_with_the_reads_cause(checkpoint, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in checkpoint.iterdir():
        (broken / f.name).write_bytes(f.read_bytes())
    for f in broken.glob("*.safetensors"):
        f.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{not js")  # a header that is no JSON
    log = tmp_path / "engine.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "runtime.engines.embedded", "--model", str(broken)]
            + ["--port", str(free_port("127.0.0.1")), "--context-length", "64"],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env={**os.environ, DEFER_WEIGHTS_ENV: "1"},  # on a CPU too
        )
        try:
            assert proc.wait(120) == 1
        finally:
            proc.kill()
    cause = cause_from_log(log)
    assert "SafetensorError" in cause or "safetensors" in cause.lower(), cause


def test_the_engine_defers_where_it_has_graphs_to_capture_meanwhile() -> None:
    assert defers_weights("cuda", {}) and not defers_weights("cpu", {})
    assert defers_weights("cpu", {DEFER_WEIGHTS_ENV: "1"})
    assert not defers_weights("cuda", {DEFER_WEIGHTS_ENV: "0"})
