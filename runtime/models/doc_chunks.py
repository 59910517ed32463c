"""Attention over packed rows of short documents, chunk by chunk instead of row by row.

A packed row of ``T`` tokens under the dense document mask costs ``T x T`` scores per head,
although each token attends only inside its own document. When the documents are short
(the quickstart's are six tokens; GSM8K's a few hundred in a row of thousands), whole
consecutive documents are grouped into chunks of at most ``chunk_tokens`` tokens (a longer
document is a chunk of its own), the chunks are gathered into a padded batch, and SDPA runs
over ``chunks x C x C`` scores with the same mask inside each chunk: causal, same document,
inside the sliding window. The result is the same attention, up to float rounding, because
no document spans two chunks. The plan is built once per forward on the host (every layer
receives the same ``cu_doc_lens`` tensor) and is reused by every layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Grouping target: chunks of up to this many tokens. Measured on the CPU update
# (benchmarks/trainer_step.py --doc-chunk-tokens, docs/benchmarks.md): fastest of 64-512 on
# the quickstart's six-token documents; with 384-token documents each is its own chunk
# anyway, and every size was within 13% of the best.
CHUNK_TOKENS = 128
# Chunked attention only where it saves at least this factor of the dense scores: near the
# dense cost the gathers and the padded batch are not worth it.
MIN_SAVING = 2.0


@dataclass(frozen=True)
class DocChunks:
    """How a flattened ``(B*T)`` row maps to a padded ``(chunks, C)`` batch and back."""

    gather: torch.Tensor  # (chunks*C,) long: the flattened position each chunk slot reads
    scatter: torch.Tensor  # (B*T,) long: the chunk slot that holds each flattened position
    mask: torch.Tensor  # (chunks, 1, C, C) bool: causal, same document, window; pads: self
    chunks: int
    chunk_len: int


def causal_window(rel: torch.Tensor, window_size: tuple[int, int]) -> torch.Tensor:
    """Which (query, key) pairs attend, by ``rel`` = query position minus key position:
    causal, and inside OLMo-core's sliding window ``(left, right)`` (``(-1, -1)``: none)."""
    allowed = rel >= 0
    if window_size != (-1, -1):
        allowed = allowed & (rel <= window_size[0]) & (-rel <= window_size[1])
    return allowed


def chunk_documents(doc_lens: list[int], chunk_tokens: int) -> list[list[int]]:
    """Group consecutive document lengths into chunks of at most ``chunk_tokens`` tokens; a
    longer document is a chunk of its own (never split: attention must see all of it)."""
    chunks: list[list[int]] = []
    size = 0
    for n in doc_lens:
        if chunks and size + n <= chunk_tokens:
            chunks[-1].append(n)
            size += n
        else:
            chunks.append([n])
            size = n
    return chunks


def plan_doc_chunks(
    cu_doc_lens: list[int],
    window_size: tuple[int, int],
    device: torch.device,
    rows: int,
    chunk_tokens: int | None = None,
) -> DocChunks | None:
    """The chunk plan for a packed batch with cumulative document lengths ``cu_doc_lens``
    (over the flattened ``rows x T`` tokens), or None when the dense mask costs less than
    ``MIN_SAVING`` times the chunked one."""
    total = cu_doc_lens[-1]
    doc_lens = [b - a for a, b in zip(cu_doc_lens, cu_doc_lens[1:], strict=False) if b > a]
    groups = chunk_documents(doc_lens, CHUNK_TOKENS if chunk_tokens is None else chunk_tokens)
    chunk_len = max(sum(g) for g in groups)
    seq_len = total // max(rows, 1)
    if rows * seq_len * seq_len < MIN_SAVING * len(groups) * chunk_len * chunk_len:
        return None
    lens = torch.tensor(doc_lens, dtype=torch.long)
    doc_chunk = torch.repeat_interleave(
        torch.arange(len(groups)), torch.tensor([len(g) for g in groups])
    )
    sizes = torch.tensor([sum(g) for g in groups], dtype=torch.long)
    flat = torch.arange(total)
    doc_of = torch.repeat_interleave(torch.arange(len(doc_lens)), lens)
    local_of = flat - torch.repeat_interleave(torch.cumsum(lens, 0) - lens, lens)
    chunk_of = doc_chunk[doc_of]
    scatter = chunk_of * chunk_len + flat - (torch.cumsum(sizes, 0) - sizes)[chunk_of]
    gather = torch.zeros(len(groups) * chunk_len, dtype=torch.long)
    doc = torch.full((len(groups) * chunk_len,), -1, dtype=torch.long)
    local = torch.zeros(len(groups) * chunk_len, dtype=torch.long)
    gather[scatter], doc[scatter], local[scatter] = flat, doc_of, local_of
    doc, local = doc.view(len(groups), chunk_len), local.view(len(groups), chunk_len)
    rel = local[:, :, None] - local[:, None, :]  # query minus key, inside one document
    allowed = (doc[:, :, None] == doc[:, None, :]) & (doc[:, :, None] >= 0)
    allowed &= causal_window(rel, window_size)
    # a padding slot attends to itself alone: no row of the mask is empty (SDPA would give
    # NaN), and nothing real attends to it; its output is never read back
    allowed |= torch.eye(chunk_len, dtype=torch.bool)[None] & (doc[:, :, None] < 0)
    return DocChunks(
        gather=gather.to(device),
        scatter=scatter.to(device),
        mask=allowed.unsqueeze(1).to(device),
        chunks=len(groups),
        chunk_len=chunk_len,
    )


def chunked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    plan: DocChunks,
    scale: float | None,
    dropout_p: float,
) -> torch.Tensor:
    """SDPA over ``plan``'s chunks: ``q, k, v`` and the result are ``(B, T, H, D)``
    (``k``/``v`` already repeated to ``q``'s heads)."""
    batch, seq_len, heads, dim = q.shape

    def chunked(t: torch.Tensor) -> torch.Tensor:
        flat = t.reshape(batch * seq_len, t.shape[2], dim)
        rows = flat.index_select(0, plan.gather)
        return rows.view(plan.chunks, plan.chunk_len, t.shape[2], dim).transpose(1, 2)

    att = torch.nn.functional.scaled_dot_product_attention(
        chunked(q), chunked(k), chunked(v), attn_mask=plan.mask, dropout_p=dropout_p, scale=scale
    )
    slots = att.transpose(1, 2).reshape(plan.chunks * plan.chunk_len, heads, dim)
    return slots.index_select(0, plan.scatter).view(batch, seq_len, heads, dim)
