"""load_model sources, seeding, weights files and checksums, MoE on CPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("olmo_core")

from runtime.models import (  # noqa: E402
    ModelLoadError,
    load_model,
    load_safetensors,
    save_native,
    save_safetensors,
    state_checksum,
)


def _refuse(*args, **kwargs):
    if args and getattr(args[0], "is_meta", False):
        return args[0]  # a meta tensor (the model's skeleton) has no values to fill
    raise AssertionError("a weight was random-initialised while loading saved weights")


@pytest.fixture(scope="module")
def tiny():
    return load_model("builtin:tiny", seed=3)


def test_builtin_tiny_shape(tiny) -> None:
    assert tiny.family == "dense"
    assert tiny.config.vocab_size == tiny.tokenizer.vocab_size
    assert tiny.config.d_model == 64 and tiny.config.n_layers == 2
    x = torch.randint(0, tiny.tokenizer.vocab_size, (1, 10))
    with torch.no_grad():
        assert tiny.model(x).shape == (1, 10, tiny.tokenizer.vocab_size)


def test_seeded_init_is_deterministic(tiny) -> None:
    again = load_model("builtin:tiny", seed=3)
    other = load_model("builtin:tiny", seed=4)
    c = state_checksum(tiny.model.state_dict())
    assert state_checksum(again.model.state_dict()) == c
    assert state_checksum(other.model.state_dict()) != c


def test_moe_seeded_init_is_deterministic() -> None:
    # OLMo-core draws MoE shared-MLP init from the global RNG; load_model must pin it
    torch.manual_seed(1)
    a = load_model("builtin:tiny-moe", seed=4)
    b = load_model("builtin:tiny-moe", seed=4)
    assert state_checksum(a.model.state_dict()) == state_checksum(b.model.state_dict())


def test_builtin_overrides_and_errors() -> None:
    lm = load_model("builtin:tiny?n_layers=3")
    assert lm.config.n_layers == 3
    with pytest.raises(ModelLoadError, match="unknown builtin"):
        load_model("builtin:nope")
    with pytest.raises(ModelLoadError, match="bad builtin override"):
        load_model("builtin:tiny?colour=3")
    with pytest.raises(ModelLoadError, match="architecture"):
        load_model("builtin:tiny", architecture="moe")
    with pytest.raises(ModelLoadError, match="neither"):
        load_model("/definitely/not/here")


def test_checksum_sensitivity() -> None:
    a = {"w": torch.zeros(2, 3), "b": torch.ones(3)}
    base = state_checksum(a)
    assert base.startswith("sha256:")
    assert state_checksum(dict(reversed(list(a.items())))) == base  # order independent
    assert state_checksum({"w": torch.zeros(3, 2), "b": torch.ones(3)}) != base  # shape
    assert state_checksum({"w": torch.zeros(2, 3).bfloat16(), "b": torch.ones(3)}) != base  # dtype
    assert state_checksum({"w2": torch.zeros(2, 3), "b": torch.ones(3)}) != base  # name
    b = {"w": torch.zeros(2, 3), "b": torch.ones(3)}
    b["w"][1, 2] = 1e-30
    assert state_checksum(b) != base  # bytes


def test_safetensors_round_trip_bf16_and_tied(tmp_path) -> None:
    w = torch.randn(4, 4)
    state = {"emb": w, "head": w, "n": torch.randn(4).bfloat16()}  # aliased like tied weights
    save_safetensors(state, tmp_path)
    back = load_safetensors(tmp_path)
    assert state_checksum(back) == state_checksum(state)
    assert not list(tmp_path.glob("*.tmp"))


def test_native_round_trip(tiny, tmp_path, monkeypatch) -> None:
    save_native(tiny, tmp_path)
    monkeypatch.setattr(torch.nn.init, "trunc_normal_", _refuse)  # loads, never initialises
    again = load_model(str(tmp_path))
    assert again.family == "dense"
    assert state_checksum(again.model.state_dict()) == state_checksum(tiny.model.state_dict())
    assert again.tokenizer.encode("3+4=") == tiny.tokenizer.encode("3+4=")


@pytest.mark.parametrize("name,family", [("tiny-moe", "moe"), ("tiny-hybrid-moe", "hybrid_moe")])
def test_moe_runs_on_cpu(name: str, family: str) -> None:
    lm = load_model(f"builtin:{name}")
    assert lm.family == family
    lm.model.train()
    x = torch.randint(0, lm.tokenizer.vocab_size, (2, 12))
    out = lm.model(x)
    assert torch.isfinite(out).all()
    out.float().pow(2).mean().backward()
    router_grads = [
        p.grad for n, p in lm.model.named_parameters() if "router" in n and p.grad is not None
    ]
    assert router_grads and any(g.abs().sum() > 0 for g in router_grads)


def test_cpu_binned_ops_match_reference() -> None:
    from runtime.models.moe_cpu import binned_gather_torch, binned_scatter_torch

    torch.manual_seed(0)
    tokens, top_k, experts, cap, d = 6, 2, 3, 3, 4
    x = torch.randn(tokens, d)
    expert_idx = torch.randint(0, experts, (tokens * top_k,))
    weights = torch.rand(tokens * top_k)
    indices = torch.argsort(expert_idx, stable=True)
    bins = torch.cumsum(torch.bincount(expert_idx, minlength=experts), 0)
    g = binned_gather_torch(x, indices, bins, cap, top_k)
    ref = torch.zeros(tokens, d)
    start = 0
    for e in range(experts):
        end = int(bins[e])
        for j, pos in enumerate(range(start, end)):
            flat = int(indices[pos])
            if j < cap:
                assert torch.equal(g[e, j], x[flat // top_k])
                ref[flat // top_k] += weights[flat] * x[flat // top_k] * 2
        start = end
    out = binned_scatter_torch(g * 2, indices, weights, bins, top_k)
    assert torch.allclose(out, ref, atol=1e-6)


def test_olmo_core_trainer_checkpoint_source(tmp_path, monkeypatch) -> None:
    """An OLMo-core trainer checkpoint (config.json + model_and_optim/) loads as a model."""
    import json

    from olmo_core.distributed.checkpoint import save_model_and_optim_state

    src = load_model("builtin:tiny", seed=8)
    save_model_and_optim_state(str(tmp_path / "model_and_optim"), src.model)
    (tmp_path / "config.json").write_text(json.dumps({"model": src.config.as_config_dict()}))
    with pytest.raises(ModelLoadError, match="tokenizer.json"):
        load_model(str(tmp_path))
    src.tokenizer.save(tmp_path)
    monkeypatch.setattr(torch.nn.init, "trunc_normal_", _refuse)  # loads, never initialises
    lm = load_model(str(tmp_path))
    assert lm.family == "dense"
    assert state_checksum(lm.model.state_dict()) == state_checksum(src.model.state_dict())


def test_check_source_reads_configs_only(tmp_path) -> None:
    """The start-up check refuses what load_model would refuse, without loading weights."""
    import json

    from runtime.models.loader import ModelLoadError, check_source

    check_source("builtin:tiny")
    with pytest.raises(ModelLoadError, match="neither builtin"):
        check_source(str(tmp_path / "absent"))
    with pytest.raises(ModelLoadError, match="builtin"):
        check_source("builtin:no-such-model")
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (hf / "model.safetensors").write_bytes(b"")
    with pytest.raises(ModelLoadError, match="llama"):
        check_source(str(hf))
    (hf / "config.json").write_text(json.dumps({"model_type": "olmo2"}))
    with pytest.raises(ModelLoadError, match="config.json has no"):
        check_source(str(hf))


def test_builtin_moe_trainers_never_drop_tokens() -> None:
    """The engines are dropless; a capacity-factor trainer that drops a token's experts
    scores another sub-network than the one that sampled it (a train/inference gap)."""
    from runtime.models.builtin import BUILTINS

    moes = [name for name, (family, _) in BUILTINS.items() if "moe" in family]
    assert moes
    for name in moes:
        moe = BUILTINS[name][1](vocab_size=64).block.feed_forward_moe
        assert moe.name == "dropless", name
        capacity = BUILTINS[name][1](vocab_size=64, dropless=0).block.feed_forward_moe
        assert capacity.capacity_factor == capacity.num_experts / capacity.router.top_k, name


def test_a_deferred_builtin_reads_the_init_cache_a_child_process_wrote(
    tmp_path, monkeypatch
) -> None:
    """Deferred, a builtin is never initialised in the loading process (its threads share
    the global RNG): a child process writes the init cache, then it is read. Cold or warm,
    the weights are the in-process initialisation's, byte for byte."""
    import runtime.models.init_cache as init_cache

    monkeypatch.setattr(init_cache, "MIN_PARAMS", 0)
    monkeypatch.setenv("RLC_CACHE_DIR", "off")
    expected = state_checksum(load_model("builtin:tiny", seed=3).model.state_dict())
    monkeypatch.setenv("RLC_CACHE_DIR", str(tmp_path))
    for _ in ("cold", "warm"):
        lm = load_model("builtin:tiny", seed=3, defer_weights=True)
        assert lm.pending is not None
        lm.fill_weights()
        assert state_checksum(lm.model.state_dict()) == expected
    assert len(list((tmp_path / "builtin-init").glob("tiny-*.safetensors"))) == 1


def test_a_bfloat16_load_is_allocated_in_it_and_equals_the_float32_load_cast(
    tmp_path, monkeypatch
) -> None:
    """A model loaded in bfloat16 (an engine's) is allocated in it, never in float32 on its
    device first; from the init cache, deferred or not, it is the float32 load cast."""
    import runtime.models.init_cache as init_cache
    from runtime.models import loader

    monkeypatch.setattr(init_cache, "MIN_PARAMS", 0)
    monkeypatch.setenv("RLC_CACHE_DIR", str(tmp_path))
    full = load_model("builtin:tiny", seed=2).model.state_dict()  # writes the cache
    made: list[torch.dtype | None] = []
    allocated = loader._allocated

    def spy(config, device="cpu", dtype=None):
        made.append(dtype)
        return allocated(config, device, dtype)

    monkeypatch.setattr(loader, "_allocated", spy)
    half = load_model("builtin:tiny", seed=2, dtype=torch.bfloat16)
    deferred = load_model("builtin:tiny", seed=2, dtype=torch.bfloat16, defer_weights=True)
    deferred.fill_weights()
    assert made == [torch.bfloat16, torch.bfloat16]
    for model in (half.model, deferred.model):
        state = model.state_dict()
        assert all(torch.equal(state[k], v.to(torch.bfloat16)) for k, v in full.items())
