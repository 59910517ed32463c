"""Reward verifiers: a registry of named scorers (see `runtime.rewards.base`)."""

from runtime.rewards.base import (
    FAILURE_POLICIES,
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
    verifier_class,
)

__all__ = [
    "FAILURE_POLICIES",
    "FailureCounter",
    "RewardResult",
    "ScoreItem",
    "UnknownVerifier",
    "Verifier",
    "VerifierFailure",
    "apply_failure_policy",
    "available_verifiers",
    "get_verifier",
    "register",
    "verifier_class",
]
