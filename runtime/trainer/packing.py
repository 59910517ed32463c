"""Document-isolated sequence packing of samples into rows (microbatch = one row).

A row concatenates several samples; ``doc_lens`` tells the model where each one starts so
attention is block-diagonal and RoPE positions restart (see runtime.models.attention).
Position ``t`` of a document predicts token ``t+1`` of the same document; only positions
that predict response tokens carry loss. Recorded MoE routings (router replay) are laid out
at the same packed positions: a document's recorded row ``j`` is token ``j``'s routing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .types import Sample

IGNORE = -100


@dataclass
class PackedRow:
    input_ids: torch.Tensor  # (T,) long
    targets: torch.Tensor  # (T,) long, IGNORE where no response token is predicted
    loss_mask: torch.Tensor  # (T,) float
    advantages: torch.Tensor  # (T,) float
    rollout_logprobs: torch.Tensor  # (T,) float, NaN where unknown
    old_logprobs: torch.Tensor  # (T,) float, NaN where not pinned
    sample_index: torch.Tensor  # (T,) long, -1 where no target
    doc_lens: list[int]
    samples: list[int]  # indices into the input list, in row order
    response_mask: torch.Tensor | None = None  # (T,) bool, True at response tokens
    routed_experts: torch.Tensor | None = None  # (T, moe_layers, top_k) long, replay ids
    replay_mask: torch.Tensor | None = None  # (T,) bool, True where a routing was recorded
    pad_tokens: int = 0  # trailing padding of a static row (its own document, no loss)
    # on-policy distillation: (T,) float teacher logprobs of the targets, NaN where unknown;
    # None when no sample of the row was scored by a teacher
    teacher_logprobs: torch.Tensor | None = None

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def real_tokens(self) -> int:
        """Tokens of the packed samples (the row without its static padding)."""
        return self.num_tokens - self.pad_tokens

    def model_kwargs(self, device: torch.device) -> dict[str, object]:
        """Forward kwargs for OLMo-core: document masking, for one document too, so every
        row takes the same forward (a compiled model keeps one variant; without the masking
        arguments OLMo-core's own attention also fixes the row length in the compiled
        graph)."""
        return {
            "doc_lens": torch.tensor([self.doc_lens], dtype=torch.int32, device=device),
            "max_doc_lens": [max(self.doc_lens)],
        }


def plan_rows(lengths: Sequence[int], max_tokens: int | None) -> list[list[int]]:
    """First-fit packing of sample indices into rows of at most ``max_tokens`` tokens.

    ``max_tokens=None`` means no packing (one sample per row). A sample longer than
    ``max_tokens`` gets a row of its own rather than being truncated.
    """
    if max_tokens is None:
        return [[i] for i in range(len(lengths))]
    rows: list[list[int]] = []
    room: list[int] = []
    for i, n in enumerate(lengths):
        for r, free in enumerate(room):
            if n <= free:
                rows[r].append(i)
                room[r] -= n
                break
        else:
            rows.append([i])
            room.append(max(max_tokens - n, 0))
    return rows


def _nan_or(values: list[float] | None, n: int) -> torch.Tensor:
    if values is None:
        return torch.full((n,), float("nan"))
    return torch.tensor(values, dtype=torch.float32)


def _routed_row(
    docs: Sequence[tuple[int, torch.Tensor | None]],
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Concatenate per-document recorded routings ``(m, L, K)`` at the packed positions.

    Engines record ``tokens - 1`` rows (the last sampled token is never run through the
    model); positions without a record route freely (``replay_mask`` False).
    """
    shapes = {tuple(r.shape[1:]) for _, r in docs if r is not None}
    if not shapes:
        return None, None
    if len(shapes) > 1:
        raise ValueError(f"routed_experts of one batch have different shapes: {sorted(shapes)}")
    (lk,) = shapes
    ids, keep = [], []
    for n, r in docs:
        block = torch.zeros((n, *lk), dtype=torch.long)
        m = torch.zeros(n, dtype=torch.bool)
        if r is not None:
            c = min(n, int(r.shape[0]))
            block[:c] = r[:c].long()
            m[:c] = True
        ids.append(block)
        keep.append(m)
    return torch.cat(ids), torch.cat(keep)


def build_row(
    samples: Sequence[Sample],
    indices: Sequence[int],
    routed: Sequence[torch.Tensor | None] | None = None,
) -> PackedRow:
    """One packed row: every field is filled in place in one flat array (a handful of
    slice writes per sample, not a dozen small tensors per sample and a concatenation:
    44 ms -> a few ms for the quickstart's 1,024 six-token samples)."""
    doc_lens = [len(samples[i].prompt_ids) + len(samples[i].response_ids) for i in indices]
    total = sum(doc_lens)
    ids = np.empty(total, dtype=np.int64)
    targets = np.full(total, IGNORE, dtype=np.int64)
    mask = np.zeros(total, dtype=np.float32)
    adv = np.zeros(total, dtype=np.float32)
    rollout = np.full(total, np.nan, dtype=np.float32)
    old = np.full(total, np.nan, dtype=np.float32)
    sidx = np.full(total, -1, dtype=np.int64)
    resp = np.zeros(total, dtype=np.bool_)
    start = 0
    for i, n in zip(indices, doc_lens, strict=True):
        s = samples[i]
        p = len(s.prompt_ids)
        ids[start : start + p] = s.prompt_ids
        ids[start + p : start + n] = s.response_ids
        if n > p:
            resp[start + p : start + n] = True
            span = slice(start + p - 1, start + n - 1)
            targets[span] = ids[start + p : start + n]
            mask[span] = 1.0 if s.loss_mask is None else s.loss_mask
            adv[span] = float(s.advantage)
            if s.rollout_logprobs is not None:
                rollout[span] = s.rollout_logprobs
            if s.old_logprobs is not None:
                old[span] = s.old_logprobs
            sidx[span] = i
        start += n
    teacher: torch.Tensor | None = None
    if any(samples[i].teacher_logprobs is not None for i in indices):
        teacher = torch.cat([_teacher_doc(samples[i]) for i in indices])
    routed_ids, replay_mask = _routed_row(
        [(n, routed[i]) for i, n in zip(indices, doc_lens, strict=True)]
        if routed is not None
        else []
    )
    return PackedRow(
        input_ids=torch.from_numpy(ids),
        targets=torch.from_numpy(targets),
        loss_mask=torch.from_numpy(mask),
        advantages=torch.from_numpy(adv),
        rollout_logprobs=torch.from_numpy(rollout),
        old_logprobs=torch.from_numpy(old),
        sample_index=torch.from_numpy(sidx),
        doc_lens=doc_lens,
        samples=list(indices),
        response_mask=torch.from_numpy(resp),
        routed_experts=routed_ids,
        replay_mask=replay_mask,
        teacher_logprobs=teacher,
    )


def _teacher_doc(s: Sample) -> torch.Tensor:
    """One document's teacher logprobs at the positions that predict its response tokens."""
    p, r = len(s.prompt_ids), len(s.response_ids)
    out = torch.full((p + r,), float("nan"))
    if r:
        out[p - 1 : p + r - 1] = _nan_or(s.teacher_logprobs, r)
    return out


def pack_samples(
    samples: Sequence[Sample],
    max_tokens: int | None,
    routed: Sequence[torch.Tensor | None] | None = None,
) -> list[PackedRow]:
    """Pack samples into document-isolated rows (``None`` = one sample per row).

    ``routed``: optional per-sample recorded routings ``(tokens', moe_layers, top_k)`` (see
    ``runtime.trainer.replay.as_routed_experts``), laid out along the packed positions.
    """
    if routed is not None and len(routed) != len(samples):
        raise ValueError(f"{len(routed)} routings for {len(samples)} samples")
    plan = plan_rows([s.num_tokens for s in samples], max_tokens)
    return [build_row(samples, idx, routed) for idx in plan]


def pad_row(row: PackedRow, length: int) -> PackedRow:
    """``row`` padded to exactly ``length`` tokens (``trainer.row_specialization = "static"``).

    Why: one row shape for every step lets a compiled trainer step keep one graph. The
    padding is a document of its own (document masking keeps it out of the samples'
    attention; it sits after them, so causal attention does too), predicts nothing
    (``IGNORE`` targets, zero loss weight) and is left out of router losses
    (``real_tokens``). A row already longer than ``length`` (a sample beyond the planned
    row length) is returned as it is.
    """
    pad = length - row.num_tokens
    if pad <= 0:
        return row

    def extend(t: torch.Tensor, value: float | int | bool) -> torch.Tensor:
        return torch.cat([t, torch.full((pad, *t.shape[1:]), value, dtype=t.dtype)])

    return PackedRow(
        input_ids=extend(row.input_ids, 0),
        targets=extend(row.targets, IGNORE),
        loss_mask=extend(row.loss_mask, 0.0),
        advantages=extend(row.advantages, 0.0),
        rollout_logprobs=extend(row.rollout_logprobs, float("nan")),
        old_logprobs=extend(row.old_logprobs, float("nan")),
        sample_index=extend(row.sample_index, -1),
        doc_lens=[*row.doc_lens, pad],
        samples=list(row.samples),
        response_mask=None if row.response_mask is None else extend(row.response_mask, False),
        routed_experts=None if row.routed_experts is None else extend(row.routed_experts, 0),
        replay_mask=None if row.replay_mask is None else extend(row.replay_mask, False),
        pad_tokens=row.pad_tokens + pad,
        teacher_logprobs=None
        if row.teacher_logprobs is None
        else extend(row.teacher_logprobs, float("nan")),
    )
