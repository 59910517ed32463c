"""The dropless expert MLP on torch's grouped matrix product computes what OLMo-core's
capacity MLP computes at a capacity that drops nothing: outputs and every gradient."""

from __future__ import annotations

import torch
from olmo_core.nn.moe.mlp import DroplessMoEMLP

from runtime.models.builtin import builtin_config
from runtime.models.loader import load_model
from runtime.models.moe_grouped import grouped_expert_matmul, use_grouped_mm_experts


def _pair(seed: int = 0) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The same ``tiny-moe`` weights in the dropless (grouped) and the capacity layout."""
    _, grouped_cfg = builtin_config("tiny-moe", 64, seed)
    _, capacity_cfg = builtin_config("tiny-moe?dropless=0", 64, seed)
    grouped = grouped_cfg.build(init_device="cpu")
    grouped.init_weights(device=torch.device("cpu"))
    capacity = capacity_cfg.build(init_device="cpu")
    state = dict(grouped.state_dict())
    for name, module in grouped.named_modules():
        if isinstance(module, DroplessMoEMLP):  # (E*h, d) -> the capacity MLP's (E*d, h)
            e, h = module.num_experts, module.hidden_size
            for w in ("w1", "w3"):
                state[f"{name}.{w}"] = state[f"{name}.{w}"].view(e, h, -1).transpose(1, 2)
                state[f"{name}.{w}"] = state[f"{name}.{w}"].reshape(-1, h)
    capacity.load_state_dict(state, strict=True)
    assert use_grouped_mm_experts(grouped) == 2
    return grouped, capacity


def test_grouped_expert_matmul_matches_a_loop_over_experts() -> None:
    torch.manual_seed(0)
    x, w = torch.randn(10, 8), torch.randn(3, 4, 8)
    sizes = torch.tensor([3, 0, 7])
    loop = torch.cat([x[:3] @ w[0].t(), x[3:10] @ w[2].t()])
    torch.testing.assert_close(grouped_expert_matmul(x, w, sizes, trans_b=True), loop)


def test_grouped_dropless_mlp_equals_capacity_mlp_outputs_and_grads() -> None:
    from runtime.models.moe_cpu import install_cpu_moe_fallbacks

    install_cpu_moe_fallbacks()
    grouped, capacity = _pair()
    tokens = torch.randint(0, 64, (3, 17), generator=torch.Generator().manual_seed(1))
    outs = []
    for model in (grouped, capacity):
        logits = model(tokens)
        (logits.float().square().mean()).backward()
        outs.append(logits)
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-5, atol=1e-5)
    grads_capacity = dict(capacity.named_parameters())
    for name, p in grouped.named_parameters():
        q = grads_capacity[name]
        g, h = p.grad, q.grad
        assert g is not None and h is not None, name
        if g.shape != h.shape:  # expert w1/w3 (E*h, d): compare in the capacity (E*d, h)
            g = g.view(4, h.shape[-1], -1).transpose(1, 2).reshape(h.shape)
        torch.testing.assert_close(g, h, rtol=1e-4, atol=1e-6, msg=name)


def test_loaded_builtin_moe_runs_the_grouped_product() -> None:
    loaded = load_model("builtin:tiny-moe", seed=3)
    mlps = [m for m in loaded.model.modules() if isinstance(m, DroplessMoEMLP)]
    assert mlps and all("gmm" in vars(m) for m in mlps)
