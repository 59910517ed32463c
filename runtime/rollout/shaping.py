"""Reward shaping applied after scoring and before advantages: ``[rewards]`` length terms.

A length penalty subtracts ``coef`` per response token over ``target_tokens`` from the
verifier's score (so GRPO's group-relative advantage sees it), and ``exclude_truncated``
gives responses cut off by the length limit (``finish_reason == "length"``) no gradient:
their tokens are masked out of the loss, while their rewards still count in the group's
baseline (they were sampled from the same policy).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from contract.defaults import default_of
from contract.spec.rewards import LengthPenalty, RewardsSection
from runtime.rollout.types import Group


@dataclass(frozen=True)
class Shaping:
    """``[rewards]`` shaping terms (defaults are the spec's, `contract.defaults`)."""

    length_penalty: bool = default_of(LengthPenalty, "enabled")
    target_tokens: int = default_of(LengthPenalty, "target_tokens")
    coef: float = default_of(LengthPenalty, "coef")
    exclude_truncated: bool = default_of(RewardsSection, "exclude_truncated")

    @classmethod
    def from_contract(cls, rewards: RewardsSection) -> Shaping:
        """From the manifest's ``config.rewards`` section."""
        lp = rewards.length_penalty
        return cls(
            length_penalty=lp.enabled,
            target_tokens=lp.target_tokens,
            coef=lp.coef,
            exclude_truncated=rewards.exclude_truncated,
        )

    def penalty(self, response_tokens: int) -> float:
        if not self.length_penalty:
            return 0.0
        return self.coef * max(0, response_tokens - self.target_tokens)

    def apply(self, groups: Iterable[Group]) -> None:
        """Shape rewards and mark excluded samples, in place."""
        for g in groups:
            for s in g.samples:
                s.reward = float(s.reward) - self.penalty(len(s.response_ids))
                if self.exclude_truncated and s.finish_reason == "length":
                    s.trained = False
