"""The distillation teacher's log-probs of the student's tokens, fetched from a real embedded
engine process on loopback (SGLang's scoring request: ``max_new_tokens = 0`` with
``logprob_start_len``), and the teacher's compiled command line as the runtime runs it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("olmo_core")
httpx = pytest.importorskip("httpx")

from compiled_run import run_config  # noqa: E402

from runtime.engines.client import ClientSettings  # noqa: E402
from runtime.engines.embedded.launch import start_embedded  # noqa: E402
from runtime.engines.process import free_port  # noqa: E402
from runtime.node.health import healthy  # noqa: E402
from runtime.node.teacher import (  # noqa: E402
    TeacherError,
    TeacherScorer,
    response_logprobs,
    scoring_payload,
    teacher_command,
)
from runtime.rollout.types import Sample  # noqa: E402

CONTEXT = 32


@pytest.fixture(scope="module")
def teacher_url(tmp_path_factory):
    port = free_port("127.0.0.1")
    log = tmp_path_factory.mktemp("teacher") / "teacher.log"
    proc = start_embedded(
        "engine-test:dense",
        port=port,
        log_path=log,
        max_running_requests=4,
        context_length=CONTEXT + 1,
        threads=1,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.stop()


def _reference(url: str, prompt: list[int], response: list[int]) -> list[float]:
    """The same log-probs through a request that also generates one token."""
    body = {
        "input_ids": prompt + response,
        "sampling_params": {"max_new_tokens": 1, "temperature": 1.0},
        "return_logprob": True,
        "logprob_start_len": len(prompt),
    }
    r = httpx.post(url + "/generate", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return [float(x[0]) for x in r.json()["meta_info"]["input_token_logprobs"]]


def test_scoring_returns_the_teachers_logprobs_of_the_response(teacher_url: str) -> None:
    prompt, response = [3, 5, 7, 2], [9, 4, 4, 11, 1]
    r = httpx.post(teacher_url + "/generate", json=scoring_payload(prompt, response), timeout=60)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["output_ids"] == []  # scored, nothing generated
    got = response_logprobs(body, response)
    assert got == pytest.approx(_reference(teacher_url, prompt, response), abs=1e-5)
    assert all(x < 0 for x in got)


def test_a_full_context_sample_is_scored_whole(teacher_url: str) -> None:
    # the teacher's context is one more than the rollout's (compiled that way)
    prompt, response = [3] * 20, [5] * (CONTEXT - 20)
    lps = response_logprobs(
        httpx.post(
            teacher_url + "/generate", json=scoring_payload(prompt, response), timeout=60
        ).json(),
        response,
    )
    assert len(lps) == len(response)


def test_scorer_fills_samples_and_measures_the_kl(teacher_url: str) -> None:
    samples = [
        Sample("p0", 0, [3, 5], [9, 4, 1], logprobs=[-1.0, -2.0, -0.5]),
        Sample("p0", 1, [3, 5], [], logprobs=[]),  # an empty response scores nothing
        Sample("p1", 0, [8], [2, 6], logprobs=[-3.0, -0.1]),
    ]
    scorer = TeacherScorer(teacher_url, ClientSettings(), concurrency=2)
    try:
        metrics = scorer.score(samples)
    finally:
        scorer.close()
    assert [len(s.teacher_logprobs or []) for s in samples] == [3, 0, 2]
    pairs = [
        (a, b) for s in samples for a, b in zip(s.logprobs, s.teacher_logprobs or [], strict=True)
    ]
    assert metrics["opd/scored_tokens"] == 5
    assert metrics["opd/kl"] == pytest.approx(sum(a - b for a, b in pairs) / 5)
    assert metrics["opd/teacher_logprob"] == pytest.approx(sum(b for _, b in pairs) / 5)


def test_an_answer_for_other_tokens_is_refused() -> None:
    answer = {"meta_info": {"input_token_logprobs": [[-0.5, 7, None], [-0.2, 8, None]]}}
    assert response_logprobs(answer, [7, 8]) == [-0.5, -0.2]
    with pytest.raises(TeacherError, match="scored token 8 where the sample has 9"):
        response_logprobs(answer, [7, 9])
    with pytest.raises(TeacherError, match="2 log-probs for 3 tokens"):
        response_logprobs(answer, [1, 7, 8])
    with pytest.raises(TeacherError, match="no meta_info"):
        response_logprobs({"text": ""}, [1])


def test_the_compiled_command_runs_here_on_the_port_given(tmp_path) -> None:
    """The teacher's argv as the compiler writes it for an opd run, with only the
    interpreter, host and port replaced by the node, and the replaced argv starts a
    server that scores on that port."""
    cfg = run_config(
        tmp_path,
        training={"algorithm": "opd", "filter_zero_std_groups": False},
        teacher={"source": "builtin:tiny", "max_running_requests": 4},
    )
    teacher = cfg.teacher
    assert teacher is not None and teacher.device == "cpu"
    compiled = [str(a) for a in teacher.argv]
    port = free_port("127.0.0.1")
    argv = teacher_command(teacher, port, host="127.0.0.1")
    assert argv[0] == sys.executable and argv[1:3] == compiled[1:3]
    assert argv[argv.index("--port") + 1] == str(port) and argv.count("--port") == 1
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and argv.count("--host") == 1

    def without_address(args: list[str]) -> list[str]:
        out, skip = [], False
        for a in args:
            if skip:
                skip = False
            elif a in ("--host", "--port"):
                skip = True
            else:
                out.append(a)
        return out

    assert without_address(argv[3:]) == without_address(compiled[3:])  # nothing else changed
    assert argv[argv.index("--model-path") + 1] == "builtin:tiny"

    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    log = (tmp_path / "teacher.log").open("w")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while not healthy(url, 1.0):
            assert proc.poll() is None, (tmp_path / "teacher.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "the teacher did not come up"
            time.sleep(0.2)
        sample = Sample("p", 0, [3, 5], [9, 4], logprobs=[-1.0, -2.0])
        scorer = TeacherScorer(url, ClientSettings(), concurrency=1)
        try:
            metrics = scorer.score([sample])
        finally:
            scorer.close()
        assert metrics["opd/scored_tokens"] == 2 and len(sample.teacher_logprobs or []) == 2
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
