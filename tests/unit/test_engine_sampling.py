"""The counter-based sampler: exact hash, distribution, logprobs, batch independence."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from runtime.engines.embedded.sampling import (  # noqa: E402
    SamplingBatch,
    SamplingParams,
    sample,
    sample_batch,
    uniform_reference,
    uniforms,
)


def test_uniforms_match_the_python_reference():
    seeds = [0, 1, 7, 2**32 - 1, 2**32, 123456789012345, 2**63 - 1]
    counters = [0, 1, 2, 99, 2**20, 2**31 - 1, 5]
    got = uniforms(torch.tensor(seeds), torch.tensor(counters)).tolist()
    assert got == [uniform_reference(s, c) for s, c in zip(seeds, counters, strict=True)]
    assert all(0.0 < u < 1.0 for u in got)


def test_uniforms_look_uniform_and_independent():
    n = 100_000
    u = uniforms(torch.full((n,), 42), torch.arange(n))
    counts = torch.histc(u.float(), bins=20, min=0.0, max=1.0)
    chi2 = float(((counts - n / 20) ** 2 / (n / 20)).sum())
    assert chi2 < 50  # 19 dof: p ~ 1e-4
    # neighbouring seeds and counters decorrelate
    v = uniforms(torch.full((n,), 43), torch.arange(n))
    assert abs(float(torch.corrcoef(torch.stack([u, v]))[0, 1])) < 0.02
    assert abs(float(torch.corrcoef(torch.stack([u[:-1], u[1:]]))[0, 1])) < 0.02


def _chi2(tokens: torch.Tensor, probs: torch.Tensor) -> tuple[float, int]:
    n = tokens.numel()
    counts = torch.bincount(tokens, minlength=probs.numel()).double()
    expected = n * probs.double()
    ok = expected >= 5
    rest_obs = counts[~ok].sum()
    rest_exp = expected[~ok].sum()
    chi2 = float((((counts - expected) ** 2) / expected)[ok].sum())
    dof = int(ok.sum()) - 1
    if rest_exp >= 5:
        chi2 += float((rest_obs - rest_exp) ** 2 / rest_exp)
        dof += 1
    return chi2, dof


def _chi2_limit(dof: int) -> float:
    """~ p = 1e-4 upper quantile (Wilson-Hilferty)."""
    z = 3.72
    return dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3


@pytest.mark.parametrize("vocab,temp", [(300, 1.0), (1000, 0.7), (2048, 1.3)])
def test_sort_free_sampler_distribution(vocab, temp):
    """Chi-square against the tempered softmax (vocab 300 pads the 256-token blocks)."""
    gen = torch.Generator().manual_seed(vocab)
    logits = torch.randn(1, vocab, generator=gen) * 2.5
    n = 40_000
    toks, lps = sample(
        logits.expand(n, -1), [SamplingParams(temperature=temp)] * n, [9] * n, range(n)
    )
    probs = torch.softmax(logits[0].double() / temp, dim=-1)
    chi2, dof = _chi2(toks, probs)
    assert chi2 < _chi2_limit(dof), (chi2, dof)
    ref = torch.log_softmax(logits[0].double() / temp, dim=-1)
    assert (lps.double() - ref[toks]).abs().max() < 1e-5


def test_truncated_rows_distribution_and_support():
    logits = torch.tensor([[3.0, 2.5, 2.0, 1.0, 0.0, -1.0, -5.0, 0.5]])
    n = 30_000
    probs = torch.softmax(logits[0].double(), dim=-1)
    for params, keep in (
        (SamplingParams(top_k=3), [0, 1, 2]),
        (SamplingParams(top_p=0.8), [0, 1, 2]),  # mass before: 0, .44, .71, .87
        (SamplingParams(min_p=0.1), [0, 1, 2, 3]),  # p >= 0.1 * p_max
    ):
        toks, lps = sample(logits.expand(n, -1), [params] * n, [3] * n, range(n))
        assert set(toks.tolist()) == set(keep)
        kept = torch.zeros_like(probs)
        kept[keep] = probs[keep]
        chi2, dof = _chi2(toks, kept / kept.sum())
        assert chi2 < _chi2_limit(dof), (params, chi2)
        # logprobs stay those of the untruncated tempered distribution
        assert (lps.double() - probs.log()[toks]).abs().max() < 1e-5


def test_rows_do_not_depend_on_batch_composition():
    """A row's token depends on (logits, params, seed, counter) only: same results alone,
    in a mixed batch with greedy and top-k neighbours, and at any row index."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 500, generator=gen)
    params = [
        SamplingParams(temperature=1.0),
        SamplingParams(temperature=0.0),
        SamplingParams(temperature=0.5, top_k=20),
        SamplingParams(temperature=1.2),
        SamplingParams(temperature=1.0, top_p=0.9),
        SamplingParams(temperature=0.9, min_p=0.05),
    ]
    seeds, counters = [5, 6, 7, 8, 9, 10], [0, 3, 1, 4, 2, 7]
    toks, lps = sample(logits, params, seeds, counters)
    for i in range(6):
        t1, l1 = sample(logits[i : i + 1], [params[i]], [seeds[i]], [counters[i]])
        assert int(t1[0]) == int(toks[i]) and abs(float(l1[0]) - float(lps[i])) < 1e-6
    perm = [3, 5, 0, 2, 4, 1]
    tp, _ = sample(
        logits[perm],
        [params[i] for i in perm],
        [seeds[i] for i in perm],
        [counters[i] for i in perm],
    )
    assert tp.tolist() == [int(toks[i]) for i in perm]
    assert int(toks[1]) == int(logits[1].argmax())


def test_greedy_batch_and_counters_change_draws():
    logits = torch.randn(4, 64, generator=torch.Generator().manual_seed(1))
    batch = SamplingBatch.build([SamplingParams(temperature=0.0)] * 4, [0] * 4, "cpu")
    toks, lps = sample_batch(logits, batch, torch.zeros(4, dtype=torch.long))
    assert toks.tolist() == logits.argmax(-1).tolist()
    assert torch.allclose(lps, torch.log_softmax(logits, -1).max(-1).values, atol=1e-6)
    flat = torch.zeros(1, 64)
    draws = {int(sample(flat, [SamplingParams()], [1], [c])[0][0]) for c in range(50)}
    assert len(draws) > 20  # successive counters give fresh uniforms
