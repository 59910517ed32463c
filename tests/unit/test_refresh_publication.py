"""Refresh publication on a real engine process over loopback: weights change while a
generation is in flight, the response continues under the new weights, the early tokens keep
their historical behaviour logprobs, the rebuilt KV matches a fresh prefill, and the rollout
side ages the sample by its oldest token and hands the historical logprobs to TIS."""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("olmo_core")
httpx = pytest.importorskip("httpx")

from runtime.engines.embedded.engine import Engine, version_spans  # noqa: E402
from runtime.engines.embedded.inprocess import InProcessServer  # noqa: E402
from runtime.engines.embedded.launch import start_embedded  # noqa: E402
from runtime.engines.embedded.sampling import SamplingParams  # noqa: E402
from runtime.engines.embedded.tiny import build_tiny  # noqa: E402
from runtime.engines.process import free_port  # noqa: E402
from runtime.publication.refresh import RefreshPublisher  # noqa: E402
from runtime.publication.tensor import TensorPublisher  # noqa: E402
from runtime.rollout.buffer import GroupBuffer  # noqa: E402
from runtime.rollout.collect import token_versions  # noqa: E402
from runtime.rollout.types import Group, Sample  # noqa: E402

PROMPT = [5, 17, 33, 2, 9]
LONG = 400  # tokens; long enough that a publication lands mid-generation


def _gen_body(prompt: list[int], max_new: int, **extra: Any) -> dict[str, Any]:
    params = {"max_new_tokens": max_new, "temperature": 1.0, "ignore_eos": True, "sampling_seed": 3}
    return {"input_ids": prompt, "sampling_params": params, "return_logprob": True, **extra}


def _input_logprobs(url: str, prompt: list[int], output: list[int]) -> list[float]:
    """A fresh prefill's logprobs of ``output`` after ``prompt`` (temperature 1)."""
    body = _gen_body(prompt + output, 1, logprob_start_len=len(prompt))
    r = httpx.post(url + "/generate", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return [float(x[0]) for x in r.json()["meta_info"]["input_token_logprobs"]]


@pytest.fixture(scope="module")
def engine_url(tmp_path_factory):
    port = free_port("127.0.0.1")
    log = tmp_path_factory.mktemp("engine") / "engine.log"
    proc = start_embedded(
        "engine-test:dense", port=port, log_path=log, max_running_requests=4, threads=1
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def refreshed(engine_url):
    """One long generation with a refresh publication (v0 -> v1) landing in its middle."""
    new_state = {k: v.clone() for k, v in build_tiny("dense", seed=12).model.state_dict().items()}
    publisher = RefreshPublisher(TensorPublisher([engine_url], 60.0), 60.0)
    out: dict[str, Any] = {}

    def generate() -> None:
        r = httpx.post(engine_url + "/generate", json=_gen_body(PROMPT, LONG), timeout=120)
        out["response"] = r.json()

    def generated() -> int:
        info = httpx.get(engine_url + "/get_server_info", timeout=10).json()
        return int(info["num_generated_tokens"])

    start = generated()
    worker = threading.Thread(target=generate)
    worker.start()
    deadline = time.monotonic() + 60
    while generated() - start < 20 and time.monotonic() < deadline:
        time.sleep(0.005)
    publisher.publish(new_state, 1)
    worker.join(timeout=120)
    info = httpx.get(engine_url + "/get_server_info", timeout=10).json()
    return out["response"], info


def test_a_generation_in_flight_continues_across_the_publication(refreshed):
    response, info = refreshed
    meta = response["meta_info"]
    assert meta["finish_reason"]["type"] == "length"
    assert len(response["output_ids"]) == LONG  # nothing lost or restarted
    spans = meta["weight_versions"]
    assert [s["version"] for s in spans] == ["0", "1"], spans
    k = spans[0]["end"]
    assert 0 < k < LONG and spans[1] == {"version": "1", "start": k, "end": LONG}
    assert info["num_retracted"] >= 1 and info["weight_version"] == "1"


def test_early_tokens_keep_historical_logprobs_and_the_rebuilt_kv_is_a_fresh_prefill(
    engine_url, refreshed
):
    response, _ = refreshed
    out = response["output_ids"]
    recorded = [float(x[0]) for x in response["meta_info"]["output_token_logprobs"]]
    k = response["meta_info"]["weight_versions"][0]["end"]
    new = _input_logprobs(engine_url, PROMPT, out)  # the engine now serves v1
    with InProcessServer(build_tiny("dense", seed=0), max_running_requests=2) as old_srv:
        old = _input_logprobs(old_srv.url, PROMPT, out)
    # tokens sampled before the publication: the v0 policy's logprobs, as sampled
    assert recorded[:k] == pytest.approx(old[:k], abs=1e-4)
    assert max(abs(a - b) for a, b in zip(recorded[:k], new[:k], strict=True)) > 1e-2
    # from the first token after it: what a fresh prefill under v1 gives, token for token
    assert recorded[k:] == pytest.approx(new[k:], abs=1e-4)


def test_the_sample_is_aged_by_its_oldest_token_and_tis_uses_the_recorded_logprobs(
    engine_url, refreshed
):
    from runtime.rollout.driver import TrainerAdapter
    from runtime.trainer.grpo import GRPOConfig, grpo_loss

    response, _ = refreshed
    out = response["output_ids"]
    k = response["meta_info"]["weight_versions"][0]["end"]
    versions = token_versions(response, len(out), fallback=1)
    assert versions == [0] * k + [1] * (len(out) - k)
    recorded = [float(x[0]) for x in response["meta_info"]["output_token_logprobs"]]
    sample = Sample("p", 0, PROMPT, out, recorded, policy_version=min(versions))
    sample.token_versions = versions
    group = Group(prompt=None, samples=[sample], policy_version=sample.policy_version)
    # lag counts from the oldest token: one publication later the group is one version old
    buf = GroupBuffer(capacity=2, max_policy_lag=0, handler="drop")
    assert buf.is_stale(group, 1) and not buf.is_stale(group, 0)
    # the trainer's behaviour probabilities are the recorded (historical) ones
    (train_sample,) = TrainerAdapter._convert([sample])
    assert train_sample.rollout_logprobs == recorded
    trainer_lp = torch.tensor([_input_logprobs(engine_url, PROMPT, out)])
    rollout = torch.tensor([train_sample.rollout_logprobs])
    cfg = GRPOConfig(off_policy_correction="tis", tis_clip=2.0)

    def tis_sum(mask: torch.Tensor) -> float:
        _, sums = grpo_loss(
            trainer_lp.clone().requires_grad_(True),
            advantages=torch.ones_like(trainer_lp),
            mask=mask,
            old_logp=None,
            rollout_logp=rollout,
            ref_logp=None,
            entropy=None,
            cfg=cfg,
            token_divisor=1.0,
        )
        return float(sums["tis_weight"])

    want = [
        min(math.exp(t - r), 2.0) for t, r in zip(trainer_lp[0].tolist(), recorded, strict=True)
    ]
    assert tis_sum(torch.ones_like(trainer_lp)) == pytest.approx(sum(want), rel=1e-5)
    # the v1 tail was sampled by the policy the trainer holds: weight 1 per token
    tail = torch.zeros_like(trainer_lp)
    tail[0, k:] = 1.0
    assert tis_sum(tail) == pytest.approx(len(out) - k, rel=1e-3)
    # the v0 head is corrected by its historical probabilities, token by token
    head = []
    for i in range(min(k, 16)):
        one = torch.zeros_like(trainer_lp)
        one[0, i] = 1.0
        head.append(tis_sum(one))
    assert head == pytest.approx(want[: len(head)], rel=1e-5)
    assert max(abs(w - 1.0) for w in head) > 1e-2


def test_in_process_retract_keeps_tokens_and_seeded_stream():
    """Scheduler level: a retract and continue with the SAME weights changes nothing."""
    loaded = build_tiny("dense", seed=5)
    params = SamplingParams.from_json(
        {"max_new_tokens": 60, "temperature": 1.0, "ignore_eos": True, "sampling_seed": 9}
    )

    def run(pause: bool) -> dict[str, Any]:
        eng = Engine(loaded, model_path="t", max_running_requests=2, context_length=128)
        eng.start()
        done = threading.Event()
        box: dict[str, Any] = {}

        def cb(res: dict[str, Any]) -> None:
            box["r"] = res
            done.set()

        eng.submit(eng.make_request(PROMPT, params, cb, return_logprob=True))
        if pause:
            while not eng.stats["num_generated_tokens"]:
                time.sleep(0.001)
            assert eng.pause_generation("retract")
            assert eng.load() == {"num_running_reqs": 0, "num_waiting_reqs": 1}
            assert eng.continue_generation()
        assert done.wait(60)
        eng.stop()
        return box["r"]

    plain, paused = run(False), run(True)
    assert paused["output_ids"] == plain["output_ids"]
    a = [x[0] for x in plain["meta_info"]["output_token_logprobs"]]
    b = [x[0] for x in paused["meta_info"]["output_token_logprobs"]]
    assert b == pytest.approx(a, abs=1e-4)


def test_version_spans_match_sglang_shape():
    assert version_spans([], "4") == [{"version": "4", "start": 0, "end": 0}]
    assert version_spans(["1", "1", "2"], "2") == [
        {"version": "1", "start": 0, "end": 2},
        {"version": "2", "start": 2, "end": 3},
    ]
    resp = {"meta_info": {"weight_versions": [{"version": "default", "start": 0, "end": 2}]}}
    assert token_versions(resp, 3, fallback=7) == [7, 7, 7]
