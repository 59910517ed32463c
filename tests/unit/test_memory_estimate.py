"""The plan's memory estimate: hand-computed parts for the 1B model at 16K and 32K, the
compiled plan of the GPU example, and the activation/logits model against the bytes that
autograd really saves for backward on a tiny model (CPU)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from compiler.memory import GIB, LOGPROB_CHUNK_ROWS, engine_parts, trainer_parts, trainer_peak
from compiler.pipeline import compile_spec
from compiler.spec.constants import BUILTIN_MODELS

ROOT = Path(__file__).resolve().parents[2]
ONE_B = BUILTIN_MODELS["olmo3-1b"]


def _config(ctx: int, *, recompute: bool = True, device: str = "cuda", **kw: Any) -> dict[str, Any]:
    return {
        "model": {"source": "builtin:olmo3-1b", "num_params": ONE_B["params"]},
        "trainer": {
            "packing_max_tokens": ctx,
            "activation_recompute": recompute,
            "device": device,
            "fp32_lm_head": False,
            "attention_backend": "flex",
            **kw,
        },
        "optimizer": {"kl_coef": 0.0},
        "inference": {
            "max_context_length": ctx,
            "max_running_requests": 8,
            "max_total_tokens": 8 * ctx,
            "tensor_parallel": 1,
            "engine": "embedded",
        },
    }


@pytest.mark.parametrize("ctx", [16384, 32768])
def test_one_b_parts_by_hand(ctx: int) -> None:
    """Olmo 3 1B: 16 layers, d 2048, MLP 8192, 16 KV heads x 128, vocab 100,352."""
    params, layers, d, f, vocab = 1_484_916_736, 16, 2048, 8192, 100_352
    p = trainer_parts(_config(ctx), ONE_B, world=1)
    assert p["weights_adam"] == params * 12  # fp32 weights + Adam m, v
    assert p["grads"] == params * 4
    assert p["activations"] == layers * ctx * 4 * d + ctx * 10 * d  # recompute: block inputs
    assert p["autocast_weight_copies"] == vocab * d * 2  # only the LM head's under recompute
    assert p["head_grad"] == vocab * d * 4
    assert p["logits"] == p["logits_grad"] == ctx * vocab * 2  # bf16 logits and gradient
    assert p["logprob_chunks"] == 1024 * vocab * (4 * 4 + 2)
    assert p["recompute_block"] == ctx * (52 * d + 8 * f)
    head = vocab * d * 4 + 2 * ctx * vocab * 2 + 1024 * vocab * 18
    blocks = params * 4 + ctx * (52 * d + 8 * f)
    resident = params * 12 + p["activations"] + vocab * d * 2
    assert trainer_peak(p) == resident + max(head, blocks)
    # in GiB, the numbers docs/benchmarks.md quotes (the LM head's backward is the peak)
    expect = {16384: (3.062, 2.625, 27.904), 32768: (6.125, 5.25, 36.341)}[ctx]
    assert round(p["logits"] / GIB, 3) == expect[0]
    assert round(p["recompute_block"] / GIB, 3) == expect[1]
    assert round(trainer_peak(p) / GIB, 3) == expect[2]
    assert head > blocks
    e = engine_parts(_config(ctx), ONE_B)
    assert e["weights"] == params * 2
    assert e["kv_cache"] == 8 * ctx * layers * 2 * (16 * 128) * 2  # 8 slots x ctx rows, bf16
    assert e["kv_cache"] / GIB == ctx / 1024  # 1 GiB of KV per 1K tokens of 8 slots


def test_no_recompute_keeps_every_block() -> None:
    d, f, ctx = 2048, 8192, 16384
    p = trainer_parts(_config(ctx, recompute=False), ONE_B, world=4)
    assert p["activations"] == 16 * ctx * (52 * d + 8 * f) + ctx * 10 * d
    assert p["recompute_block"] == 0
    assert p["weights_adam"] == ONE_B["params"] * 3  # type: ignore[operator]
    # every matmul weight's bf16 copy is kept for backward (the embedding table is not)
    assert p["autocast_weight_copies"] == 2 * (ONE_B["params"] - 100_352 * d)  # type: ignore[operator]


def test_chunk_rows_match_the_trainer() -> None:
    from runtime.trainer.logprobs import CHUNK_ROWS

    assert LOGPROB_CHUNK_ROWS == CHUNK_ROWS


def test_plan_prints_parts_at_32k() -> None:
    sets = [
        "inference.max_context_length=32768",
        "inference.max_response_length=31744",
        "inference.max_prompt_length=1024",
        "trainer.packing_max_tokens=32768",
        "inference.max_running_requests=8",
        "inference.server_concurrency=8",
        "inference.max_total_tokens=262144",
    ]
    r = compile_spec(str(ROOT / "specs/examples/gpu-dense.toml"), sets)
    assert r.ok, [x.message for x in r.errors]
    m = r.resolved.plan["memory"]
    tp, ep = m["trainer_parts_gib"], m["engine_parts_gib"]
    assert tp["logits"] == tp["logits_grad"] == 6.125 and ep["kv_cache"] == 32.0
    head = tp["head_grad"] + tp["logits"] + tp["logits_grad"] + tp["logprob_chunks"]
    assert m["trainer_gib_per_gpu"] == pytest.approx(
        tp["weights_adam"]
        + tp["activations"]
        + tp["autocast_weight_copies"]
        + max(head, tp["grads"] + tp["recompute_block"]),
        abs=0.01,
    )
    assert m["colocated_gib_per_gpu"] == pytest.approx(
        m["trainer_gib_per_gpu"] + m["engine_gib_per_gpu"], abs=0.01
    )


def _saved_bytes(autocast: bool, tokens: int) -> dict[str, int]:
    """Bytes autograd saves for backward in the trainer's forward + log-probs, by kind."""
    from runtime.trainer import Sample, Trainer, TrainerConfig

    tr = Trainer(
        TrainerConfig(
            model_source="builtin:tiny",
            device="cpu",
            packing_max_tokens=tokens,
            bf16_autocast=autocast,
        )
    )
    vocab = int(tr.model.embeddings.weight.shape[0])
    ids = torch.randint(1, vocab, (tokens,), generator=torch.Generator().manual_seed(0)).tolist()
    prompt = tokens // 4
    s = Sample(ids[:prompt], ids[prompt:], 1.0, rollout_logprobs=[-1.0] * (tokens - prompt))
    seen: dict[int, tuple[int, tuple[int, ...]]] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        seen[t.untyped_storage().data_ptr()] = (t.untyped_storage().nbytes(), tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        tr._forward_selected(tr.model, tr._rows([s])[0], want_entropy=False)
    out = {"activations": 0, "logits": 0, "weights": 0}
    for nbytes, shape in seen.values():
        if shape[-2:] == (tokens, tokens):
            continue  # the CPU's dense SDPA mask; FlexAttention on the GPU keeps none
        if shape[-1] == vocab and tokens in shape:
            out["logits"] += nbytes
        elif tokens in shape:
            out["activations"] += nbytes
        elif len(shape) == 2:  # a weight matrix (its bf16 copy under autocast)
            out["weights"] += nbytes
    return out


@pytest.mark.parametrize("autocast", [True, False])
def test_estimate_matches_saved_tensors(autocast: bool) -> None:
    """bf16 autocast is the GPU trainer's precision, fp32 the CPU's."""
    tokens = 512
    c = _config(tokens, recompute=False, device="cuda" if autocast else "cpu")
    c["model"] = {"source": "builtin:tiny", "num_params": BUILTIN_MODELS["tiny"]["params"]}
    est = trainer_parts(c, BUILTIN_MODELS["tiny"], world=1)
    got = _saved_bytes(autocast, tokens)
    assert got["logits"] == est["logits"]
    assert got["activations"] == pytest.approx(est["activations"], rel=0.1)
    if autocast:  # fp32 keeps the parameters themselves (not extra memory)
        assert got["weights"] == pytest.approx(est["autocast_weight_copies"], rel=0.1)


def test_kl_reference_is_sharded_like_the_policy() -> None:
    cfg = _config(4096)
    cfg["optimizer"] = {"kl_coef": 0.1}
    for world in (1, 4):
        p = trainer_parts(cfg, ONE_B, world=world)
        assert p["reference_model"] == ONE_B["params"] * 4 / world
