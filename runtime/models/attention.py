"""Document-isolated attention for packed rows (``trainer.attention_backend``).

OLMo-core's torch (SDPA) backend rejects intra-document masking (only flash-attn varlen has
it). Packing must work on CPU and on GPUs without flash-attn, so we swap the class of each
attention backend for one that honours ``cu_doc_lens`` (OLMo-core's RoPE already restarts
positions per document when it receives them):

- ``sdpa``: SDPA with a dense ``(B, 1, T, T)`` boolean mask (causal, same document, inside the
  sliding window). Works everywhere; the mask keeps SDPA off its fused kernels.
- ``flex``: FlexAttention with a block mask built from the document ids: fully masked
  128x128 blocks are skipped and no dense mask exists (compiled on CUDA, eager on CPU).
- ``flash``: OLMo-core's flash-attn varlen backend (needs the flash-attn package).
- ``torch``: OLMo-core's plain SDPA backend, no document isolation (packing refuses it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from olmo_core.nn.attention.backend import AttentionBackend, TorchAttentionBackend

from .doc_chunks import DocChunks, causal_window, chunked_attention, plan_doc_chunks

BACKENDS = ("sdpa", "flex", "flash", "torch")


def document_mask(
    cu_doc_lens: torch.Tensor, batch: int, seq_len: int, window_size: tuple[int, int]
) -> torch.Tensor:
    """Boolean mask ``(batch, 1, T, T)``: causal, same document, inside the sliding window."""
    device = cu_doc_lens.device
    flat = torch.arange(batch * seq_len, device=device, dtype=cu_doc_lens.dtype)
    doc_id = torch.bucketize(flat, cu_doc_lens[1:], right=True).view(batch, seq_len)
    same_doc = doc_id[:, :, None] == doc_id[:, None, :]
    pos = torch.arange(seq_len, device=device)
    allowed = causal_window(pos[:, None] - pos[None, :], window_size)
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
        dropout = self.dropout_p if self.training else 0.0
        n_rep = self.n_heads // self.n_kv_heads
        if n_rep > 1:
            k = k.repeat_interleave(n_rep, dim=2)
            v = v.repeat_interleave(n_rep, dim=2)
        mask, plan = _dense_or_chunked(cu_doc_lens, batch, seq_len, self.window_size, q.device)
        if plan is not None:
            return chunked_attention(q, k, v, plan, self.scale, dropout)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        att = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout, scale=self.scale
        )
        return att.transpose(1, 2).contiguous()


# window -> (cu_doc_lens tensor, batch, seq_len, dense mask or chunk plan) of the forward in
# progress: every layer receives the same cu_doc_lens tensor, so one is built per forward
# and window size; a new forward's tensor replaces them (only the latest forward's are kept)
_DOC_MASKS: dict[tuple[int, int], tuple[torch.Tensor, int, int, Any]] = {}


def _dense_or_chunked(
    cu_doc_lens: torch.Tensor,
    batch: int,
    seq_len: int,
    window_size: tuple[int, int],
    device: torch.device,
) -> tuple[torch.Tensor | None, DocChunks | None]:
    """The dense document mask, or (eager only: the plan is data-dependent, and a compiled
    block would recompile per chunk count) the chunk plan where it costs less."""
    if torch.compiler.is_compiling():
        return document_mask(cu_doc_lens.to(device), batch, seq_len, window_size), None
    hit = _DOC_MASKS.get(window_size)
    if hit is not None and hit[0] is cu_doc_lens and hit[1:3] == (batch, seq_len):
        built = hit[3]
    else:
        cu = cu_doc_lens.tolist()
        # chunks cover the documents; positions outside them (none in our packed rows) would
        # have no slot, so such a batch keeps the dense mask
        built = (
            plan_doc_chunks(cu, window_size, device, batch) if cu[-1] == batch * seq_len else None
        )
        if built is None:
            built = document_mask(cu_doc_lens.to(device), batch, seq_len, window_size)
        if any(entry[0] is not cu_doc_lens for entry in _DOC_MASKS.values()):
            _DOC_MASKS.clear()
        _DOC_MASKS[window_size] = (cu_doc_lens, batch, seq_len, built)
    return (None, built) if isinstance(built, DocChunks) else (built, None)


def _doc_ids(cu_doc_lens: torch.Tensor | None, batch: int, seq_len: int, device: Any) -> Any:
    if cu_doc_lens is None:
        return None
    flat = torch.arange(batch * seq_len, device=device, dtype=cu_doc_lens.dtype)
    return torch.bucketize(flat, cu_doc_lens.to(device)[1:], right=True).view(batch, seq_len)


def flex_mask_mod(doc_id: torch.Tensor | None, window_size: tuple[int, int]) -> Callable[..., Any]:
    """FlexAttention ``mask_mod``: causal, same document, inside the sliding window."""
    left = window_size[0] if window_size != (-1, -1) else -1

    def mask_mod(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        ok = q_idx >= kv_idx
        if left >= 0:
            ok = ok & (q_idx - kv_idx <= left)
        if doc_id is not None:
            ok = ok & (doc_id[b, q_idx] == doc_id[b, kv_idx])
        return ok

    return mask_mod


_FLEX: dict[str, Any] = {}
# (cu_doc_lens tensor, batch, seq_len, window) -> block mask; every layer of one forward
# receives the same cu_doc_lens tensor, so the mask is built once per row and window size
_MASKS: dict[tuple[int, int, tuple[int, int]], tuple[Any, Any]] = {}


def _flex_attention(device: torch.device) -> Callable[..., Any]:
    """FlexAttention, compiled on CUDA (the fused kernel); eager elsewhere (reference math)."""
    from torch.nn.attention.flex_attention import flex_attention

    key = device.type
    if key not in _FLEX:
        if key == "cuda":
            from runtime.compile_settings import prepare_compile

            # grad mode x window sizes x static/dynamic rows, for the policy and the
            # reference: past dynamo's default 8 the kernel would silently run unfused
            prepare_compile(64)
        _FLEX[key] = (
            torch.compile(flex_attention, dynamic=None) if key == "cuda" else flex_attention
        )
    return _FLEX[key]


@torch.compiler.disable
def flex_block_mask(
    cu_doc_lens: torch.Tensor | None,
    batch: int,
    seq_len: int,
    window_size: tuple[int, int],
    device: torch.device,
) -> Any:
    from torch.nn.attention.flex_attention import create_block_mask

    _flex_attention(device)  # made here, eagerly: the compiled frames would guard its cache
    key = (batch, seq_len, window_size)
    hit = _MASKS.get(key)
    if hit is not None and hit[0] is cu_doc_lens:
        return hit[1]
    doc_id = _doc_ids(cu_doc_lens, batch, seq_len, device)
    mask = create_block_mask(
        flex_mask_mod(doc_id, window_size), batch, None, seq_len, seq_len, device=str(device)
    )
    _MASKS.clear() if len(_MASKS) > 8 else None
    _MASKS[key] = (cu_doc_lens, mask)
    return mask


class FlexDocAttentionBackend(TorchAttentionBackend):
    """FlexAttention over packed rows: block-sparse document + causal + window mask."""

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
        # FlexAttention has no backward on CPU: training there takes the dense-mask path
        cpu_grad = torch.is_grad_enabled() and not isinstance(qkv, torch.Tensor)
        cpu_grad = cpu_grad and qkv[0].device.type != "cuda" and qkv[0].requires_grad
        if self.cp_enabled or sinks is not None or isinstance(qkv, torch.Tensor) or cpu_grad:
            return DocMaskedSDPABackend.forward(
                self,  # type: ignore[arg-type]
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
        gqa = self.n_heads != self.n_kv_heads
        q, k, v = q.transpose(1, 2), k.transpose(1, 2).to(q.dtype), v.transpose(1, 2).to(q.dtype)
        # one causal document within the window: SDPA's flash path (the length is compared
        # only without documents: under torch.compile a comparison is a guard on the length)
        if cu_doc_lens is None and (
            self.window_size == (-1, -1) or seq_len <= self.window_size[0] + 1
        ):
            att = F.scaled_dot_product_attention(
                q, k, v, is_causal=True, scale=self.scale, enable_gqa=gqa
            )
            return att.transpose(1, 2).contiguous()
        mask = flex_block_mask(cu_doc_lens, batch, seq_len, self.window_size, q.device)
        att = _flex_attention(q.device)(q, k, v, block_mask=mask, scale=self.scale, enable_gqa=gqa)
        return att.transpose(1, 2).contiguous()


def enable_document_masking(model: torch.nn.Module) -> int:
    """Swap every SDPA backend in ``model`` for the document-masking one; returns the count."""
    return set_attention_backend(model, "sdpa")


def set_attention_backend(model: torch.nn.Module, name: str) -> int:
    """Serve ``model``'s attention with backend ``name`` (see module docstring); returns how
    many attention modules were switched. Raises ValueError for an unknown name and
    RuntimeError when the backend cannot run here (flash-attn missing)."""
    if name not in BACKENDS:
        raise ValueError(f"attention backend must be one of {BACKENDS}, not {name!r}")
    target: type[AttentionBackend]
    if name == "sdpa":
        target = DocMaskedSDPABackend
    elif name == "flex":
        target = FlexDocAttentionBackend
    elif name == "torch":
        target = TorchAttentionBackend
    else:
        from olmo_core.nn.attention.backend import FlashAttention2Backend

        try:
            FlashAttention2Backend.assert_supported()
        except RuntimeError as exc:
            raise RuntimeError(
                'trainer.attention_backend = "flash" needs the flash-attn package, which is '
                'not installed here; use "flex" (FlexAttention block masks) instead'
            ) from exc
        target = FlashAttention2Backend
    ours = (TorchAttentionBackend, DocMaskedSDPABackend, FlexDocAttentionBackend)
    n = 0
    for module in model.modules():
        if isinstance(module, AttentionBackend) and type(module) in (*ours, target):
            module.__class__ = target
            n += 1
    return n
