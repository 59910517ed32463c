"""Pure-torch paths for OLMo-core's GatedDeltaNet layers off the GPU (CPU tests, CPU runs).

OLMo-core's ``GatedDeltaNet`` (the linear-attention layers of ``olmo_hybrid`` checkpoints)
calls flash-linear-attention's triton kernels for the gated delta rule, the short causal
convolutions and the gated RMS norm; triton kernels need a GPU. These fallbacks compute
the same functions in torch: the delta rule is fla's own reference implementation
(``fla.ops.gated_delta_rule.naive``), run once per document when ``cu_seqlens`` packs
several into a row. CUDA tensors keep fla's kernels.

The same functions serve the embedded engine's prefill and decode (``gated_delta_step``
below carries the recurrent state one token at a time).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

_PATCHED = False


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """fla's ``l2norm`` (``use_qk_l2norm_in_kernel``): ``x / sqrt(sum(x^2) + eps)``."""
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def _segments(cu_seqlens: torch.Tensor | None, total: int) -> list[tuple[int, int]]:
    if cu_seqlens is None:
        return [(0, total)]
    bounds = [int(b) for b in cu_seqlens.tolist()]
    return [(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]


def chunk_gated_delta_rule_torch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """fla's ``chunk_gated_delta_rule`` contract (``q/k (B,T,H,K)``, ``v (B,T,H,V)``,
    ``g/beta (B,T,H)``) over fla's naive chunked reference."""
    from fla.ops.gated_delta_rule.naive import naive_chunk_gated_delta_rule

    dtype = v.dtype
    if use_qk_l2norm_in_kernel:
        q, k = l2norm(q.float()), l2norm(k.float())
    if cu_seqlens is None:
        o, state = naive_chunk_gated_delta_rule(
            q, k, v, g, beta, scale=scale, initial_state=initial_state,
            output_final_state=output_final_state,
        )  # fmt: skip
        return o.to(dtype).contiguous(), state
    # packed documents: fla's contract has batch 1 and one state per document
    flat = [t.reshape(1, -1, *t.shape[2:]) for t in (q, k, v, g, beta)]
    outs, states = [], []
    for i, (a, b) in enumerate(_segments(cu_seqlens, flat[0].shape[1])):
        init = initial_state[i : i + 1] if initial_state is not None else None
        o, s = naive_chunk_gated_delta_rule(
            *(t[:, a:b] for t in flat[:3]), flat[3][:, a:b], flat[4][:, a:b], scale=scale,
            initial_state=init, output_final_state=output_final_state,
        )  # fmt: skip
        outs.append(o)
        states.append(s)
    out = torch.cat(outs, dim=1).to(dtype).view(*v.shape[:2], *outs[0].shape[2:])
    final = torch.cat(states) if output_final_state else None  # type: ignore[arg-type]
    return out, final


def gated_delta_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of the gated delta rule for a batch: ``q/k (B,H,K)`` (already
    l2-normalised), ``v (B,H,V)``, ``g/beta (B,H)``, ``state (B,H,K,V)`` in fp32.
    Returns ``(o (B,H,V), new state)``: the recurrence fla's ``fused_recurrent`` kernel runs."""
    scale = q.shape[-1] ** -0.5
    q, k, v = q.float() * scale, k.float(), v.float()
    h = state * g.float().exp()[..., None, None]
    delta = (v - (h * k[..., None]).sum(-2)) * beta.float()[..., None]
    h = h + k[..., None] * delta[..., None, :]
    return (h * q[..., None]).sum(-2), h


def causal_conv1d_torch(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = None,
    cu_seqlens: torch.Tensor | None = None,
    **_: Any,
) -> tuple[torch.Tensor, None]:
    """fla's ``causal_conv1d`` contract: ``x (B,T,C)``, depthwise ``weight (C,W)``."""
    width = weight.shape[-1]

    def conv(seg: torch.Tensor) -> torch.Tensor:  # (B, T, C)
        t = seg.shape[1]
        y = F.conv1d(
            seg.transpose(1, 2).to(weight.dtype), weight.unsqueeze(1), bias,
            padding=width - 1, groups=weight.shape[0],
        )[..., :t]  # fmt: skip
        return y.transpose(1, 2)

    if cu_seqlens is None:
        y = conv(x)
    else:
        flat = x.reshape(1, -1, x.shape[-1])
        y = torch.cat([conv(flat[:, a:b]) for a, b in _segments(cu_seqlens, flat.shape[1])], 1)
        y = y.view_as(x)
    if activation in ("silu", "swish"):
        y = F.silu(y)
    return y.to(x.dtype), None


def rms_norm_gated_torch(
    x: torch.Tensor, g: torch.Tensor, weight: torch.Tensor | None, eps: float, activation: str
) -> torch.Tensor:
    """fla's ``FusedRMSNormGated``: ``rmsnorm(x) * weight * act(g)``, computed in fp32."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.float()
    gf = g.float()
    y = y * (torch.sigmoid(gf) if activation == "sigmoid" else F.silu(gf))
    return y.to(x.dtype)


def _on_gpu(*tensors: Any) -> bool:
    return any(isinstance(t, torch.Tensor) and t.is_cuda for t in tensors)


def _dispatch(original: Callable[..., Any], fallback: Callable[..., Any]) -> Callable[..., Any]:
    def op(*args: Any, **kwargs: Any) -> Any:
        if _on_gpu(*args, *kwargs.values()):
            return original(*args, **kwargs)
        return fallback(*args, **kwargs)

    op.__name__ = getattr(original, "__name__", "op")
    return op


def install_cpu_gdn_fallbacks() -> None:
    """Idempotently route non-CUDA GatedDeltaNet calls to the torch versions above."""
    global _PATCHED
    if _PATCHED:
        return
    from fla.modules import FusedRMSNormGated
    from olmo_core.nn import convolution
    from olmo_core.nn.attention import recurrent

    recurrent.dispatch_chunk_gated_delta_rule = _dispatch(  # type: ignore[assignment]
        recurrent.dispatch_chunk_gated_delta_rule, chunk_gated_delta_rule_torch
    )
    convolution.dispatch_causal_conv1d = _dispatch(  # type: ignore[assignment]
        convolution.dispatch_causal_conv1d, causal_conv1d_torch
    )
    original_norm = FusedRMSNormGated.forward

    def norm_forward(self: Any, x: torch.Tensor, g: torch.Tensor, *args: Any, **kw: Any) -> Any:
        if x.is_cuda or args or kw:
            return original_norm(self, x, g, *args, **kw)
        return rms_norm_gated_torch(x, g, self.weight, self.eps, self.activation)

    FusedRMSNormGated.forward = norm_forward  # type: ignore[method-assign]
    _PATCHED = True


def has_gated_delta_net(model: Any) -> bool:
    """Whether any block of an OLMo-core model mixes with a GatedDeltaNet."""
    blocks = getattr(model, "blocks", None)
    if blocks is None:
        return False
    return any(type(b.attention).__name__ == "GatedDeltaNet" for b in blocks.values())


def install_transformers_cpu_fallbacks() -> None:
    """transformers' ``olmo_hybrid`` takes fla's kernels whenever fla imports, CPU tensors
    too (where triton has no driver); route non-CUDA calls to its own torch reference.
    Used where an exported checkpoint is checked with ``from_pretrained`` on a CPU."""
    from transformers.models.olmo_hybrid import modeling_olmo_hybrid as hf

    for name in ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule"):
        current = getattr(hf, name)
        reference = getattr(current, "__wrapped__", None)
        if reference is None or getattr(current, "_rlc_dispatch", False):
            continue
        op = _dispatch(current, reference)
        op._rlc_dispatch = True  # type: ignore[attr-defined]
        setattr(hf, name, op)
