"""The plan's memory estimate: hand-computed parts for the 1B model at 16K and 32K, the
compiled plan of the GPU example, and the activation/logits model against the bytes that
autograd really saves for backward on a tiny model (CPU)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from compiler.pipeline import compile_spec
from compiler.resolve.builtin_shape import (
    DIGIT_TOKENIZER_VOCAB,
    TEXT_TOKENIZER_VOCAB,
    TOOL_TOKENIZER_VOCAB,
    builtin_info,
    tokenizer_vocab,
)
from compiler.resolve.memory import (
    GIB,
    LOGPROB_CHUNK_ROWS,
    engine_parts,
    trainer_parts,
    trainer_peak,
)
from contract.spec.constants import BUILTIN_MODELS

ROOT = Path(__file__).resolve().parents[2]
ONE_B_SOURCE = "builtin:olmo3-1b?vocab_size=100352"  # the Olmo 3 tokenizer's vocabulary
ONE_B = builtin_info(ONE_B_SOURCE)


def _config(ctx: int, *, recompute: bool = True, device: str = "cuda", **kw: Any) -> dict[str, Any]:
    return {
        "model": {"source": ONE_B_SOURCE, "num_params": ONE_B["params"]},
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
    # blocks' backward: every gradient + one block input (a 16K/32K input of 4 d T bytes is
    # not larger than a block's gradients) + the embedding/head inputs + one rebuilt block
    per_block_grads = (params - 2 * vocab * d) * 4 / layers
    assert ctx * 4 * d <= per_block_grads
    assert p["saved_at_blocks_backward"] == ctx * 4 * d + ctx * 10 * d
    assert p["optimizer_step_temp"] == params * 4  # foreach AdamW's sqrt(v), all at once
    copies = vocab * d * 2
    head = p["activations"] + copies + vocab * d * 4 + 2 * ctx * vocab * 2 + 1024 * vocab * 18
    blocks = params * 4 + copies + p["saved_at_blocks_backward"] + ctx * (52 * d + 8 * f)
    step = params * 8
    assert trainer_peak(p) == params * 12 + max(head, blocks, step)
    # in GiB, the numbers docs/benchmarks.md quotes (the LM head's backward is the peak)
    expect = {16384: (3.062, 2.625, 27.904), 32768: (6.125, 5.25, 36.341)}[ctx]
    assert round(p["logits"] / GIB, 3) == expect[0]
    assert round(p["recompute_block"] / GIB, 3) == expect[1]
    assert round(trainer_peak(p) / GIB, 3) == expect[2]
    assert head > max(blocks, step)
    e = engine_parts(_config(ctx), ONE_B)
    assert e["weights"] == params * 2
    assert e["kv_cache"] == 8 * ctx * layers * 2 * (16 * 128) * 2  # 8 slots x ctx rows, bf16
    assert e["kv_cache"] / GIB == ctx / 1024  # 1 GiB of KV per 1K tokens of 8 slots
    assert e["prefill_transient"] == ctx * (3 * f + 6 * d) * 2  # one whole-context prompt
    assert e["prefill_position_grid"] == ctx * ctx * 8


def test_the_kv_cache_dtype_sizes_the_engines_cache() -> None:
    """An FP8 cache is half the bf16 one; a float32 model's own-dtype cache twice it."""
    ctx = 16384
    base = engine_parts(_config(ctx), ONE_B)["kv_cache"]
    for kv_dtype, model_dtype, ratio in (
        ("fp8_e4m3", "bfloat16", 0.5),
        ("fp8_e5m2", "bfloat16", 0.5),
        ("bf16", "float32", 1.0),
        ("auto", "float32", 2.0),
        ("auto", "bfloat16", 1.0),
    ):
        c = _config(ctx)
        c["inference"]["kv_cache_dtype"] = kv_dtype
        c["model"]["dtype"] = model_dtype
        assert engine_parts(c, ONE_B)["kv_cache"] == base * ratio, (kv_dtype, model_dtype)


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
        'model.source="builtin:olmo3-1b?vocab_size=100352"',
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
        tp["weights_adam"] + tp["activations"] + tp["autocast_weight_copies"] + head, abs=0.01
    )
    beside_engine = m["trainer_gib_per_gpu"] + ep["weights"] + ep["kv_cache"]
    beside_trainer = tp["weights_adam"] + m["engine_gib_per_gpu"]
    assert m["colocated_gib_per_gpu"] == pytest.approx(max(beside_engine, beside_trainer), abs=0.01)


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


def test_builtin_vocab_is_the_tokenizers_unless_overridden() -> None:
    """``builtin:olmo3-1b`` builds with the 704-token builtin tokenizer: 1.077B parameters,
    not the 1.485B listed for a 100,352-token vocabulary."""
    from runtime.models.tokenizer import (
        build_builtin_tokenizer,
        build_digits_tokenizer,
        build_tools_tokenizer,
    )

    assert build_builtin_tokenizer().vocab_size == TEXT_TOKENIZER_VOCAB
    assert build_digits_tokenizer().vocab_size == DIGIT_TOKENIZER_VOCAB
    assert build_tools_tokenizer().vocab_size == TOOL_TOKENIZER_VOCAB
    plain = builtin_info("builtin:olmo3-1b")
    assert plain["vocab"] == 704 and plain["params"] == 1_076_758_528
    assert ONE_B["vocab"] == 100_352 and ONE_B["params"] == 1_484_916_736
    assert builtin_info("/some/checkpoint") == {}


def test_builtin_params_match_the_built_model() -> None:
    """The count the plan derives is the model's own (built on the meta device)."""
    from runtime.models.builtin import builtin_config

    for source in [f"builtin:{n}" for n in BUILTIN_MODELS] + [ONE_B_SOURCE]:
        name = source.removeprefix("builtin:")
        tok = tokenizer_vocab(name.partition("?")[0])
        _, config = builtin_config(name, tok, 0)
        model = config.build(init_device="meta")
        info = builtin_info(source)
        assert sum(p.numel() for p in model.parameters()) == info["params"]
        # the shape the activation model reads, and the routed experts' share
        assert (info["hidden"], info["layers"]) == (config.d_model, config.n_layers), name
        attn = model.blocks["0"].attention
        assert info["kv_heads"] * info["head_dim"] == attn.w_k.out_features, name
        experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
        assert info.get("expert_params", 0) == experts, name


def test_the_plan_shards_like_the_trainer_mesh() -> None:
    """Weights and Adam states per GPU follow the mesh the trainer builds: HSDP across
    trainer nodes splits a parameter over one node's GPUs only; with expert parallelism the
    routed experts are split over the world and the rest over the EP shard only."""
    from compiler.resolve.memory import shard_degree
    from runtime.trainer.parallel import plan_mesh

    for world, nodes, ep in [(1, 1, 1), (8, 1, 1), (8, 1, 2), (16, 2, 1), (16, 2, 8), (32, 4, 16)]:
        assert shard_degree(world, nodes, ep) == plan_mesh(world, nodes, ep).shard

    def weights(sets: list[str]) -> float:
        plan = compile_spec(str(ROOT / "specs" / "examples" / "gpu-moe.toml"), sets).manifest()
        return plan["plan"]["memory"]["trainer_parts_gib"]["weights_adam"] * GIB

    moe = builtin_info("builtin:smallmoe")
    experts, rest = moe["expert_params"], moe["params"] - moe["expert_params"]
    gpus = ["trainer.gpus=8", "inference.gpus=8", "inference.num_engines=8"]
    assert weights(gpus) == pytest.approx(moe["params"] * 12 / 8, rel=1e-3)
    ep2 = weights([*gpus, "trainer.expert_parallel=2"])
    assert ep2 == pytest.approx((experts / 8 + rest / 2) * 12, rel=1e-3)

    dense = compile_spec(
        str(ROOT / "specs" / "examples" / "multinode.toml"),
        ['model.architecture="dense"', "trainer.expert_parallel=1", "trainer.router_replay=false"],
    ).manifest()
    params = dense["config"]["model"]["num_params"]
    got = dense["plan"]["memory"]["trainer_parts_gib"]["weights_adam"] * GIB
    assert got == pytest.approx(params * 12 / 8, rel=1e-3)  # 2 nodes x 8: split over 8


def test_hf_moe_shape_counts_the_experts() -> None:
    from compiler.spec.model_source import hf_shape

    cfg = {
        "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "vocab_size": 100, "intermediate_size": 32, "num_experts": 4,
    }  # fmt: skip
    shape = hf_shape(cfg)
    assert shape["expert_params"] == 2 * 4 * 3 * 64 * 32
    assert shape["expert_params"] < shape["params"]
    assert "expert_params" not in hf_shape({**cfg, "num_experts": 0})


# Measured on one NVIDIA H200, torch 2.11, 2026-12-02/03 (benchmarks/gpu/long_context.py
# --contexts 16384 32768; benchmarks/results/gpu/gpu_long_context-16384-32768.json):
# torch.cuda.max_memory_allocated of builtin:olmo3-1b (704-token vocabulary, 1 sample of
# 1K prompt + (C-1K) response, recompute, bf16 autocast, 8 engine slots of C rows), GiB
GPU_PEAKS = {  # context: (trainer alone, trainer + engine)
    16384: (20.36867618560791, 38.375271797180176),
    32768: (23.13806676864624, 58.377952098846436),
}


@pytest.mark.parametrize("ctx", sorted(GPU_PEAKS))
def test_plan_within_15_percent_of_the_gpu_peaks(ctx: int) -> None:
    prompt = min(1024, ctx // 4)
    sets = [  # what benchmarks/gpu/long_context.py passes to `rlc plan`
        'model.source="builtin:olmo3-1b"',
        f"inference.max_context_length={ctx}",
        f"inference.max_response_length={ctx - prompt}",
        f"inference.max_prompt_length={prompt}",
        f"trainer.packing_max_tokens={ctx}",
        "trainer.activation_recompute=true",
        "inference.max_running_requests=8",
        "inference.server_concurrency=8",
        f"inference.max_total_tokens={8 * ctx}",
    ]
    r = compile_spec(str(ROOT / "specs/examples/gpu-dense.toml"), sets)
    assert r.ok, [x.message for x in r.errors]
    m = r.resolved.plan["memory"]
    trainer, colocated = GPU_PEAKS[ctx]
    assert m["trainer_gib_per_gpu"] == pytest.approx(trainer, rel=0.15)
    assert m["colocated_gib_per_gpu"] == pytest.approx(colocated, rel=0.15)
