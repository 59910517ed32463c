"""Chunked log-probs/entropy: same values and gradients as a full log_softmax."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from runtime.trainer.logprobs import token_logprobs  # noqa: E402


def _reference(z: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    la = torch.log_softmax(z, -1)
    return la.gather(-1, t[:, None]).squeeze(-1), -(la.exp() * la).sum(-1)


@pytest.mark.parametrize("chunk", [1, 8, 64])
def test_values_and_gradients_match_full_softmax(chunk: int) -> None:
    g = torch.Generator().manual_seed(chunk)
    z = torch.randn(37, 53, dtype=torch.float64, generator=g, requires_grad=True)
    t = torch.randint(0, 53, (37,), generator=g)
    ga, gb = torch.randn(37, generator=g, dtype=torch.float64), torch.randn(37, generator=g)
    lp, ent = token_logprobs(z, t, chunk=chunk)
    ((lp * ga).sum() + (ent * gb).sum()).backward()
    got = z.grad.clone()
    z.grad = None
    lp2, ent2 = _reference(z, t)
    ((lp2 * ga).sum() + (ent2 * gb).sum()).backward()
    assert torch.allclose(lp, lp2) and torch.allclose(ent, ent2)
    assert torch.allclose(got, z.grad)


def test_gradcheck_and_unused_entropy() -> None:
    g = torch.Generator().manual_seed(0)
    z = torch.randn(6, 9, dtype=torch.float64, generator=g, requires_grad=True)
    t = torch.randint(0, 9, (6,), generator=g)
    assert torch.autograd.gradcheck(lambda x: token_logprobs(x, t, chunk=4), (z,))
    # entropy left out of the loss: only the log-prob gradient flows
    lp, _ = token_logprobs(z, t, chunk=4)
    lp.sum().backward()
    got = z.grad.clone()
    z.grad = None
    _reference(z, t)[0].sum().backward()
    assert torch.allclose(got, z.grad)


def test_selected_rows_only() -> None:
    g = torch.Generator().manual_seed(1)
    z = torch.randn(10, 7, dtype=torch.float64, generator=g, requires_grad=True)
    rows = torch.tensor([7, 2, 3, 9])
    t = torch.randint(0, 7, (4,), generator=g)
    lp, ent = token_logprobs(z, t, rows=rows, chunk=2)  # unsorted, spans several chunks
    (lp.sum() + ent.sum()).backward()
    got = z.grad.clone()
    z.grad = None
    lp2, ent2 = _reference(z[rows], t)
    (lp2.sum() + ent2.sum()).backward()
    assert torch.allclose(lp, lp2) and torch.allclose(ent, ent2)
    assert torch.allclose(got, z.grad)  # zero on the rows not selected


def test_bf16_logits_give_fp32_outputs_and_bf16_grads() -> None:
    z = torch.randn(5, 11).to(torch.bfloat16).requires_grad_()
    lp, ent = token_logprobs(z, torch.zeros(5, dtype=torch.long))
    assert lp.dtype == ent.dtype == torch.float32
    lp.sum().backward()
    assert z.grad is not None and z.grad.dtype == torch.bfloat16
