"""Every OLMo family transformers and OLMo-core both know: import -> GRPO update -> export.

Tiny random checkpoints are written here by transformers itself (its config classes and
``save_pretrained``); after one GRPO step the exported directory, loaded back with
``from_pretrained``, must give our model's logits. ``olmo_hybrid``'s GatedDeltaNet layers run
fla's torch reference on our side and transformers' own torch reference on the HF side.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("olmo_core")

from runtime.models import (  # noqa: E402
    ModelLoadError,
    build_builtin_tokenizer,
    export_hf,
    load_model,
)
from runtime.models.hf import HF_FAMILIES, UnsupportedHFModel  # noqa: E402
from runtime.trainer import Sample, Trainer, TrainerConfig, group_advantages  # noqa: E402

SEQ = 24
TOL = 2e-5  # fp32 on both sides; only op order differs


def _common(tok):
    return dict(
        vocab_size=tok.vocab_size,
        hidden_size=64,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
    )


MOE = dict(num_experts=4, num_experts_per_tok=2)
HYBRID = dict(
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=8,
    linear_value_head_dim=16,
)
FAMILIES = {
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", {}, "dense"),
    "olmo3": (
        "Olmo3Config",
        "Olmo3ForCausalLM",
        dict(sliding_window=8, layer_types=["sliding_attention", "full_attention"]),
        "dense",
    ),
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM", MOE, "moe"),
    "olmoe-norm-topk": ("OlmoeConfig", "OlmoeForCausalLM", {**MOE, "norm_topk_prob": True}, "moe"),
    "flex_olmo": ("FlexOlmoConfig", "FlexOlmoForCausalLM", MOE, "moe"),
    # layers: GatedDeltaNet, attention; more value heads than key heads (GVA)
    "olmo_hybrid": ("OlmoHybridConfig", "OlmoHybridForCausalLM", HYBRID, "dense"),
}


@pytest.fixture(autouse=True)
def _hf_hybrid_on_cpu() -> None:
    from runtime.models.gdn_cpu import install_transformers_cpu_fallbacks

    install_transformers_cpu_fallbacks()


def write_hf_checkpoint(out, kind: str, seed: int = 0):
    """A tiny random HF checkpoint of family ``kind`` (transformers' own classes) + tokenizer."""
    tok = build_builtin_tokenizer()
    cfg_name, model_name, extra, _ = FAMILIES[kind]
    torch.manual_seed(seed)
    cfg = getattr(transformers, cfg_name)(**_common(tok), **extra)
    model = getattr(transformers, model_name)(cfg).eval()
    model.save_pretrained(str(out))
    tok.save(out)
    return model


def _ids(vocab: int) -> torch.Tensor:
    return torch.randint(0, vocab, (2, SEQ), generator=torch.Generator().manual_seed(1))


def _samples(tok) -> list[Sample]:
    prompt = tok.encode("1+1=")
    answers = [tok.encode(" 2")[:1], tok.encode(" 3")[:1], tok.encode(" 2")[:1], [7]]
    adv = group_advantages([1.0, 0.0, 1.0, 0.0])
    return [Sample(prompt, a + [tok.eos_token_id], ad) for a, ad in zip(answers, adv, strict=True)]


@pytest.mark.parametrize("kind", list(FAMILIES))
def test_import_update_export_round_trip(kind: str, tmp_path) -> None:
    src, out = tmp_path / "src", tmp_path / "export"
    hf = write_hf_checkpoint(src, kind)
    loaded = load_model(str(src))
    assert loaded.family == FAMILIES[kind][3]
    x = _ids(loaded.tokenizer.vocab_size)
    with torch.no_grad():
        diff = (loaded.model(x) - hf(x).logits).abs().max().item()
    assert diff < TOL, f"import: max |diff| {diff}"

    trainer = Trainer(TrainerConfig(model_source=str(src), lr=1e-2), loaded=loaded)
    before = {k: v.clone() for k, v in trainer.state_dict_for_publication().items()}
    trainer.train_step(_samples(loaded.tokenizer))
    after = trainer.state_dict_for_publication()
    assert max(float((after[k] - before[k]).abs().max()) for k in after) > 1e-4

    export_hf(loaded, loaded.tokenizer, out, state_dict=after)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == kind.partition("-")[0]
    assert (out / "tokenizer.json").is_file() and (out / "tokenizer_config.json").is_file()
    back = transformers.AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    trainer.model.eval()
    with torch.no_grad():
        ours = trainer.model(x)
        theirs = back.eval()(x).logits
        moved = (ours - hf(x).logits).abs().max().item()
    diff = (ours - theirs).abs().max().item()
    assert diff < TOL, f"export after update: max |diff| {diff}"
    assert moved > 10 * TOL  # the comparison is not vacuous: the update changed the logits


def refuse_random_init(monkeypatch) -> None:
    """Any random initialisation from here on fails the test."""

    def refuse(*args, **kwargs):
        if args and getattr(args[0], "is_meta", False):
            return args[0]  # a meta tensor (the model's skeleton) has no values to fill
        raise AssertionError("a weight was random-initialised while loading a checkpoint")

    for name in ("trunc_normal_", "normal_", "kaiming_uniform_", "uniform_", "xavier_uniform_"):
        monkeypatch.setattr(torch.nn.init, name, refuse)


@pytest.mark.parametrize("kind", list(FAMILIES))
def test_a_checkpoint_loads_without_initialising_weights_it_replaces(
    kind: str, tmp_path, monkeypatch
) -> None:
    """OLMo-core's init_weights random-initialises every weight, which the checkpoint then
    overwrites: tens of seconds at 1B, in the trainer and in every engine. Loading only
    allocates, and the model is still exactly the checkpoint's."""
    hf = write_hf_checkpoint(tmp_path, kind)
    refuse_random_init(monkeypatch)
    loaded = load_model(str(tmp_path))
    x = _ids(loaded.tokenizer.vocab_size)
    with torch.no_grad():
        diff = (loaded.model(x) - hf(x).logits).abs().max().item()
    assert diff < TOL, f"import: max |diff| {diff}"


@pytest.mark.parametrize("kind", ["olmo3", "olmo_hybrid", "olmoe"])
def test_deferred_weights_arrive_after_the_build(kind: str, tmp_path) -> None:
    """``defer_weights``: a dense model comes back at once on zeros, its checkpoint read on
    a thread, and ``fill_weights`` makes it the checkpoint's exactly. An MoE model loads at
    once (a router on zero weights sends every token to the same experts)."""
    write_hf_checkpoint(tmp_path, kind)
    eager = load_model(str(tmp_path))
    deferred = load_model(str(tmp_path), defer_weights=True)
    x = _ids(eager.tokenizer.vocab_size)
    if FAMILIES[kind][3] != "dense":
        assert deferred.pending is None
    else:
        assert deferred.pending is not None
        assert all(not t.any() for t in deferred.model.state_dict().values())
        deferred.fill_weights()
        assert deferred.pending is None
    with torch.no_grad():
        assert torch.equal(deferred.model(x), eager.model(x))


@pytest.mark.parametrize("kind", list(FAMILIES))
def test_embedded_engine_serves_the_imported_model(kind: str, tmp_path) -> None:
    """The embedded engine's KV-cache prefill and decode give the imported model's logits
    (olmo3's 8-token window is crossed; MoE routing is the engine's own)."""
    from runtime.engines.embedded.forward import InferenceModel

    write_hf_checkpoint(tmp_path, kind)
    loaded = load_model(str(tmp_path))
    ids = _ids(loaded.tokenizer.vocab_size)[0].tolist()
    with torch.no_grad():
        ref = loaded.model(torch.tensor([ids]))[0]
    im = InferenceModel(loaded.model, max_slots=1, capacity=32)
    logits, _ = im.prefill(ids[:16], slot=0, all_logits=True)
    assert (logits - ref[:16]).abs().max().item() < 1e-4
    for p in range(16, SEQ):
        step, _ = im.decode(torch.tensor([ids[p]]), torch.tensor([p]))
        assert (step[0] - ref[p]).abs().max().item() < 1e-4, p


def test_moe_routing_is_exercised(tmp_path) -> None:
    """Guard against a vacuous MoE comparison: dropping top-k to 1 changes HF's logits."""
    hf = write_hf_checkpoint(tmp_path, "olmoe")
    loaded = load_model(str(tmp_path))
    x = _ids(loaded.tokenizer.vocab_size)
    for layer in hf.model.layers:
        layer.mlp.gate.top_k = 1
    with torch.no_grad():
        assert (loaded.model(x) - hf(x).logits).abs().max() > 1e-3


def test_engine_carries_recurrent_state_of_concurrent_sequences(tmp_path) -> None:
    """olmo_hybrid in the embedded engine: three ragged prompts prefilled together, decoded
    together step after step (each GatedDeltaNet state advanced in its own slot), one moved
    to another slot mid-way (compaction): every step gives the model's own logits."""
    from runtime.engines.embedded.forward import InferenceModel

    write_hf_checkpoint(tmp_path, "olmo_hybrid")
    loaded = load_model(str(tmp_path))
    vocab = loaded.tokenizer.vocab_size
    gen = torch.Generator().manual_seed(3)
    full = [torch.randint(0, vocab, (SEQ,), generator=gen).tolist() for _ in range(3)]
    starts = [5, 11, 2]
    with torch.no_grad():
        refs = [loaded.model(torch.tensor([f]))[0] for f in full]
    im = InferenceModel(loaded.model, max_slots=4, capacity=32)
    assert im.recurrent is not None and len(im.recurrent.state) == 1
    _, prefilled, _ = im.prefill_batch(
        [f[:n] for f, n in zip(full, starts, strict=True)], [0, 1, 2], want_all=[True] * 3
    )
    for b, n in enumerate(starts):
        assert (prefilled[b] - refs[b][:n]).abs().max().item() < 1e-4
    pos, rows = list(starts), [0, 1, 2]  # rows: which sequence sits in slot 0, 1, 2
    for step in range(SEQ - max(starts)):
        if step == 4:  # the sequence in slot 0 finishes; slot 2's moves into the hole
            im.move_slots([2], [0], pos[rows[2]])
            rows = [rows[2], rows[1]]
        toks = torch.tensor([full[r][pos[r]] for r in rows])
        logits, _ = im.decode(toks, torch.tensor([pos[r] for r in rows]))
        for b, r in enumerate(rows):
            assert (logits[b] - refs[r][pos[r]]).abs().max().item() < 1e-4, (step, r)
            pos[r] += 1


def test_missing_tokenizer_is_a_load_error(tmp_path) -> None:
    write_hf_checkpoint(tmp_path, "olmo2")
    (tmp_path / "tokenizer.json").unlink()
    with pytest.raises(ModelLoadError, match="tokenizer.json"):
        load_model(str(tmp_path))


@pytest.mark.parametrize("name", ["builtin:tiny-moe", "builtin:tiny-hybrid-moe"])
def test_export_refuses_blocks_without_hf_architecture(name: str, tmp_path) -> None:
    lm = load_model(name)
    with pytest.raises(UnsupportedHFModel, match="native checkpoint"):
        export_hf(lm, lm.tokenizer, tmp_path)
    assert not (tmp_path / "config.json").exists()


def test_compiler_table_agrees_with_runtime() -> None:
    from compiler.spec.model_source import HF_FAMILIES as COMPILER_FAMILIES
    from compiler.spec.model_source import REFUSED_HF_TYPES as COMPILER_REFUSED
    from runtime.models.hf import REFUSED_HF_TYPES

    assert COMPILER_FAMILIES == HF_FAMILIES
    assert set(COMPILER_REFUSED) == set(REFUSED_HF_TYPES)


def test_dropless_experts_export_in_hf_layout(tmp_path) -> None:
    """OLMo-core checkpoints often use the dropless MoE, whose w1/w3 are laid out per expert
    as (hidden, d_model): the export gives HF each expert's own projections."""
    from olmo_core.nn.moe import MoEConfig, MoERouterConfig, MoEType
    from olmo_core.nn.transformer import TransformerBlockType, TransformerConfig, TransformerType
    from safetensors.torch import load_file

    tok = build_builtin_tokenizer()
    moe = MoEConfig(
        name=MoEType.dropless, num_experts=4, hidden_size=32, router=MoERouterConfig(top_k=2)
    )
    cfg = TransformerConfig.llama_like(
        d_model=64,
        vocab_size=tok.vocab_size,
        n_layers=2,
        n_heads=4,
        name=TransformerType.moe,
        block_name=TransformerBlockType.moe,
        qk_norm=True,
        rope_theta=10_000,
        feed_forward_moe=moe,
        attn_backend="torch",
    )
    model = cfg.build(init_device="cpu")
    model.init_weights(device=torch.device("cpu"))
    export_hf(model, tok, tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    mlp = model.blocks["1"].feed_forward_moe.experts.mlp
    for e in range(4):
        pre = f"model.layers.1.mlp.experts.{e}"
        assert torch.equal(state[f"{pre}.gate_proj.weight"], mlp.w1.view(4, 32, 64)[e])
        assert torch.equal(state[f"{pre}.up_proj.weight"], mlp.w3.view(4, 32, 64)[e])
        assert torch.equal(state[f"{pre}.down_proj.weight"], mlp.w2.view(4, 32, 64)[e].T)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "olmoe"


def test_max_mamba_cache_size_bounds_the_running_sequences(tmp_path, monkeypatch) -> None:
    """``inference.max_mamba_cache_size`` reaches the embedded engine and, for a model with
    GatedDeltaNet layers, bounds how many sequences run (one recurrent state each): five
    greedy requests through two states give the model's own greedy continuations."""
    import threading

    from compiler.pipeline import compile_spec
    from runtime.engines.embedded.__main__ import build_parser
    from runtime.engines.embedded.engine import Engine
    from runtime.engines.embedded.sampling import SamplingParams
    from runtime.engines.embedded.tiny import build_tiny

    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)  # the quickstart's output.root lies under the checkout
    spec = str(root / "specs" / "examples" / "quickstart.toml")
    argv = compile_spec(spec, ["inference.max_mamba_cache_size=2"]).manifest()["commands"]
    assert build_parser().parse_args(argv["engine_argv"][0][3:]).max_mamba_cache_size == 2
    dense = Engine(
        build_tiny("dense"), model_path="t", max_running_requests=4, max_mamba_cache_size=2
    )
    assert dense.max_running == 4  # no recurrent state: the option does not apply

    write_hf_checkpoint(tmp_path, "olmo_hybrid")
    loaded = load_model(str(tmp_path))
    eng = Engine(
        loaded, model_path="t", max_running_requests=4, context_length=32, max_mamba_cache_size=2
    )
    assert eng.max_running == 2 and eng.im.recurrent is not None
    assert all(t.shape[0] == 2 for t in eng.im.recurrent.tensors())
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, 60, (3 + i,), generator=gen).tolist() for i in range(5)]
    results: dict[int, dict] = {}
    done = threading.Event()

    def callback(i: int):  # type: ignore[no-untyped-def]
        def f(res: dict) -> None:
            results[i] = res
            if len(results) == len(prompts):
                done.set()

        return f

    eng.start()
    try:
        for i, p in enumerate(prompts):
            sp = SamplingParams(max_new_tokens=3 + i, temperature=0.0, ignore_eos=True)
            eng.submit(eng.make_request(p, sp, callback(i)))
        assert done.wait(120), "engine did not finish"
    finally:
        eng.stop()
    for i, p in enumerate(prompts):
        ids = list(p)
        with torch.no_grad():
            for _ in range(3 + i):
                ids.append(int(loaded.model(torch.tensor([ids]))[0, -1].argmax()))
        assert results[i]["output_ids"] == ids[len(p) :], i
