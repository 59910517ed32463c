"""HF export: transformers loads it and gives OLMo-core's logits; re-import matches too."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("olmo_core")

from runtime.models import export_hf, load_model, state_checksum  # noqa: E402
from runtime.models.hf import UnsupportedHFModel, hf_config_to_olmo_core  # noqa: E402

SEQ = 40  # longer than the tiny model's sliding window (16) so the window matters


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    lm = load_model("builtin:tiny", seed=11)
    out = tmp_path_factory.mktemp("hf")
    export_hf(lm, lm.tokenizer, out)
    return lm, out


def _ids(lm):
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, lm.tokenizer.vocab_size, (2, SEQ), generator=g)


def test_files_and_config(exported) -> None:
    lm, out = exported
    for name in (
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
    ):
        assert (out / name).is_file(), name
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["Olmo3ForCausalLM"]
    assert cfg["model_type"] == "olmo3"
    assert cfg["layer_types"] == ["sliding_attention", "full_attention"]
    assert cfg["eos_token_id"] == lm.tokenizer.eos_token_id


def test_transformers_logits_match(exported) -> None:
    lm, out = exported
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    x = _ids(lm)
    with torch.no_grad():
        ref = lm.model(x)
        got = hf(x).logits
    assert torch.allclose(got, ref, atol=1e-5, rtol=1e-5), (got - ref).abs().max()


def test_sliding_window_is_really_exercised(exported, tmp_path) -> None:
    """Guard against a vacuous comparison: a different window changes the logits."""
    lm, out = exported
    cfg = transformers.AutoConfig.from_pretrained(str(out))
    cfg.sliding_window = 8
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        str(out), config=cfg, dtype=torch.float32
    ).eval()
    x = _ids(lm)
    with torch.no_grad():
        assert not torch.allclose(hf(x).logits, lm.model(x), atol=1e-4)


def test_reimport_matches(exported) -> None:
    lm, out = exported
    again = load_model(str(out))
    assert state_checksum(again.model.state_dict()) == state_checksum(lm.model.state_dict())
    x = _ids(lm)
    with torch.no_grad():
        assert torch.equal(again.model(x), lm.model(x))
    assert again.tokenizer.apply_chat_template([{"role": "user", "content": "1+1="}]) == (
        lm.tokenizer.apply_chat_template([{"role": "user", "content": "1+1="}])
    )


def test_bf16_export_loads(tmp_path) -> None:
    lm = load_model("builtin:tiny")
    export_hf(lm, lm.tokenizer, tmp_path, dtype=torch.bfloat16)
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path))
    assert next(hf.parameters()).dtype == torch.bfloat16


def test_olmo2_config_maps_without_window() -> None:
    family, cfg = hf_config_to_olmo_core(
        {
            "model_type": "olmo2",
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "vocab_size": 100,
            "rms_norm_eps": 1e-6,
            "rope_theta": 10000,
        }
    )
    assert family == "dense" and cfg.n_layers == 2
    assert cfg.block.sequence_mixer.n_kv_heads == 2
    assert cfg.block.sequence_mixer.sliding_window is None
    with pytest.raises(UnsupportedHFModel, match="llama"):
        hf_config_to_olmo_core({"model_type": "llama"})


def test_olmo2_export_and_import_round_trip(tmp_path) -> None:
    """A model without sliding windows exports as Olmo2ForCausalLM (GQA too) and re-imports."""
    from olmo_core.nn.attention import AttentionBackendName
    from olmo_core.nn.feed_forward import FeedForwardConfig
    from olmo_core.nn.transformer import TransformerBlockType, TransformerConfig

    from runtime.models import LoadedModel, build_builtin_tokenizer

    tok = build_builtin_tokenizer()
    cfg = TransformerConfig.llama_like(
        d_model=64,
        vocab_size=tok.vocab_size,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        block_name=TransformerBlockType.reordered_norm,
        qk_norm=True,
        layer_norm_eps=1e-6,
        feed_forward=FeedForwardConfig(hidden_size=96, bias=False),
        attn_backend=AttentionBackendName.torch,
    )
    model = cfg.build(init_device="cpu")
    model.init_weights(device=torch.device("cpu"))
    lm = LoadedModel(model=model.eval(), tokenizer=tok, config=cfg, family="dense", source="test")
    export_hf(lm, tok, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == [
        "Olmo2ForCausalLM"
    ]
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), dtype=torch.float32)
    x = _ids(lm)
    again = load_model(str(tmp_path))
    with torch.no_grad():
        ref = model(x)
        assert torch.allclose(hf.eval()(x).logits, ref, atol=1e-5, rtol=1e-5)
        assert torch.equal(again.model(x), ref)


def test_moe_export_is_refused_clearly(tmp_path) -> None:
    lm = load_model("builtin:tiny-moe")
    with pytest.raises(UnsupportedHFModel, match="MoE"):
        export_hf(lm, lm.tokenizer, tmp_path)
