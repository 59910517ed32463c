"""olmo_hybrid on one GPU: fla's triton kernels against the torch paths CPU runs and CI use.

    python benchmarks/gpu/gdn_parity.py [--out DIR]

Three checks, fp32, printed as a table and written to DIR/gdn_parity.json:

1. kernels: fla's ``chunk_gated_delta_rule`` (qk l2-norm in the kernel, an initial state, the
   final state, packed documents) and its backward against ``runtime.models.gdn_cpu``'s torch
   path (fla's naive reference) on the same GPU tensors;
2. model: OLMo-core's GatedDeltaNet model (fla's kernels for the delta rule, the short
   convolutions and the gated norm) against the same weights on the CPU (torch paths):
   logits and every parameter's gradient;
3. engine: the embedded engine on the GPU (fla's chunked kernel for prefill with the final
   state, the torch recurrence for decode), eager and from CUDA graphs captured lazily
   mid-run, against the GPU model's forward for several concurrent sequences.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

CFG: dict[str, Any] = dict(
    model_type="olmo_hybrid",
    vocab_size=512,
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=4,
    linear_num_key_heads=4,
    linear_num_value_heads=8,
    linear_key_head_dim=32,
    linear_value_head_dim=64,
    rope_parameters={"rope_theta": 10000.0, "rope_type": "default"},
)


def kernels() -> dict[str, float]:
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    from runtime.models.gdn_cpu import chunk_gated_delta_rule_torch

    gen = torch.Generator(device="cuda").manual_seed(0)
    b, t, h, k, v = 2, 300, 4, 64, 128

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device="cuda", generator=gen)

    q, kk, vv = r(b, t, h, k), r(b, t, h, k), r(b, t, h, v)
    g = -torch.rand(b, t, h, device="cuda", generator=gen) * 0.3
    beta = torch.rand(b, t, h, device="cuda", generator=gen) * 2
    init = r(b, h, k, v) * 0.1
    leaves = [x.requires_grad_() for x in (q, kk, vv, g, beta)]
    kw = dict(initial_state=init, output_final_state=True, use_qk_l2norm_in_kernel=True)
    o1, s1 = chunk_gated_delta_rule(*leaves, **kw)
    o2, s2 = chunk_gated_delta_rule_torch(*leaves, **kw)
    dout = r(*o1.shape)
    g1 = torch.autograd.grad((o1 * dout).sum() + s1.sum(), leaves)
    g2 = torch.autograd.grad((o2 * dout).sum() + s2.sum(), leaves)
    cu = torch.tensor([0, 70, 300, 451, 600], device="cuda", dtype=torch.long)
    flat = [x.detach().reshape(1, b * t, *x.shape[2:]) for x in leaves]
    kw2 = dict(output_final_state=True, use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    p1, ps1 = chunk_gated_delta_rule(*flat, **kw2)
    p2, ps2 = chunk_gated_delta_rule_torch(*flat, **kw2)
    return {
        "chunk_out": (o1 - o2).abs().max().item(),
        "chunk_final_state": (s1 - s2).abs().max().item(),
        "chunk_grad": max((a - c).abs().max().item() for a, c in zip(g1, g2, strict=True)),
        "packed_out": (p1 - p2).abs().max().item(),
        "packed_states": (ps1 - ps2).abs().max().item(),
    }


def model_parity() -> tuple[dict[str, float], Any]:
    from runtime.models.gdn_cpu import install_cpu_gdn_fallbacks
    from runtime.models.olmo_hybrid import hybrid_config_to_olmo_core

    install_cpu_gdn_fallbacks()
    config = hybrid_config_to_olmo_core(CFG)
    torch.manual_seed(0)
    cpu = config.build(init_device="cpu")
    cpu.init_weights(device=torch.device("cpu"))
    gpu = config.build(init_device="cpu")
    gpu.load_state_dict(cpu.state_dict())
    gpu = gpu.cuda()
    ids = torch.randint(0, CFG["vocab_size"], (2, 200), generator=torch.Generator().manual_seed(1))
    out_c, out_g = cpu(ids), gpu(ids.cuda())
    out_c.float().logsumexp(-1).mean().backward()
    out_g.float().logsumexp(-1).mean().backward()
    grads_g = dict(gpu.named_parameters())
    grad = max(
        ((p.grad - grads_g[n].grad.cpu()).abs().max() / (p.grad.abs().max() + 1e-12)).item()
        for n, p in cpu.named_parameters()
        if p.grad is not None
    )
    result = {"logits": (out_c - out_g.cpu()).abs().max().item(), "grad_rel": grad}
    gpu.zero_grad(set_to_none=True)
    return result, gpu.eval()


def engine_parity(model: Any) -> dict[str, float]:
    from runtime.engines.embedded.forward import InferenceModel

    gen = torch.Generator().manual_seed(3)
    total, starts = 96, [7, 40, 3, 65]
    result: dict[str, float] = {}
    for mode in ("eager", "cuda_graphs"):
        full = [
            torch.randint(0, CFG["vocab_size"], (total,), generator=gen).tolist() for _ in starts
        ]
        with torch.no_grad():
            refs = [model(torch.tensor([f], device="cuda"))[0] for f in full]
        im = InferenceModel(model, max_slots=8, capacity=128, device="cuda")
        if mode == "cuda_graphs":  # buckets are captured lazily, with sequences mid-decode
            im.enable_cuda_graphs(kv_step=32)
        _, pre, _ = im.prefill_batch(
            [f[:n] for f, n in zip(full, starts, strict=True)], [0, 1, 2, 3], want_all=[True] * 4
        )
        result[f"{mode}_prefill"] = max(
            (pre[i] - refs[i][:n]).abs().max().item() for i, n in enumerate(starts)
        )
        pos, rows, worst = list(starts), [0, 1, 2, 3], 0.0  # rows[slot]: the sequence there
        while rows:
            toks = torch.tensor([full[s][pos[s]] for s in rows], device="cuda")
            logits, _ = im.decode_step(toks, torch.tensor([pos[s] for s in rows], device="cuda"))
            for slot, s in enumerate(rows):
                worst = max(worst, (logits[slot] - refs[s][pos[s]]).abs().max().item())
                pos[s] += 1
            keep = [s for s in rows if pos[s] < total]
            for dst, s in enumerate(keep):  # compaction, as the scheduler does on a finish
                im.move_slots([rows.index(s)], [dst], pos[s])
            rows = keep
        result[f"{mode}_decode"] = worst
    result["graphs_captured"] = float(len(im.graph_keys()))
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("."))
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rows: dict[str, dict[str, float]] = {"kernels": kernels()}
    rows["model"], gpu_model = model_parity()
    rows["engine"] = engine_parity(gpu_model)
    print(f"{'check':<10} {'quantity':<22} {'max |diff|':>12}")
    for group, vals in rows.items():
        for name, val in vals.items():
            print(f"{group:<10} {name:<22} {val:>12.3g}")
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gdn_parity.json").write_text(json.dumps({"meta": meta, **rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
