"""SGLang-style sampling parameters and a batched, counter-based sampler.

Reproducibility: each request has a 64-bit seed (``sampling_seed`` or one derived from the
engine seed and the request's arrival number). The uniform for its n-th output token is an
integer hash of (seed, n) computed with overflow-free torch int64 ops on the device, so a
request's tokens do not depend on which other requests share its batch, and no per-request
generator forces per-row work. Tokens are drawn by inverse CDF over the tempered softmax:
without top-k/top-p/min-p a two-level search (block sums, then one block) replaces the full
vocab sort; rows with truncation sort, but only those rows.

Logprobs follow SGLang's default: log of the temperature-scaled distribution before
top-k/top-p truncation (raw ``log_softmax`` for greedy requests).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

_KNOWN = {
    "max_new_tokens",
    "min_new_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "stop",
    "stop_token_ids",
    "ignore_eos",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "no_stop_trim",
    "n",
    "sampling_seed",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
    "json_schema",
    "regex",
    "ebnf",
    "structural_tag",
    "custom_params",
}


class BadRequest(ValueError):
    """A request the server answers with HTTP 400."""


@dataclass
class SamplingParams:
    max_new_tokens: int = 128
    min_new_tokens: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    no_stop_trim: bool = False
    n: int = 1
    sampling_seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0 or self.top_k == 1

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> SamplingParams:
        data = dict(data or {})
        unknown = set(data) - _KNOWN
        if unknown:
            raise BadRequest(f"unknown sampling_params: {sorted(unknown)}")
        for unsupported in ("json_schema", "regex", "ebnf", "structural_tag"):
            if data.get(unsupported) is not None:
                raise BadRequest(f"sampling_params.{unsupported} is not supported by this engine")
        for penalty in ("frequency_penalty", "presence_penalty"):
            if float(data.get(penalty) or 0.0) != 0.0:
                raise BadRequest(f"sampling_params.{penalty} is not supported by this engine")
        if float(data.get("repetition_penalty") or 1.0) != 1.0:
            raise BadRequest("sampling_params.repetition_penalty is not supported by this engine")
        stop = data.get("stop") or []
        if isinstance(stop, str):
            stop = [stop]
        try:
            p = cls(
                max_new_tokens=int(
                    data["max_new_tokens"] if data.get("max_new_tokens") is not None else 128
                ),
                min_new_tokens=int(data.get("min_new_tokens") or 0),
                temperature=float(
                    data["temperature"] if data.get("temperature") is not None else 1.0
                ),
                top_p=float(data["top_p"] if data.get("top_p") is not None else 1.0),
                top_k=int(data["top_k"] if data.get("top_k") is not None else -1),
                min_p=float(data.get("min_p") or 0.0),
                stop=[str(s) for s in stop],
                stop_token_ids=[int(t) for t in (data.get("stop_token_ids") or [])],
                ignore_eos=bool(data.get("ignore_eos", False)),
                no_stop_trim=bool(data.get("no_stop_trim", False)),
                n=int(data.get("n") or 1),
                sampling_seed=None
                if data.get("sampling_seed") is None
                else int(data["sampling_seed"]),
            )
        except (TypeError, ValueError) as exc:
            raise BadRequest(f"invalid sampling_params: {exc}") from exc
        if p.max_new_tokens < 0:
            raise BadRequest("max_new_tokens must be >= 0")
        if p.temperature < 0:
            raise BadRequest("temperature must be >= 0")
        if not 0.0 < p.top_p <= 1.0:
            raise BadRequest("top_p must be in (0, 1]")
        if p.top_k == 0 or p.top_k < -1:
            raise BadRequest("top_k must be -1 (disabled) or >= 1")
        if not 0.0 <= p.min_p < 1.0:
            raise BadRequest("min_p must be in [0, 1)")
        if p.n < 1:
            raise BadRequest("n must be >= 1")
        return p


_M32 = 0xFFFFFFFF
_GOLDEN = 0x9E3779B9
_BLOCK = 256  # vocab block of the two-level inverse CDF


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """``x * c mod 2**32`` for ``0 <= x < 2**32`` without int64 overflow (16-bit halves)."""
    lo = x * (c & 0xFFFF)
    hi = ((x * (c >> 16)) & 0xFFFF) << 16
    return (lo + hi) & _M32


def _fmix32(h: torch.Tensor) -> torch.Tensor:
    """MurmurHash3's 32-bit finalizer (a bijection with full avalanche)."""
    h = h ^ (h >> 16)
    h = _mul32(h, 0x85EBCA6B)
    h = h ^ (h >> 13)
    h = _mul32(h, 0xC2B2AE35)
    return h ^ (h >> 16)


def _hash32(seed_lo: torch.Tensor, seed_hi: torch.Tensor, word: torch.Tensor) -> torch.Tensor:
    h = _fmix32((word + _GOLDEN) & _M32)
    h = _fmix32((h ^ seed_lo) + _GOLDEN & _M32)
    return _fmix32((h ^ seed_hi) + _GOLDEN & _M32)


def uniforms(seeds: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """One float64 uniform in (0, 1) per row from ``(seed, counter)`` (53 random bits).

    ``seeds`` are int64 in ``[0, 2**63)``, ``counters`` int64 in ``[0, 2**31)``. All
    intermediate values stay below 2**50, so results are identical on every backend.
    """
    lo, hi = seeds & _M32, (seeds >> 32) & _M32
    word = (counters & 0x7FFFFFFF) * 2
    a = _hash32(lo, hi, word) >> 6  # 26 bits
    b = _hash32(lo, hi, word + 1) >> 5  # 27 bits
    return ((a * (1 << 27) + b).double() + 0.5) * (2.0**-53)


def uniform_reference(seed: int, counter: int) -> float:
    """Pure-Python twin of ``uniforms`` (tests pin the torch version against it)."""

    def mul(x: int, c: int) -> int:
        return (x * c) & _M32

    def fmix(h: int) -> int:
        h ^= h >> 16
        h = mul(h, 0x85EBCA6B)
        h ^= h >> 13
        h = mul(h, 0xC2B2AE35)
        return h ^ (h >> 16)

    def h32(word: int) -> int:
        h = fmix((word + _GOLDEN) & _M32)
        h = fmix(((h ^ (seed & _M32)) + _GOLDEN) & _M32)
        return fmix(((h ^ ((seed >> 32) & _M32)) + _GOLDEN) & _M32)

    word = (counter & 0x7FFFFFFF) * 2
    return ((h32(word) >> 6) * (1 << 27) + (h32(word + 1) >> 5) + 0.5) * 2.0**-53


@dataclass(eq=False)
class SamplingBatch:
    """Per-batch constants of ``sample`` (rebuilt only when the running set changes)."""

    temps: torch.Tensor  # (B,) float32, 1.0 for greedy rows
    seeds: torch.Tensor  # (B,) int64
    greedy: torch.Tensor  # (B,) bool
    all_greedy: bool
    any_greedy: bool
    scaled: bool  # some temperature differs from 1
    trunc_rows: torch.Tensor | None  # sampled rows with top-k/top-p/min-p
    top_k: torch.Tensor | None
    top_p: torch.Tensor | None
    min_p: torch.Tensor | None
    # every row's truncation (static shapes for the fused, graph-captured step)
    row_trunc: torch.Tensor | None = None  # (B,) bool
    row_top_k: torch.Tensor | None = None  # (B,) int64, -1 off
    row_top_p: torch.Tensor | None = None  # (B,) float32, 1 off
    row_min_p: torch.Tensor | None = None  # (B,) float32, 0 off

    @property
    def mode(self) -> str:
        """The fused step's sampler variant: ``greedy``, ``sample`` or ``truncate``."""
        if self.all_greedy:
            return "greedy"
        return "sample" if self.trunc_rows is None else "truncate"

    @classmethod
    def build(
        cls, params: Sequence[SamplingParams], seeds: Sequence[int], device: torch.device | str
    ) -> SamplingBatch:
        greedy = [p.greedy for p in params]
        temps = [1.0 if g else float(p.temperature) for p, g in zip(params, greedy, strict=True)]
        trunc = [
            i
            for i, p in enumerate(params)
            if not greedy[i] and (p.top_k > 0 or p.top_p < 1.0 or p.min_p > 0.0)
        ]
        dev = torch.device(device)
        cut = set(trunc)

        def t(vals: list[Any], dtype: torch.dtype) -> torch.Tensor:
            return torch.tensor(vals, dtype=dtype, device=dev)

        return cls(
            temps=t(temps, torch.float32),
            seeds=t([int(s) % (2**63) for s in seeds], torch.int64),
            greedy=t(greedy, torch.bool),
            all_greedy=all(greedy),
            any_greedy=any(greedy),
            scaled=any(x != 1.0 for x in temps),
            trunc_rows=t(trunc, torch.int64) if trunc else None,
            top_k=t([params[i].top_k for i in trunc], torch.int64) if trunc else None,
            top_p=t([params[i].top_p for i in trunc], torch.float32) if trunc else None,
            min_p=t([params[i].min_p for i in trunc], torch.float32) if trunc else None,
            row_trunc=t([i in cut for i in range(len(params))], torch.bool),
            row_top_k=t([p.top_k if i in cut else -1 for i, p in enumerate(params)], torch.int64),
            row_top_p=t(
                [p.top_p if i in cut else 1.0 for i, p in enumerate(params)], torch.float32
            ),
            row_min_p=t(
                [p.min_p if i in cut else 0.0 for i, p in enumerate(params)], torch.float32
            ),
        )


def _searchsorted_clamped(
    cum: torch.Tensor, target: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """First index with ``cum > target``; rounding past the end falls back to the last
    index of positive weight (never a zero-probability entry)."""
    pick = torch.searchsorted(cum, target.unsqueeze(1), right=True).squeeze(1)
    last = (weights > 0).cumsum(dim=-1).argmax(dim=-1)
    return torch.minimum(pick, last)


def _inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Token per row with ``P(i) ~ probs[i]`` (unnormalized, >= 0) for uniforms ``u``.

    Two levels so no full-vocab scan or sort is needed: float64 prefix sums over block sums
    pick a block, then a prefix sum over that block's entries picks the token.
    """
    bsz, vocab = probs.shape
    blk = min(_BLOCK, vocab)
    pad = (-vocab) % blk
    if pad:
        probs = torch.nn.functional.pad(probs, (0, pad))
    blocks = probs.view(bsz, -1, blk)
    sums = blocks.sum(dim=-1, dtype=torch.float64)  # (B, nb)
    cum = sums.cumsum(dim=-1)
    target = u * cum[:, -1]
    b = _searchsorted_clamped(cum, target, sums)
    before = torch.where(b > 0, cum.gather(1, (b - 1).clamp(min=0).unsqueeze(1)).squeeze(1), 0.0)
    rows = torch.arange(bsz, device=probs.device)
    inner = blocks[rows, b].double()  # (B, blk)
    j = _searchsorted_clamped(inner.cumsum(dim=-1), target - before, inner)
    return (b * blk + j).clamp(max=vocab - 1)


def _truncated(probs: torch.Tensor, u: torch.Tensor, batch: SamplingBatch) -> torch.Tensor:
    """Top-k / top-p / min-p rows: sort (these rows only), keep, inverse CDF."""
    assert batch.top_k is not None and batch.top_p is not None and batch.min_p is not None
    return _truncated_rows(probs, u, batch.top_k, batch.top_p, batch.min_p)


def _truncated_rows(
    probs: torch.Tensor,
    u: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    min_p: torch.Tensor,
) -> torch.Tensor:
    """Row-wise: a row's token depends only on that row (so all rows or a subset agree)."""
    vocab = probs.shape[1]
    sorted_p, order = probs.sort(dim=-1, descending=True)
    rank = torch.arange(vocab, device=probs.device).unsqueeze(0)
    keep = rank < torch.where(top_k > 0, top_k, vocab).unsqueeze(1)
    cum = sorted_p.cumsum(dim=-1)
    total = cum[:, -1:]
    keep &= (cum - sorted_p) < top_p.unsqueeze(1) * total
    keep &= sorted_p >= (min_p * sorted_p[:, 0]).unsqueeze(1)
    keep[:, 0] = True
    kept = torch.where(keep, sorted_p, torch.zeros_like(sorted_p)).double()
    cdf = kept.cumsum(dim=-1)
    pick = _searchsorted_clamped(cdf, u * cdf[:, -1], kept)
    return order.gather(1, pick.unsqueeze(1)).squeeze(1)


def sample_batch(
    logits: torch.Tensor,
    batch: SamplingBatch,
    counters: torch.Tensor,
    u: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row and its logprob, both left on ``logits``' device.

    ``counters[b]`` is the index of the output token being drawn for row ``b``; its
    uniform is ``uniforms(seed, counter)`` (callers may pass ``u`` precomputed). The
    logprob is the log-softmax of the tempered logits at the chosen token (SGLang's
    default: before truncation; raw for greedy rows).
    """
    x = logits.float()
    if batch.scaled:
        x = x / batch.temps.unsqueeze(1)
    m = x.amax(dim=-1, keepdim=True)
    if batch.all_greedy:
        tokens = x.argmax(dim=-1)
        lse = m.squeeze(1) + (x - m).exp().sum(dim=-1).log()
    else:
        probs = (x - m).exp()
        lse = m.squeeze(1) + probs.sum(dim=-1).log()
        if u is None:
            u = uniforms(batch.seeds, counters)
        tokens = _inverse_cdf(probs, u)
        if batch.trunc_rows is not None:
            rows = batch.trunc_rows
            tokens[rows] = _truncated(probs[rows], u[rows], batch)
        if batch.any_greedy:
            tokens = torch.where(batch.greedy, x.argmax(dim=-1), tokens)
    lp = x.gather(1, tokens.unsqueeze(1)).squeeze(1) - lse
    return tokens, lp


def sample_rows(
    logits: torch.Tensor,
    temps: torch.Tensor,
    greedy: torch.Tensor,
    seeds: torch.Tensor,
    counters: torch.Tensor,
    trunc: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    min_p: torch.Tensor,
    mode: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``sample_batch`` with static shapes and no host decisions beyond ``mode`` (per-row
    tensors instead of row subsets), so it can run inside a compiled, graph-captured decode
    step. Same tokens and logprobs as ``sample_batch`` for the same seeds and counters:
    dividing by a temperature of 1 is exact, truncation is row-wise, and the uniforms are
    the same integer hash of ``(seed, counter)``."""
    x = logits.float() / temps.unsqueeze(1)
    m = x.amax(dim=-1, keepdim=True)
    probs = (x - m).exp()
    lse = m.squeeze(1) + probs.sum(dim=-1).log()
    if mode == "greedy":
        tokens = x.argmax(dim=-1)
    else:
        u = uniforms(seeds, counters)
        tokens = _inverse_cdf(probs, u)
        if mode == "truncate":
            tokens = torch.where(trunc, _truncated_rows(probs, u, top_k, top_p, min_p), tokens)
        tokens = torch.where(greedy, x.argmax(dim=-1), tokens)
    lp = x.gather(1, tokens.unsqueeze(1)).squeeze(1) - lse
    return tokens, lp


def sample(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    seeds: Sequence[int],
    counters: Sequence[int],
) -> tuple[torch.Tensor, torch.Tensor]:
    """``sample_batch`` from plain lists (tests, one-off calls); results on the CPU."""
    batch = SamplingBatch.build(params, seeds, logits.device)
    cnt = torch.tensor(list(counters), dtype=torch.int64, device=logits.device)
    tokens, lp = sample_batch(logits, batch, cnt)
    return tokens.cpu(), lp.cpu()
