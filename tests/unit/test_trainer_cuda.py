"""GPU checks (skipped without CUDA): MoE kernels vs the CPU fallback, bf16 train step, NCCL."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("olmo_core")

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_moe_gpu_kernels_match_cpu_fallback() -> None:
    from runtime.models import load_model

    cpu = load_model("builtin:tiny-moe", seed=4)
    gpu = load_model("builtin:tiny-moe", seed=4, device="cuda")
    x = torch.randint(0, cpu.tokenizer.vocab_size, (2, 24))
    with torch.no_grad():
        a = cpu.model(x)
        b = gpu.model(x.cuda()).cpu()
    assert torch.allclose(a, b, atol=2e-3), (a - b).abs().max()


def test_packed_equals_unpacked_on_gpu() -> None:
    from runtime.models import load_model
    from runtime.trainer import Sample, pack_samples

    lm = load_model("builtin:small", device="cuda")
    g = torch.Generator().manual_seed(0)
    samples = []
    for p, r in ((30, 90), (5, 7), (64, 40)):
        ids = torch.randint(0, lm.tokenizer.vocab_size, (p + r,), generator=g).tolist()
        samples.append(Sample(ids[:p], ids[p:], advantage=1.0))
    (row,) = pack_samples(samples, 4096)
    dev = torch.device("cuda")
    with torch.no_grad():
        packed = lm.model(row.input_ids[None].to(dev), **row.model_kwargs(dev))[0]
        off = 0
        for s in samples:
            ids = torch.tensor(s.prompt_ids + s.response_ids, device=dev)[None]
            alone = lm.model(ids)[0]
            assert torch.allclose(packed[off : off + ids.shape[1]], alone, atol=1e-3)
            off += ids.shape[1]


@pytest.mark.parametrize("model", ["builtin:tiny", "builtin:tiny-moe"])
def test_bf16_train_step_on_gpu(model: str) -> None:
    from runtime.trainer import Sample, Trainer, TrainerConfig

    tr = Trainer(TrainerConfig(model_source=model, device="cuda", lr=1e-3))
    assert tr.dist.backend == "nccl" and tr.autocast_dtype == torch.bfloat16
    assert next(tr.model.parameters()).dtype == torch.float32  # fp32 master weights
    tok = tr.loaded.tokenizer
    samples = [
        Sample(tok.encode(f"{i}+1="), [tok.eos_token_id], advantage=1.0 - i % 2) for i in range(8)
    ]
    before = tr.publication_checksum()
    m = tr.train_step(samples)
    assert m["grad_norm"] > 0 and tr.publication_checksum() != before
    lp = tr.compute_logprobs(samples)
    assert all(t.shape == (1,) for t in lp)
