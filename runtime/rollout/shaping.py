"""Reward shaping applied after scoring and before advantages: ``[rewards]`` length terms.

A length penalty subtracts ``coef`` per response token over ``target_tokens`` from the
verifier's score (so GRPO's group-relative advantage sees it), and ``exclude_truncated``
gives responses cut off by the length limit (``finish_reason == "length"``) no gradient:
their tokens are masked out of the loss, while their rewards still count in the group's
baseline (they were sampled from the same policy).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from runtime.rollout.types import Group


@dataclass(frozen=True)
class Shaping:
    length_penalty: bool = False
    target_tokens: int = 1024
    coef: float = 0.001
    exclude_truncated: bool = False

    @classmethod
    def from_config(cls, rewards: Mapping[str, Any]) -> Shaping:
        """From the manifest's ``config.rewards`` table."""
        lp = rewards.get("length_penalty") or {}
        return cls(
            length_penalty=bool(lp.get("enabled", False)),
            target_tokens=int(lp.get("target_tokens", 1024)),
            coef=float(lp.get("coef", 0.001)),
            exclude_truncated=bool(rewards.get("exclude_truncated", False)),
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
