"""SGLang-style sampling parameters and a batched, per-request-seeded sampler.

Reproducibility: each request owns a CPU ``torch.Generator`` (``sampling_seed`` or one
derived from the engine seed and the request's arrival number). A step draws one uniform
per request from its own generator and samples by inverse CDF on the device, so a
request's tokens do not depend on which other requests share its batch.

Logprobs follow SGLang's default: log of the temperature-scaled distribution before
top-k/top-p truncation (raw ``log_softmax`` for greedy requests).
"""

from __future__ import annotations

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


def sample(
    logits: torch.Tensor,
    params: list[SamplingParams],
    generators: list[torch.Generator],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row; return ``(tokens, logprobs)`` on the CPU."""
    logits = logits.float()
    bsz = logits.shape[0]
    temps = torch.tensor(
        [p.temperature if not p.greedy else 1.0 for p in params], device=logits.device
    )
    scaled = logits / temps.unsqueeze(1)
    logprobs_all = torch.log_softmax(scaled, dim=-1)
    greedy_tok = logits.argmax(dim=-1)
    tokens = greedy_tok.clone()
    sampled_rows = [i for i, p in enumerate(params) if not p.greedy]
    if sampled_rows:
        rows = torch.tensor(sampled_rows, device=logits.device)
        probs = logprobs_all[rows].exp()
        sorted_p, order = probs.sort(dim=-1, descending=True)
        keep = torch.ones_like(sorted_p, dtype=torch.bool)
        rank = torch.arange(sorted_p.shape[1], device=logits.device).unsqueeze(0)
        top_k = torch.tensor(
            [params[i].top_k if params[i].top_k > 0 else sorted_p.shape[1] for i in sampled_rows],
            device=logits.device,
        ).unsqueeze(1)
        keep &= rank < top_k
        top_p = torch.tensor([params[i].top_p for i in sampled_rows], device=logits.device)
        cum = sorted_p.cumsum(dim=-1)
        keep &= (cum - sorted_p) < top_p.unsqueeze(1)
        min_p = torch.tensor([params[i].min_p for i in sampled_rows], device=logits.device)
        keep &= sorted_p >= (min_p * sorted_p[:, 0]).unsqueeze(1)
        keep[:, 0] = True
        kept = torch.where(keep, sorted_p, torch.zeros_like(sorted_p))
        cdf = kept.cumsum(dim=-1)
        u = torch.cat([torch.rand(1, generator=generators[i]) for i in sampled_rows])
        u = u.to(logits.device) * cdf[:, -1]
        pick = torch.searchsorted(cdf, u.unsqueeze(1), right=True).clamp_(max=cdf.shape[1] - 1)
        # never pick a zero-probability (truncated) entry
        pick = torch.minimum(pick, keep.sum(dim=-1, keepdim=True) - 1)
        tokens[rows] = order.gather(1, pick).squeeze(1)
    lp = logprobs_all.gather(1, tokens.unsqueeze(1)).squeeze(1)
    del bsz
    return tokens.cpu(), lp.cpu()
