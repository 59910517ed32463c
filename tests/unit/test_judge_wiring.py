"""[judges] + [rubrics] + [judging.bindings] reach the verifiers, and score over HTTP."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.config import ConfigError, from_manifest
from runtime.data.records import Prompt
from runtime.rewards.base import ScoreItem
from runtime.rewards.judge import JudgeVerifier
from runtime.rewards.judge_binding import RunVerifiers, attach_prompt_text
from runtime.rewards.judge_server import JudgeServer


def _manifest(endpoint: str, mode: str = "external", **extra: Any) -> dict[str, Any]:
    judge: dict[str, Any] = {"mode": mode, "model": "m", "timeout": 7, "max_concurrent_calls": 3}
    if mode == "external":
        judge["endpoint"] = endpoint
    return {
        "config": {
            "data": {"tasks": [{"task": "arithmetic"}]},
            "judges": {"rm": judge},
            "rubrics": {
                "q": {
                    "profile": "open-instruct/general-quality",
                    "temperature": 0.0,
                    "max_response_tokens": 32,
                }
            },
            "judging": {"bindings": {"arithmetic": {"judge": "rm", "rubric": "q"}}},
            "rewards": {"failure_policy": "zero"},
        },
        **extra,
    }


def test_bindings_are_joined_with_judges_and_rubrics() -> None:
    cfg = from_manifest(_manifest("http://judge.example:8000/v1"))
    b = cfg.judge_bindings["arithmetic"]
    assert (b.url, b.model, b.profile, b.timeout_s, b.concurrency, b.max_tokens) == (
        "http://judge.example:8000/v1",
        "m",
        "open-instruct/general-quality",
        7.0,
        3,
        32,
    )


def test_managed_judge_is_reached_at_its_placed_port() -> None:
    plan = {"placement": {"judges": [{"name": "rm", "node": 0, "gpus": [7], "port": 31000}]}}
    cfg = from_manifest(_manifest("", mode="managed", plan=plan))
    assert cfg.judge_bindings["arithmetic"].url == "http://127.0.0.1:31000"
    with pytest.raises(ConfigError, match="did not place it"):
        from_manifest(_manifest("", mode="managed"))


def test_a_bound_verifier_scores_through_the_judge_server() -> None:
    prompts: list[Any] = []

    def rule(prompt: Any, params: dict[str, Any]) -> str:
        prompts.append(prompt)
        return (
            "fine\nSCORE: 8" if "4" in str(prompt).split("[Assistant response]")[-1] else "SCORE: 1"
        )

    with JudgeServer(rule) as srv:
        cfg = from_manifest(_manifest(srv.url))
        verifiers = RunVerifiers(cfg.rewards, cfg.judge_bindings, cfg.failure_policy)
        v = verifiers("arithmetic")
        assert isinstance(v, JudgeVerifier)
        p = Prompt("a", "arithmetic", [{"role": "user", "content": "2+2="}], "4", "arithmetic")
        attach_prompt_text([p], cfg.judge_bindings)
        out = v.score_batch(
            [ScoreItem("4", p.target, p.metadata), ScoreItem("5", p.target, p.metadata)]
        )
        verifiers.close()
    assert [round(r.score, 3) for r in out] == [round(7 / 9, 3), 0.0]
    assert all(r.ok for r in out) and srv.requests == 2
    assert "2+2=" in str(prompts[0])  # the judge saw the prompt


def test_unbound_verifiers_come_from_the_registry() -> None:
    verifiers = RunVerifiers({}, {}, "zero")
    assert type(verifiers("arithmetic")).__name__ != "JudgeVerifier"
    verifiers.close()
