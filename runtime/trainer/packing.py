"""Document-isolated sequence packing of samples into rows (microbatch = one row).

A row concatenates several samples; ``doc_lens`` tells the model where each one starts so
attention is block-diagonal and RoPE positions restart (see runtime.models.attention).
Position ``t`` of a document predicts token ``t+1`` of the same document; only positions
that predict response tokens carry loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    def model_kwargs(self, device: torch.device) -> dict[str, object]:
        """Forward kwargs for OLMo-core: doc masking only when the row holds >1 document."""
        if len(self.doc_lens) <= 1:
            return {}
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


def build_row(samples: Sequence[Sample], indices: Sequence[int]) -> PackedRow:
    ids: list[torch.Tensor] = []
    targets, mask, adv, rollout, old, sidx = [], [], [], [], [], []
    doc_lens: list[int] = []
    for i in indices:
        s = samples[i]
        p, r = len(s.prompt_ids), len(s.response_ids)
        n = p + r
        doc = torch.tensor(list(s.prompt_ids) + list(s.response_ids), dtype=torch.long)
        ids.append(doc)
        doc_lens.append(n)
        tgt = torch.full((n,), IGNORE, dtype=torch.long)
        m = torch.zeros(n)
        a = torch.zeros(n)
        rl = torch.full((n,), float("nan"))
        ol = torch.full((n,), float("nan"))
        si = torch.full((n,), -1, dtype=torch.long)
        if r:
            span = slice(p - 1, n - 1)
            tgt[span] = doc[p:]
            resp_mask = torch.ones(r) if s.loss_mask is None else torch.tensor(s.loss_mask).float()
            m[span] = resp_mask
            a[span] = float(s.advantage)
            rl[span] = _nan_or(s.rollout_logprobs, r)
            ol[span] = _nan_or(s.old_logprobs, r)
            si[span] = i
        targets.append(tgt)
        mask.append(m)
        adv.append(a)
        rollout.append(rl)
        old.append(ol)
        sidx.append(si)
    return PackedRow(
        input_ids=torch.cat(ids),
        targets=torch.cat(targets),
        loss_mask=torch.cat(mask),
        advantages=torch.cat(adv),
        rollout_logprobs=torch.cat(rollout),
        old_logprobs=torch.cat(old),
        sample_index=torch.cat(sidx),
        doc_lens=doc_lens,
        samples=list(indices),
    )


def pack_samples(samples: Sequence[Sample], max_tokens: int | None) -> list[PackedRow]:
    """Pack samples into document-isolated rows (``None`` = one sample per row)."""
    plan = plan_rows([s.num_tokens for s in samples], max_tokens)
    return [build_row(samples, idx) for idx in plan]
