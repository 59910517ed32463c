"""OLMo-core's dropless expert MLP on PyTorch's native grouped matrix product.

``DroplessMoEMLP`` multiplies each expert's tokens through the ``grouped_gemm`` package when
it is importable and otherwise loops over the experts in Python (one host sync and three
small matmuls per expert). OLMo-core's v2 experts carry ``gmm``, a drop-in of the same
signature on ``torch.nn.functional.grouped_mm`` (torch >= 2.10; CUTLASS kernels on Hopper,
a reference implementation elsewhere): one call over all experts, no padding to a capacity.
"""

from __future__ import annotations

import warnings

import torch

if hasattr(torch.nn.functional, "grouped_mm"):
    # OLMo-core warns at each dropless MLP's construction that ``grouped_gemm`` is missing;
    # with torch's grouped_mm serving those MLPs (``use_grouped_mm_experts``) it misleads
    warnings.filterwarnings("ignore", message="Grouped GEMM not available", category=UserWarning)


def grouped_expert_matmul(
    x: torch.Tensor, w: torch.Tensor, batch_sizes: torch.Tensor, trans_b: bool = False
) -> torch.Tensor:
    """``x`` rows grouped by expert (``batch_sizes`` rows each) times each expert's ``w``.

    On a GPU the product runs in bf16, the only dtype of torch's grouped kernels (as
    OLMo-core's ``grouped_gemm`` path casts too); other dtypes fall back to one matmul per
    expert with a host sync (measured: 33,723 fp32 matmuls in one smallmoe step, the step
    35% slower than the capacity MLP). The result comes back in ``x``'s dtype."""
    from olmo_core.nn.moe.v2.routed_experts import gmm

    dtype = torch.bfloat16 if x.is_cuda else x.dtype
    out = gmm(x.to(dtype), w.to(dtype), batch_sizes.to(x.device), trans_b=trans_b)
    return out.to(x.dtype)


def grouped_mm_available() -> bool:
    from olmo_core.nn.moe.v2.routed_experts import use_torch_grouped_mm

    return bool(use_torch_grouped_mm())


def use_grouped_mm_experts(model: torch.nn.Module) -> int:
    """Point every dropless expert MLP of ``model`` at :func:`grouped_expert_matmul`
    (unless ``grouped_gemm`` already serves it); returns how many were switched."""
    from olmo_core.nn.moe.mlp import DroplessMoEMLP

    if not grouped_mm_available():
        return 0
    switched = 0
    for module in model.modules():
        if isinstance(module, DroplessMoEMLP) and module._gmm is None:
            # an instance attribute shadows the class method the forward calls
            module.gmm = torch.compiler.disable(grouped_expert_matmul)  # type: ignore[method-assign]
            switched += 1
    return switched
