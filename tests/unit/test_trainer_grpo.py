"""GRPO math: advantages, asymmetric clipping, KL estimators, TIS, token averaging."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from runtime.trainer.grpo import GRPOConfig, group_advantages, grpo_loss, kl_penalty  # noqa: E402
from runtime.trainer.schedule import lr_multiplier  # noqa: E402


def _loss(logp, old, adv, cfg=None, **kw):
    logp = logp.clone().requires_grad_(True)
    mask = kw.pop("mask", torch.ones_like(logp))
    loss, sums = grpo_loss(
        logp,
        advantages=adv,
        mask=mask,
        old_logp=old,
        rollout_logp=kw.pop("rollout", None),
        ref_logp=kw.pop("ref", None),
        entropy=kw.pop("entropy", None),
        cfg=cfg or GRPOConfig(),
        token_divisor=kw.pop("divisor", float(mask.sum())),
    )
    loss.backward()
    return loss, sums, logp.grad


def test_group_advantages() -> None:
    assert group_advantages([1.0, 0.0, 0.0, 1.0]) == [0.5, -0.5, -0.5, 0.5]
    norm = group_advantages([1.0, 0.0, 0.0, 1.0], normalize_std=True)
    assert norm[0] == pytest.approx(1.0, rel=1e-5)
    assert group_advantages([2.0, 2.0], normalize_std=True) == [0.0, 0.0]
    assert group_advantages([]) == []


def test_on_policy_gradient_is_minus_advantage_over_tokens() -> None:
    logp = torch.tensor([-1.0, -2.0, -0.5])
    adv = torch.tensor([1.0, -1.0, 2.0])
    loss, sums, grad = _loss(logp, None, adv)
    assert loss.item() == pytest.approx(-(1 - 1 + 2) / 3)
    assert torch.allclose(grad, -adv / 3)
    assert sums["clip_frac"].item() == 0


def test_asymmetric_clip_zeroes_gradient_outside_band() -> None:
    old = torch.zeros(4)
    # ratios 1.3 (>1.28), 1.25 (inside), 0.75 (<0.8), 0.85 (inside)
    logp = torch.log(torch.tensor([1.3, 1.25, 0.75, 0.85]))
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0])
    _, sums, grad = _loss(logp, old, adv)
    assert grad[0].item() == 0 and grad[2].item() == 0
    assert grad[1].item() != 0 and grad[3].item() != 0
    assert sums["clip_high_frac"].item() == 1 and sums["clip_low_frac"].item() == 1
    # the pessimistic side is never clipped: ratio 1.3 with a negative advantage keeps its gradient
    _, _, g2 = _loss(logp[:1], old[:1], torch.tensor([-1.0]))
    assert g2[0].item() != 0


def test_kl_estimators() -> None:
    a = torch.tensor([-1.0, -2.0])
    assert torch.allclose(kl_penalty(a, a, "k3"), torch.zeros(2))
    b = torch.tensor([-1.5, -0.5])
    k3 = kl_penalty(a, b, "k3")
    assert (k3 > 0).all()
    assert torch.allclose(kl_penalty(a, b, "k1"), a - b)
    assert torch.allclose(kl_penalty(a, b, "k2"), 0.5 * (a - b) ** 2)
    with pytest.raises(ValueError):
        GRPOConfig(kl_estimator="k9")


def test_kl_term_pulls_towards_reference() -> None:
    logp = torch.tensor([-0.5])
    ref = torch.tensor([-2.0])
    cfg = GRPOConfig(kl_coef=1.0)
    _, sums, grad = _loss(logp, None, torch.zeros(1), cfg, ref=ref)
    assert grad[0].item() > 0  # descending lowers logp towards the reference
    assert sums["kl"].item() == pytest.approx(math.exp(-1.5) + 1.5 - 1)


def test_tis_weight_is_clipped_and_detached() -> None:
    logp = torch.tensor([-1.0, -1.0])
    rollout = torch.tensor([-1.0 - math.log(4.0), float("nan")])  # pi_old/pi_rollout = 4, unknown
    cfg = GRPOConfig(off_policy_correction="tis", tis_clip=2.0)
    _, sums, grad = _loss(logp, None, torch.ones(2), cfg, rollout=rollout)
    assert grad[0].item() == pytest.approx(-2.0 / 2)
    assert grad[1].item() == pytest.approx(-1.0 / 2)
    assert sums["tis_weight"].item() == pytest.approx(3.0)
    assert sums["logprob_abs_diff"].item() == pytest.approx(math.log(4.0))
    assert sums["rollout_tokens"].item() == 1


def test_token_level_average_uses_global_divisor_and_mask() -> None:
    logp = torch.tensor([-1.0, -1.0, -1.0])
    mask = torch.tensor([1.0, 0.0, 1.0])
    loss, _, grad = _loss(logp, None, torch.ones(3), mask=mask, divisor=10.0)
    assert loss.item() == pytest.approx(-2.0 / 10)
    assert grad.tolist() == pytest.approx([-0.1, 0.0, -0.1])


def test_entropy_bonus_sign() -> None:
    ent = torch.tensor([2.0])
    loss, _, _ = _loss(
        torch.tensor([-1.0]), None, torch.zeros(1), GRPOConfig(entropy_coef=0.1), entropy=ent
    )
    assert loss.item() == pytest.approx(-0.2)


def test_lr_schedules() -> None:
    const = lr_multiplier("constant", warmup_steps=2, total_steps=10)
    assert [const(i) for i in range(4)] == [0.5, 1.0, 1.0, 1.0]
    lin = lr_multiplier("linear", warmup_steps=0, total_steps=10, min_ratio=0.0)
    assert lin(0) == 1.0 and lin(5) == pytest.approx(0.5) and lin(10) == 0.0
    cos = lr_multiplier("cosine", warmup_steps=0, total_steps=10, min_ratio=0.1)
    assert cos(0) == 1.0 and cos(5) == pytest.approx(0.55) and cos(20) == pytest.approx(0.1)
    with pytest.raises(ValueError):
        lr_multiplier("wsd", warmup_steps=0, total_steps=1)
