"""[judges] + [rubrics] + [judging.bindings] reach the verifiers, and score over HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from compiled_run import compile_manifest, run_config, with_managed_judge

from contract.run import parse
from contract.spec.rewards import RewardsSection
from runtime.config import ConfigError, RunConfig
from runtime.data.records import Prompt
from runtime.rewards.base import ScoreItem
from runtime.rewards.judge import JudgeVerifier
from runtime.rewards.judge_binding import RunVerifiers, attach_prompt_text
from runtime.rewards.judge_server import JudgeServer

JUDGING: dict[str, Any] = {
    "rubrics": {
        "q": {
            "profile": "open-instruct/general-quality",
            "temperature": 0.0,
            "max_response_tokens": 32,
        }
    },
    "judging": {"bindings": {"arithmetic": {"judge": "rm", "rubric": "q"}}},
}


def _cfg(tmp_path: Path, endpoint: str) -> RunConfig:
    """A compiled run whose ``arithmetic`` prompts an external judge scores."""
    judge = {"mode": "external", "model": "m", "timeout": 7, "max_concurrent_calls": 3}
    return run_config(tmp_path, judges={"rm": {**judge, "endpoint": endpoint}}, **JUDGING)


def test_bindings_are_joined_with_judges_and_rubrics(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, "http://judge.example:8000/v1")
    b = cfg.judge_bindings["arithmetic"]
    assert (b.url, b.model, b.profile, b.timeout_s, b.concurrency, b.max_tokens) == (
        "http://judge.example:8000/v1",
        "m",
        "open-instruct/general-quality",
        7.0,
        3,
        32,
    )


def test_managed_judge_is_reached_at_its_placed_port(tmp_path: Path) -> None:
    m = with_managed_judge(compile_manifest(tmp_path), "rm", 31000, verifier="arithmetic")
    cfg = RunConfig.from_contract(parse(m))
    assert cfg.judge_bindings["arithmetic"].url == "http://127.0.0.1:31000"
    m["plan"]["placement"]["judges"] = []
    with pytest.raises(ConfigError, match="did not place it"):
        RunConfig.from_contract(parse(m))


def test_a_bound_verifier_scores_through_the_judge_server(tmp_path: Path) -> None:
    prompts: list[Any] = []

    def rule(prompt: Any, params: dict[str, Any]) -> str:
        prompts.append(prompt)
        return (
            "fine\nSCORE: 8" if "4" in str(prompt).split("[Assistant response]")[-1] else "SCORE: 1"
        )

    with JudgeServer(rule) as srv:
        cfg = _cfg(tmp_path, srv.url)
        verifiers = RunVerifiers(cfg.rewards, cfg.judge_bindings, cfg.rewards.failure_policy)
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
    verifiers = RunVerifiers(RewardsSection(), {}, "zero")
    assert type(verifiers("arithmetic")).__name__ != "JudgeVerifier"
    verifiers.close()
