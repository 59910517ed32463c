"""MoE router replay and router auxiliary losses for the trainer forward.

Router replay: the rollout engine records, per token and MoE layer, the ``top_k`` experts it
used (SGLang's ``routed_experts``). With replay on, the trainer's forward executes exactly
those experts instead of re-routing, so train and inference run the same sub-network. The
router still runs: the gate weights are the *current* router's scores gathered at the
recorded ids (so the router keeps its gradient), and what the router would have chosen is
compared with the recorded ids for the ``replay/route_mismatch`` metric.

It hooks OLMo-core's ``MoERouter`` per instance for one forward (``RouterTap``): the
router's ``get_expert_logits`` (captured for the z-loss) and ``get_top_k`` (replaced while
replaying). Everything after ``get_top_k`` (weight normalisation, token dispatch in the
capacity MLP, the CPU fallbacks of ``runtime.models.moe_cpu``) is untouched.

Auxiliary losses are computed here rather than by OLMo-core (whose built-in ones average
over every token of a microbatch and add up across microbatches, so their value depends on
how samples are packed into rows and split over ranks). The trainer takes both over the whole
global batch: the z-loss is a token mean, and the load-balancing loss uses the expert counts
of the whole batch (``expert_counts``, summed over rows and ranks before the update) with each
row adding its scores (``batch_load_balancing_loss``); either may be restricted to response
tokens (``reduction="response"``). ``router_losses`` keeps OLMo-core's row-local form.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

REDUCTIONS = ("token", "response")


def moe_routers(model: torch.nn.Module) -> list[Any]:
    """The model's ``MoERouter`` modules in layer order (the order engines record them)."""
    from olmo_core.nn.moe.router import MoERouter

    return [m for m in model.modules() if isinstance(m, MoERouter)]


def routing_shape(model: torch.nn.Module) -> tuple[int, int]:
    """``(moe_layers, top_k)`` of a model (``(0, 0)`` for a dense one)."""
    routers = moe_routers(model)
    if not routers:
        return 0, 0
    return len(routers), int(routers[0].top_k)


def as_routed_experts(value: Any, num_layers: int, top_k: int) -> torch.Tensor | None:
    """Normalise a recorded routing to a long tensor ``(tokens, num_layers, top_k)``.

    Accepts SGLang's wire form (base64 of little-endian int32, as the engines return it in
    ``meta_info.routed_experts``), a tensor/array, or nested lists. ``None``/``""`` -> None.
    """
    if value is None:
        return None
    if isinstance(value, str | bytes):
        if not value:
            return None
        import numpy as np

        raw = base64.b64decode(value)
        per_token = 4 * num_layers * top_k
        if per_token == 0 or len(raw) % per_token:
            raise ValueError(
                f"routed_experts has {len(raw)} bytes, not a multiple of "
                f"4 x {num_layers} layers x top_k {top_k}"
            )
        arr = np.frombuffer(raw, dtype="<i4").reshape(-1, num_layers, top_k)
        return torch.from_numpy(arr.astype("int64"))
    t = torch.as_tensor(value).long()
    if t.ndim != 3 or tuple(t.shape[1:]) != (num_layers, top_k):
        raise ValueError(
            f"routed_experts has shape {tuple(t.shape)}; expected (tokens, {num_layers}, {top_k})"
        )
    return t


@dataclass
class RouterRecord:
    """What one router saw in one forward (training-time tensors keep their graph)."""

    logits: torch.Tensor | None = None  # (..., E) fp32 expert logits
    scores: torch.Tensor | None = None  # (..., E) gate scores (softmax / sigmoid)
    indices: torch.Tensor | None = None  # (..., K) executed expert ids
    # replayed (token, layer) decisions the router would make differently / all replayed
    # ones; device tensors so that a forward does not synchronise per layer
    mismatches: torch.Tensor | None = None
    decisions: torch.Tensor | None = None


@dataclass
class TapResult:
    records: list[RouterRecord]

    def _total(self, name: str) -> int:
        parts = [getattr(r, name) for r in self.records if getattr(r, name) is not None]
        return int(torch.stack(parts).sum()) if parts else 0

    @property
    def mismatches(self) -> int:
        return self._total("mismatches")

    @property
    def decisions(self) -> int:
        return self._total("decisions")


def _replay_top_k(
    original: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    record: RouterRecord,
    replay: torch.Tensor | None,
    mask: torch.Tensor | None,
    collect: bool,
) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    def get_top_k(scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        weights, indices = original(scores)
        if replay is not None and mask is not None:
            k = indices.shape[-1]
            if replay.numel() != indices.numel():
                raise ValueError(
                    f"replayed experts cover {replay.numel() // max(k, 1)} tokens but the "
                    f"router sees {indices.numel() // max(k, 1)}"
                )
            ids = replay.to(indices.device).view_as(indices)
            keep = mask.to(indices.device).view(indices.shape[:-1]).unsqueeze(-1)
            with torch.no_grad():
                differ = (indices.sort(-1).values != ids.sort(-1).values).any(-1)
                mism, dec = (differ & keep.squeeze(-1)).sum(), keep.sum()
                record.mismatches = mism if record.mismatches is None else record.mismatches + mism
                record.decisions = dec if record.decisions is None else record.decisions + dec
            indices = torch.where(keep, ids, indices)
            weights = scores.gather(-1, indices)
        if collect:
            record.scores = scores
            record.indices = indices
        return weights, indices

    return get_top_k


def _capture_logits(
    original: Callable[[torch.Tensor], torch.Tensor], record: RouterRecord
) -> Callable[[torch.Tensor], torch.Tensor]:
    def get_expert_logits(x: torch.Tensor) -> torch.Tensor:
        logits = original(x)
        record.logits = logits
        return logits

    return get_expert_logits


@contextmanager
def router_tap(
    model: torch.nn.Module,
    *,
    replay: torch.Tensor | None = None,
    replay_mask: torch.Tensor | None = None,
    collect: bool = False,
) -> Iterator[TapResult]:
    """Hook every MoE router of ``model`` for the forwards run inside the block.

    ``replay``: ``(tokens, moe_layers, top_k)`` expert ids aligned with the flattened
    ``(batch, seq)`` positions of the forward; ``replay_mask`` ``(tokens,)`` says which
    positions replay (the others route freely). ``collect`` keeps logits/scores/ids per layer
    for auxiliary losses. Yields a ``TapResult`` filled in as the forward runs.
    """
    routers = moe_routers(model)
    if replay is not None:
        if replay.ndim != 3 or replay.shape[1] != len(routers):
            raise ValueError(
                f"replay ids have shape {tuple(replay.shape)}; the model has "
                f"{len(routers)} MoE layers"
            )
        if replay_mask is None:
            replay_mask = torch.ones(replay.shape[0], dtype=torch.bool)
        replay = replay.long()
    result = TapResult(records=[RouterRecord() for _ in routers])
    if replay is None and not collect:
        yield result
        return
    for layer, (router, record) in enumerate(zip(routers, result.records, strict=True)):
        ids = None if replay is None else replay[:, layer, :]
        router.get_top_k = _replay_top_k(router.get_top_k, record, ids, replay_mask, collect)
        if collect:
            router.get_expert_logits = _capture_logits(router.get_expert_logits, record)
    try:
        yield result
    finally:
        for router in routers:
            for name in ("get_top_k", "get_expert_logits"):
                router.__dict__.pop(name, None)


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1, t.shape[-1])


def load_balancing_loss(
    record: RouterRecord, mask: torch.Tensor, num_experts: int, sigmoid: bool
) -> torch.Tensor:
    """OLMo-core's switch-style loss over the ``mask``ed tokens of one row.

    ``E/K * sum_e count_e * mean_t(score_e) / T`` with ``count_e`` the executed (replayed,
    when replaying) assignments; with all tokens selected it equals OLMo-core's
    ``local_batch`` loss for that row.
    """
    assert record.scores is not None and record.indices is not None
    scores = _flat(record.scores).float()
    if sigmoid:
        scores = scores / scores.sum(-1, keepdim=True)
    idx = _flat(record.indices)
    m = mask.to(scores.device).reshape(-1)
    n = int(m.sum())
    if n == 0:
        return scores.sum() * 0.0
    top_k = idx.shape[-1]
    counts = torch.bincount(idx[m].reshape(-1), minlength=num_experts).to(scores.dtype)
    mean_scores = scores[m].mean(0)
    return (num_experts / top_k) * torch.dot(counts, mean_scores) / n


def z_loss(record: RouterRecord, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the ``mask``ed tokens of ``logsumexp(router logits) ** 2``."""
    assert record.logits is not None
    logits = _flat(record.logits).float()
    m = mask.to(logits.device).reshape(-1)
    if int(m.sum()) == 0:
        return logits.sum() * 0.0
    return torch.logsumexp(logits[m], dim=-1).square().mean()


def router_losses(
    records: Sequence[RouterRecord],
    routers: Sequence[Any],
    token_mask: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    aux_reduction: str,
    z_reduction: str,
    want_aux: bool,
    want_z: bool,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Means over MoE layers of the row's load-balancing and z losses (unweighted).

    The mean over layers is OLMo-core's convention (it divides the configured weight by the
    number of layers), so a coefficient means the same in the spec and in OLMo-core.
    """
    from olmo_core.nn.moe.router import MoERouterGatingFunction

    def pick(reduction: str) -> torch.Tensor:
        if reduction not in REDUCTIONS:
            raise ValueError(f"unknown router loss reduction {reduction!r}; use {REDUCTIONS}")
        return token_mask if reduction == "token" else response_mask

    aux = z = None
    with torch.autocast(token_mask.device.type, enabled=False):
        if want_aux:
            m = pick(aux_reduction)
            aux = sum(
                (
                    load_balancing_loss(
                        rec,
                        m,
                        int(r.num_experts),
                        r.gating_function == MoERouterGatingFunction.sigmoid,
                    )
                    for rec, r in zip(records, routers, strict=True)
                ),
                start=torch.zeros((), device=token_mask.device),
            ) / max(len(records), 1)
        if want_z:
            m = pick(z_reduction)
            z = sum(
                (z_loss(rec, m) for rec in records),
                start=torch.zeros((), device=token_mask.device),
            ) / max(len(records), 1)
    return aux, z


def _normalised_scores(record: RouterRecord, router: Any) -> torch.Tensor:
    from olmo_core.nn.moe.router import MoERouterGatingFunction

    assert record.scores is not None
    scores = _flat(record.scores).float()
    if router.gating_function == MoERouterGatingFunction.sigmoid:
        scores = scores / scores.sum(-1, keepdim=True)
    return scores


def expert_counts(
    records: Sequence[RouterRecord], routers: Sequence[Any], mask: torch.Tensor
) -> torch.Tensor:
    """``(moe_layers, num_experts)`` executed assignments of the ``mask``ed tokens of a row."""
    rows = []
    for rec, r in zip(records, routers, strict=True):
        assert rec.indices is not None
        m = mask.to(rec.indices.device).reshape(-1)
        idx = _flat(rec.indices)[m].reshape(-1)
        rows.append(torch.bincount(idx, minlength=int(r.num_experts)).to(torch.float64))
    return torch.stack(rows) if rows else torch.zeros(0, 0, dtype=torch.float64)


def batch_load_balancing_loss(
    records: Sequence[RouterRecord],
    routers: Sequence[Any],
    mask: torch.Tensor,
    counts: torch.Tensor,
    total_tokens: float,
) -> torch.Tensor:
    """One row's share of the global batch's load-balancing loss, mean over MoE layers.

    Per layer ``E/K * sum_e (C_e / N) * (S_e / N)``: ``C_e`` the batch's executed assignments
    of expert ``e`` (``counts``), ``S_e`` the sum of its gate scores over the ``mask``ed tokens,
    ``N`` the batch's masked token count. The batch loss is the sum of the rows' shares, so it
    (and its gradient) does not depend on how samples are packed or split over ranks; with the
    whole batch in one row it equals OLMo-core's loss (``load_balancing_loss``).
    """
    n = max(float(total_tokens), 1.0)
    out = torch.zeros((), device=mask.device)
    with torch.autocast(mask.device.type, enabled=False):
        for layer, (rec, r) in enumerate(zip(records, routers, strict=True)):
            scores = _normalised_scores(rec, r)
            m = mask.to(scores.device).reshape(-1)
            s = scores[m].sum(0)
            assert rec.indices is not None
            top_k = rec.indices.shape[-1]
            freq = (counts[layer].to(s.device, s.dtype)) / n
            out = out + (float(r.num_experts) / top_k) * torch.dot(freq, s) / n
    return out / max(len(records), 1)
