"""The embedded engine's MoE forward against OLMo-core's, on one small MoE, in fp32.

OLMo-core's default MoE (``MoEType.default``) has a capacity factor (1.2 unless set): tokens
past an expert's capacity lose that expert. The engine is dropless. With the capacity at
experts / top_k nothing is dropped and the two agree to fp32 rounding.

    python benchmarks/moe_capacity_gap.py
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from runtime.engines.embedded.forward import InferenceModel
from runtime.models.builtin import _moe_like
from runtime.models.moe_cpu import install_cpu_moe_fallbacks

install_cpu_moe_fallbacks()
for no_drop in (False, True):
    cfg = _moe_like(64, 2, 4, 8, 2, hybrid=False, no_drop=no_drop)(vocab_size=128)
    torch.manual_seed(0)
    model = cfg.build(init_device="cpu")
    model.init_weights(device=torch.device("cpu"))  # seeded: the same weights both times
    model.eval()
    ids = torch.randint(0, 128, (1, 96), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = torch.log_softmax(model(ids).float(), -1)
    im = InferenceModel(model, max_slots=1, capacity=128, device="cpu")
    last, full, ex = im.prefill_batch([ids[0].tolist()], [0], want_all=[True])
    eng = torch.log_softmax(full[0].float(), -1)
    tok = ids[0, 1:]
    lp_ref = ref[0, :-1].gather(1, tok[:, None]).squeeze(1)
    lp_eng = eng[:-1].gather(1, tok[:, None]).squeeze(1)
    gap = (lp_ref - lp_eng).abs()
    print(
        f"no_drop={no_drop}: mean |logprob gap| {float(gap.mean()):.2e}, max {float(gap.max()):.2e}"
    )
