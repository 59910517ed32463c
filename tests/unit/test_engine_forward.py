"""The engine's KV-cache forward must reproduce OLMo-core's own forward (fp32, CPU)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("olmo_core")

import torch.nn.functional as F  # noqa: E402

from runtime.engines.embedded.forward import InferenceModel, UnsupportedModel, _expert_weights  # noqa: E402
from runtime.engines.embedded.tiny import build_tiny  # noqa: E402

TOL = 1e-4


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """Tiny matmuls: one intra-op thread is fastest on shared CI cores."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(autouse=True)
def _naive_experts(monkeypatch):
    """OLMo-core's MoE expert kernels need triton (GPU); swap in a per-token loop over the
    same expert weights so the reference forward runs on CPU. Routing, shared experts,
    norms and attention stay OLMo-core's own."""
    from olmo_core.nn.moe.parallel_mlp import ParallelMLPBase

    def forward(self, x, expert_weights, expert_indices, batch_size_per_expert):
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        w1, w3, w2 = _expert_weights(self)
        idx = expert_indices.reshape(flat.shape[0], -1)
        wts = expert_weights.reshape(flat.shape[0], -1)
        out = torch.zeros_like(flat)
        for t in range(flat.shape[0]):
            for j in range(idx.shape[1]):
                e = int(idx[t, j])
                out[t] += wts[t, j] * ((F.silu(flat[t] @ w1[e]) * (flat[t] @ w3[e])) @ w2[e])
        return out.view(shape)

    monkeypatch.setattr(ParallelMLPBase, "forward", forward)


def _reference(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids]))[0]


@pytest.mark.parametrize("kind", ["dense", "moe", "hybrid"])
def test_prefill_matches_olmo_core(kind):
    loaded = build_tiny(kind, seed=1)
    ids = torch.randint(1, 128, (20,), generator=torch.Generator().manual_seed(0)).tolist()
    ref = _reference(loaded.model, ids)
    im = InferenceModel(loaded.model, max_slots=2, capacity=64)
    logits, experts = im.prefill(ids, slot=1, all_logits=True)
    assert logits.shape == ref.shape
    assert (logits - ref).abs().max().item() < TOL
    if kind == "dense":
        assert experts is None
    else:
        assert experts.shape == (20, 2, 2)  # (tokens, moe layers, top_k)


@pytest.mark.parametrize("kind", ["dense", "moe", "hybrid"])
def test_incremental_decode_matches_full_forward(kind):
    """Prefill 12 tokens then decode one at a time: each step's logits equal the full
    forward's at that position (the dense model's first layer has an 8-token window)."""
    loaded = build_tiny(kind, seed=2)
    ids = torch.randint(1, 128, (20,), generator=torch.Generator().manual_seed(3)).tolist()
    ref = _reference(loaded.model, ids)
    im = InferenceModel(loaded.model, max_slots=1, capacity=32)
    last, _ = im.prefill(ids[:12], slot=0)
    assert (last - ref[11]).abs().max().item() < TOL
    for p in range(12, 20):
        logits, _ = im.decode(torch.tensor([ids[p]]), torch.tensor([p]))
        assert (logits[0] - ref[p]).abs().max().item() < TOL, p


def test_batched_decode_with_ragged_lengths_and_slot_moves():
    loaded = build_tiny("dense", seed=4)
    gen = torch.Generator().manual_seed(5)
    seqs = [torch.randint(1, 128, (n,), generator=gen).tolist() for n in (5, 11, 16)]
    refs = [_reference(loaded.model, s) for s in seqs]
    im = InferenceModel(loaded.model, max_slots=4, capacity=32)
    # prefill all but the last 3 tokens of each sequence, in slots 0..2
    cut = [len(s) - 3 for s in seqs]
    for slot, (s, c) in enumerate(zip(seqs, cut, strict=True)):
        im.prefill(s[:c], slot=slot)
    for step in range(3):
        toks = torch.tensor([s[c + step] for s, c in zip(seqs, cut, strict=True)])
        pos = torch.tensor([c + step for c in cut])
        logits, _ = im.decode(toks, pos)
        for b, r in enumerate(refs):
            assert (logits[b] - r[cut[b] + step]).abs().max().item() < TOL
    # a request moved to another slot keeps its cache
    im.move_slot(2, 0, length=len(seqs[2]))
    logits, _ = im.decode(torch.tensor([seqs[2][-1]]), torch.tensor([len(seqs[2]) - 1]))
    assert (logits[0] - refs[2][-1]).abs().max().item() < TOL


def test_prompt_longer_than_capacity_is_rejected():
    im = InferenceModel(build_tiny("dense").model, max_slots=1, capacity=8)
    with pytest.raises(ValueError):
        im.prefill(list(range(1, 10)), slot=0)


def test_unsupported_block_is_refused():
    from olmo_core.nn.transformer import TransformerBlockType

    from runtime.engines.embedded.tiny import tiny_config

    cfg = tiny_config("dense", window=None)
    cfg.block.name = TransformerBlockType.default_scaled
    model = cfg.build(init_device="cpu")
    with pytest.raises(UnsupportedModel):
        InferenceModel(model, max_slots=1, capacity=8)


@pytest.mark.parametrize("name", ["tiny", "tiny-moe", "tiny-hybrid-moe"])
def test_runtime_builtin_models_match(name):
    """The models part's builtins (runtime.models.load_model) serve with identical logits."""
    models = pytest.importorskip("runtime.models")
    loaded = models.load_model(f"builtin:{name}")
    vocab = loaded.tokenizer.vocab_size
    ids = torch.randint(1, vocab, (18,), generator=torch.Generator().manual_seed(1)).tolist()
    ref = _reference(loaded.model, ids)
    im = InferenceModel(loaded.model, max_slots=1, capacity=32)
    last, _ = im.prefill(ids[:10], slot=0)
    assert (last - ref[9]).abs().max().item() < TOL
    for p in range(10, 18):
        logits, _ = im.decode(torch.tensor([ids[p]]), torch.tensor([p]))
        assert (logits[0] - ref[p]).abs().max().item() < TOL
