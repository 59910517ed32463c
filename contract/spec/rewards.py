"""[rewards]: verifier settings."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contract.spec._base import Section, fld


class MathReward(Section):
    equivalence: Literal["sympy", "string"] = fld("sympy", description="answer comparison")
    timeout_s: float = fld(5.0, description="time limit per comparison", gt=0.0)


class CodeReward(Section):
    endpoint: str | None = fld(
        None,
        description="code executor URL (null: the executor shipped with the runtime, local)",
        pattern=r"^https?://[^/@\s]+(/.*)?$",
    )
    # Upper bounds are the executor's own ceilings (runtime/executor/sandbox.py MAX_LIMITS).
    time_limit_s: float = fld(
        10.0, description="wall-clock and CPU limit per test run", gt=0.0, le=120.0
    )
    memory_limit_mb: int = fld(1024, description="memory limit per test run", ge=16, le=8192)
    max_processes: int = fld(16, description="process limit per test run", ge=1, le=256)
    network: bool = fld(False, description="allow network access in the sandbox")
    allow_unsandboxed: bool = fld(
        False,
        description="let the local executor run programs with rlimits only on a host where no "
        "sandbox layer (namespaces, user namespaces) works; without it such a host refuses",
    )
    concurrency: int = fld(8, description="test runs in parallel", ge=1)


class IfevalReward(Section):
    strict: bool = fld(True, description="strict instruction checking (no loose variants)")
    aggregate: Literal["fraction", "all"] = fld(
        "fraction",
        description="reward: fraction of the prompt's instructions followed, or 1 only if all are",
    )


class LengthPenalty(Section):
    enabled: bool = fld(False, description="penalize responses over the target length")
    target_tokens: int = fld(1024, description="length without penalty", ge=1)
    coef: float = fld(0.001, description="penalty per token over the target", ge=0.0)


class RewardsSection(Section):
    failure_policy: Literal["zero", "fail"] = fld(
        "zero", description="a verifier error scores 0 (zero) or stops the run (fail)"
    )
    exclude_truncated: bool = fld(False, description="give truncated responses no gradient")
    math: MathReward = Field(default={}, validate_default=True, description="math / gsm8k verifier")
    code: CodeReward = Field(
        default={}, validate_default=True, description="code execution verifier"
    )
    ifeval: IfevalReward = Field(
        default={}, validate_default=True, description="instruction-following verifier"
    )
    length_penalty: LengthPenalty = Field(
        default={}, validate_default=True, description="length shaping"
    )
