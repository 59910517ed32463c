"""Document-isolated attention for packed rows on PyTorch SDPA.

OLMo-core's torch (SDPA) backend rejects intra-document masking (only flash-attn varlen has
it). Packing must work on CPU and on GPUs without flash-attn, so we swap the class of each
SDPA backend for a subclass that turns ``cu_doc_lens`` into a block-diagonal causal mask
(intersected with the layer's sliding window). OLMo-core's RoPE already restarts positions
per document when it receives ``cu_doc_lens``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from olmo_core.nn.attention.backend import TorchAttentionBackend


def document_mask(
    cu_doc_lens: torch.Tensor, batch: int, seq_len: int, window_size: tuple[int, int]
) -> torch.Tensor:
    """Boolean mask ``(batch, 1, T, T)``: causal, same document, inside the sliding window."""
    device = cu_doc_lens.device
    flat = torch.arange(batch * seq_len, device=device, dtype=cu_doc_lens.dtype)
    doc_id = torch.bucketize(flat, cu_doc_lens[1:], right=True).view(batch, seq_len)
    same_doc = doc_id[:, :, None] == doc_id[:, None, :]
    pos = torch.arange(seq_len, device=device)
    rel = pos[:, None] - pos[None, :]  # query minus key
    allowed = rel >= 0
    if window_size != (-1, -1):
        allowed = allowed & (rel <= window_size[0]) & (-rel <= window_size[1])
    return (same_doc & allowed[None]).unsqueeze(1)


class DocMaskedSDPABackend(TorchAttentionBackend):
    """SDPA backend that also accepts ``cu_doc_lens`` (packed, document-isolated rows)."""

    def forward(  # type: ignore[override]
        self,
        qkv: Any,
        cu_doc_lens: torch.Tensor | None = None,
        cu_doc_lens_q: torch.Tensor | None = None,
        cu_doc_lens_k: torch.Tensor | None = None,
        max_doc_len: int | None = None,
        max_doc_len_q: int | None = None,
        max_doc_len_k: int | None = None,
        local_k_slice: slice | None = None,
        kv_cache_manager: Any = None,
        sinks: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if cu_doc_lens is None or self.cp_enabled or sinks is not None:
            return super().forward(
                qkv,
                cu_doc_lens=cu_doc_lens,
                cu_doc_lens_q=cu_doc_lens_q,
                cu_doc_lens_k=cu_doc_lens_k,
                max_doc_len=max_doc_len,
                max_doc_len_q=max_doc_len_q,
                max_doc_len_k=max_doc_len_k,
                local_k_slice=local_k_slice,
                kv_cache_manager=kv_cache_manager,
                sinks=sinks,
            )
        if cu_doc_lens_q is not None or cu_doc_lens_k is not None or kv_cache_manager is not None:
            raise RuntimeError("document masking supports only self-attention without kv cache")
        q, k, v = qkv  # (B, T, H, D)
        batch, seq_len = q.shape[0], q.shape[1]
        mask = document_mask(cu_doc_lens.to(q.device), batch, seq_len, self.window_size)
        n_rep = self.n_heads // self.n_kv_heads
        if n_rep > 1:
            k = k.repeat_interleave(n_rep, dim=2)
            v = v.repeat_interleave(n_rep, dim=2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        att = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=self.dropout_p if self.training else 0.0,
            scale=self.scale,
        )
        return att.transpose(1, 2).contiguous()


def enable_document_masking(model: torch.nn.Module) -> int:
    """Swap every SDPA backend in ``model`` for the document-masking one; returns the count."""
    n = 0
    for module in model.modules():
        if type(module) is TorchAttentionBackend:
            module.__class__ = DocMaskedSDPABackend
            n += 1
    return n
