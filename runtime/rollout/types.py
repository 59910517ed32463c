"""The records that flow from generation through scoring to the trainer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Sample:
    """One generated response for one prompt, with what the trainer needs from rollout.

    ``logprobs`` are the ENGINE's per-token log-probabilities of ``response_ids`` (the
    behaviour policy); ``policy_version`` is the weight version that produced them (with
    refresh publication: the oldest of ``token_versions``, the version each token was
    sampled under).
    """

    prompt_id: str
    index: int
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    text: str = ""
    finish_reason: str = "stop"
    policy_version: int = 0
    reward: float = 0.0
    reward_ok: bool = True
    reward_failure: str | None = None
    advantage: float = 0.0
    old_logprobs: list[float] | None = None  # trainer's, pinned when steps_per_collection > 1
    routed_experts: Any = None
    trained: bool = True  # False: no gradient (rewards.exclude_truncated)
    token_versions: list[int] | None = None  # refresh publication: per response token
    # multi-turn rollouts: 1 = the policy's token, 0 = tool output (no loss); None: all 1
    loss_mask: list[int] | None = None
    turns: int = 1
    tool_calls: int = 0
    tool_errors: int = 0
    teacher_logprobs: list[float] | None = None  # on-policy distillation: per response token

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)


@dataclass
class Group:
    """All samples of one prompt: the unit of GRPO's relative advantage and of retry."""

    prompt: Any
    samples: list[Sample] = field(default_factory=list)
    policy_version: int = 0

    @property
    def prompt_id(self) -> str:
        return str(getattr(self.prompt, "id", ""))

    @property
    def rewards(self) -> list[float]:
        return [s.reward for s in self.samples]
