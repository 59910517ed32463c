"""The verifier interface: registry, failure policy, batch default, failure counts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from runtime.rewards.base import (
    FailureCounter,
    RewardResult,
    ScoreItem,
    UnknownVerifier,
    Verifier,
    VerifierFailure,
    apply_failure_policy,
    available_verifiers,
    get_verifier,
    register,
)


def test_builtin_verifiers_are_registered() -> None:
    names = available_verifiers()
    for name in ("arithmetic", "multiplication", "gsm8k", "math", "ifeval"):
        assert name in names


def test_unknown_verifier_names_the_available_ones() -> None:
    with pytest.raises(UnknownVerifier, match="available: .*gsm8k"):
        get_verifier("gsm8K")


def test_failure_policy_zero_and_fail() -> None:
    ok = RewardResult(1.0)
    bad = RewardResult(0.7, ok=False, failure="timeout")
    assert apply_failure_policy(ok, "fail") is ok
    zeroed = apply_failure_policy(bad, "zero")
    assert zeroed.score == 0.0 and not zeroed.ok and zeroed.failure == "timeout"
    with pytest.raises(VerifierFailure, match="'math' failed: timeout"):
        apply_failure_policy(bad, "fail", "math")
    with pytest.raises(ValueError):
        apply_failure_policy(ok, "ignore")


@register("_test_flaky")
class _Flaky(Verifier):
    def score(self, response: str, target: Any, metadata: Mapping[str, Any]) -> RewardResult:
        if response == "boom":
            raise RuntimeError("bug")
        return RewardResult(float(response == target))


def test_score_batch_default_loops_and_contains_exceptions() -> None:
    v = get_verifier("_test_flaky", {"x": 1})
    assert v.name == "_test_flaky" and v.config == {"x": 1}
    out = v.score_batch([ScoreItem("a", "a", {}), ScoreItem("boom", "a", {}), ScoreItem("b", "a")])
    assert [r.score for r in out] == [1.0, 0.0, 0.0]
    assert [r.ok for r in out] == [True, False, True]
    assert out[1].failure == "RuntimeError: bug"


def test_register_refuses_a_different_class_under_a_taken_name() -> None:
    with pytest.raises(ValueError, match="already registered"):

        @register("gsm8k")
        class Other(Verifier):
            def score(
                self, response: str, target: Any, metadata: Mapping[str, Any]
            ) -> RewardResult:
                return RewardResult(0.0)


def test_failure_counter_metrics() -> None:
    c = FailureCounter()
    c.record("math", RewardResult(1.0))
    c.record("math", RewardResult(0.0, ok=False, failure="x"))
    c.record("gsm8k", RewardResult(0.0))
    assert c.as_metrics() == {
        "rewards/gsm8k/scored": 1,
        "rewards/gsm8k/failures": 0,
        "rewards/math/scored": 2,
        "rewards/math/failures": 1,
    }
