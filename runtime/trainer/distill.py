"""On-policy distillation loss: train the student toward a teacher on the student's samples.

Per response token ``i`` with student log-prob ``s_i`` and teacher log-prob ``t_i`` of the
sampled token, ``s_i - t_i`` is a one-sample estimate of the reverse KL
``KL(student || teacher)`` at that position. Two losses:

* ``reverse_kl``: ``-(s_i - t_i)`` (taken at the PPO "old" policy, no gradient) is added to
  the token's advantage, times ``coef``, beside ``reward_weight`` times the GRPO group
  advantage; the policy-gradient loss (ratio, asymmetric clip, TIS) is GRPO's. Its
  expected gradient is that of the per-token reverse KL: on-policy distillation as a
  per-token reward of ``-(log p_student - log p_teacher)``.
* ``reverse_kl_k3``: the k3 estimate ``exp(t - s) - (t - s) - 1`` (non-negative, lower
  variance, biased) added to each token's loss times ``coef`` and differentiated directly,
  with the GRPO term weighted by ``reward_weight``.

Tokens without a teacher log-prob (NaN) carry no distillation term; prompt and padding
positions are never among the positions the loss sees (see ``runtime.trainer.packing``),
and ``mask`` (the sample's loss mask) weighs each response token as in GRPO. The loss is a
sum over tokens divided by ``token_divisor``, like ``grpo_loss``.
"""

from __future__ import annotations

import torch

from .grpo import GRPOConfig, behaviour_logp, grpo_loss, kl_penalty
from .settings import DistillConfig

DISTILL_SUMS = ("opd_kl", "opd_k3", "opd_tokens")


def opd_loss(
    logp: torch.Tensor,
    *,
    teacher_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    old_logp: torch.Tensor | None,
    rollout_logp: torch.Tensor | None,
    ref_logp: torch.Tensor | None,
    entropy: torch.Tensor | None,
    cfg: GRPOConfig,
    distill: DistillConfig,
    token_divisor: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss and metric sums over the masked tokens (``grpo_loss``'s, plus ``opd_kl``: the
    summed ``s - t``, ``opd_k3``: the summed k3 estimate, ``opd_tokens``: tokens with a
    teacher log-prob). Inputs are per selected position, as for ``grpo_loss``."""
    cur = logp.detach()
    old = behaviour_logp(cur, old_logp)
    known = ~torch.isnan(teacher_logp)
    teacher = torch.where(known, teacher_logp, old)  # unknown: no distillation term
    adv = distill.reward_weight * advantages
    if distill.loss == "reverse_kl":
        adv = adv - distill.coef * (old - teacher)
    loss, sums = grpo_loss(
        logp,
        advantages=adv,
        mask=mask,
        old_logp=old_logp,
        rollout_logp=rollout_logp,
        ref_logp=ref_logp,
        entropy=entropy,
        cfg=cfg,
        token_divisor=token_divisor,
    )
    m = mask.to(logp.dtype) * known.to(logp.dtype)
    k3 = kl_penalty(logp, teacher, "k3")
    if distill.loss == "reverse_kl_k3":
        loss = loss + distill.coef * (k3 * m).sum() / max(token_divisor, 1.0)
    with torch.no_grad():
        sums["opd_kl"] = ((cur - teacher) * m).sum()
        sums["opd_k3"] = (k3.detach() * m).sum()
        sums["opd_tokens"] = m.sum()
    return loss, sums
