"""Evaluation end to end on CPU: shared (rollout engines), background (local evaluator
subprocesses), the evaluator CLI's input errors, and a judge-rubric reward against a real
loopback judge server."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import eval_helpers as eh
import pytest
import rt_helpers as rt

pytestmark = pytest.mark.slow


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_shared_evaluation_on_the_rollout_engines(tmp_path: Path) -> None:
    manifest = rt.compile_manifest(
        tmp_path,
        (
            *rt.SMALL,
            "training.num_rollouts=3",
            "training.eval_interval=2",
            "inference.num_engines=1",
        ),
    )
    rc, out = rt.run(manifest)
    assert rc == 0, out[-3000:]
    run = tmp_path / "run"
    evals = _records(run / "eval" / "metrics.jsonl")
    # update 0 (skip_eval_before_train=false), every 2 updates, and the final one
    assert [r["update"] for r in evals] == [0, 2, 3]
    assert all(r["eval/arithmetic/prompts"] == 64 for r in evals)  # the spec's eval_count
    assert all(0.0 <= r["eval/score"] <= 1.0 for r in evals)
    train = _records(run / "metrics.jsonl")
    assert [r["collection"] for r in train] == [0, 1, 2]  # the training stream is untouched
    assert "eval/score" not in train[0] and train[1]["eval/update"] == 2
    assert train[2]["eval/update"] == 3
    assert all(r["samples"] == 4 * 8 for r in train)
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["eval_update"] == 3


def test_background_evaluation_runs_local_evaluator_jobs(tmp_path: Path) -> None:
    # update 0 only: its evaluator job runs beside training, as on a cluster
    sections = eh.BACKGROUND.replace("interval = 2", "final = false")
    spec = eh.write_spec(tmp_path, rollouts=2, sections=sections)
    manifest = eh.compile_to(spec, tmp_path)
    data = eh.tiny_data_root(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "runtime.entrypoints.execute", str(manifest), "--no-progress"],
        cwd=rt.ROOT,
        env={**rt.env(), "RLC_DATA_ROOT": str(data), "RLC_EVAL_SUBMIT": "local"},
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "run"
    subs = _records(run / "eval" / "submissions.jsonl")
    assert [s["update"] for s in subs] == [0] and subs[0]["target"] == "local"
    assert (run / "eval-snapshots" / "update-000000" / "rlc_model.json").is_file()
    summary = json.loads((run / "eval" / "update-000000" / "summary.json").read_text())
    task = summary["tasks"]["gsm8k::tulu"]
    assert task["prompts"] == 3 and task["verifier_failures"] == 0
    assert summary["sampling"]["max_response_length"] == 4
    rows = _records(run / "eval" / "update-000000" / "samples.jsonl")
    assert len(rows) == 3 and all(r["response_tokens"] <= 4 for r in rows)
    assert json.loads(proc.stdout.strip().splitlines()[-1])["eval_failed"] == []


def _evaluate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runtime.entrypoints.evaluate", *args],
        cwd=rt.ROOT,
        env=rt.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_evaluator_cli_refuses_bad_input_with_exit_2(tmp_path: Path) -> None:
    bogus = eh.BACKGROUND.replace('"gsm8k::tulu"', '"mmlu_pro"')
    manifest = eh.compile_to(eh.write_spec(tmp_path, sections=bogus), tmp_path)
    res = _evaluate(str(manifest), "--update", "0", "--checkpoint", "builtin:tiny")
    assert res.returncode == 2 and "unknown evaluation task 'mmlu_pro'" in res.stderr
    assert "Traceback" not in res.stderr
    res = _evaluate(str(manifest), "--update", "1", "--checkpoint", str(tmp_path / "none"))
    assert res.returncode == 2 and "--checkpoint" in res.stderr
    res = _evaluate(str(tmp_path / "missing.json"), "--update", "1", "--checkpoint", "builtin:tiny")
    assert res.returncode == 2 and "no such manifest" in res.stderr


_JUDGE_RE = re.compile(r"\[Reference answer\]\n(.*?)\n\n\[Response\]\n(.*?)\n<\|", re.S)


def _rule_judge(prompt: Any, params: dict[str, Any]) -> str:
    """Agrees when the response starts with the reference (what the rubric asks)."""
    m = _JUDGE_RE.search(str(prompt))
    assert m, prompt
    ref, resp = m.group(1).strip(), m.group(2).strip()
    return f"checked\nSCORE: {1 if ref and resp.startswith(ref) else 0}"


def test_judge_rubric_reward_runs_against_a_loopback_judge(tmp_path: Path) -> None:
    from runtime.rewards.judge_server import JudgeServer

    with JudgeServer(_rule_judge, model_name="rule-judge") as judge:
        sections = f"""
[judges.local]
mode = "external"
endpoint = "{judge.url}"
model = "rule-judge"
timeout = 30

[rubrics.answer]
profile = "open-instruct/general-web_instruct_general_verifier"
max_response_tokens = 64
temperature = 0.0

[judging.bindings.arithmetic]
judge = "local"
rubric = "answer"
"""
        manifest = eh.compile_to(eh.write_spec(tmp_path, rollouts=2, sections=sections), tmp_path)
        rc, out = rt.run(manifest)
        assert rc == 0, out[-3000:]
        assert judge.requests == 2 * 2 * 4  # every training sample, judged once
    train = _records(tmp_path / "run" / "metrics.jsonl")
    assert [r["rewards/arithmetic/scored"] for r in train] == [8, 8]
    assert [r["rewards/arithmetic/failures"] for r in train] == [0, 0]
