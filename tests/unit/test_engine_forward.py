"""The engine's KV-cache forward must reproduce OLMo-core's own forward (fp32, CPU)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("olmo_core")

import torch.nn.functional as F  # noqa: E402

from runtime.engines.embedded.forward import InferenceModel, UnsupportedModel, _expert_weights  # noqa: E402
from runtime.engines.embedded.tiny import build_tiny  # noqa: E402

TOL = 1e-4


pytestmark = pytest.mark.usefixtures("one_torch_thread")


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
    im.move_slots([2], [0], length=len(seqs[2]))
    logits, _ = im.decode(torch.tensor([seqs[2][-1]]), torch.tensor([len(seqs[2]) - 1]))
    assert (logits[0] - refs[2][-1]).abs().max().item() < TOL


@pytest.mark.parametrize("one_store", [True, False])
def test_batched_slot_moves_decode_as_the_originals(one_store):
    """``move_slots`` copies every pair in one gather and scatter per cache tensor: the
    moved rows decode exactly as the originals did, a destination that is also a source
    takes the source's old content, and ``read_kv``/``write_kv`` round-trip a slot. Both
    with every layer's K and V in one store (equal shapes) and with separate tensors."""
    loaded = build_tiny("dense", seed=4)
    gen = torch.Generator().manual_seed(6)
    seqs = [torch.randint(1, 128, (n,), generator=gen).tolist() for n in (5, 11, 16)]
    refs = [_reference(loaded.model, s) for s in seqs]
    im = InferenceModel(loaded.model, max_slots=5, capacity=32)
    store = im._kv_store
    assert store is not None  # the tiny model's layers agree in shape
    rows = im.kv_rows()
    assert all(c.untyped_storage().data_ptr() == store.untyped_storage().data_ptr() for c in rows)
    assert all(c.is_contiguous() for c in rows)
    if not one_store:  # layers whose shapes differ keep a tensor each
        im.k_cache = [c.clone() for c in im.k_cache]
        im.v_cache = [c.clone() for c in im.v_cache]
        im._kv_store = None
    for slot, s in enumerate(seqs):
        im.prefill(s[:-1], slot=slot)
    # slot 0 is both a destination (of 2) and a source (for 3); lengths differ per pair
    im.move_slots([2, 0], [0, 3], length=max(len(seqs[2]), len(seqs[0])) - 1)
    kv = im.read_kv(1, 0, len(seqs[1]) - 1)
    assert len(kv) == 1 and kv[0].shape[0] == len(im.kv_rows())  # one tensor, every row
    assert im.write_kv(4, 0, kv) == len(seqs[1]) - 1
    order = [seqs[2], seqs[1], seqs[2], seqs[0], seqs[1]]  # what each slot now holds
    want = [refs[2], refs[1], refs[2], refs[0], refs[1]]
    logits, _ = im.decode(
        torch.tensor([s[-1] for s in order]), torch.tensor([len(s) - 1 for s in order])
    )
    for b, r in enumerate(want):
        assert (logits[b] - r[-1]).abs().max().item() < TOL, b


@pytest.mark.parametrize("kind", ["dense", "moe", "hybrid"])
def test_fused_projections_match_the_separate_ones(kind):
    """q/k/v and the feed-forward's w1/w3 as one product each give the logits of the
    separate products; the modules' weights become views of the fused ones, so the model's
    own forward and its state dict are unchanged."""
    import copy

    loaded = build_tiny(kind, seed=8)
    plain_model = copy.deepcopy(loaded.model)
    ids = torch.randint(1, 128, (14,), generator=torch.Generator().manual_seed(9)).tolist()
    before = _reference(loaded.model, ids)
    state = {k: v.clone() for k, v in loaded.model.state_dict().items()}
    fused = InferenceModel(loaded.model, max_slots=1, capacity=32)
    plain = InferenceModel(plain_model, max_slots=1, capacity=32, fuse_projections=False)
    attn_layers = [layer for layer in fused.layers if not layer.gdn]
    assert attn_layers and all(layer.qkv is not None for layer in attn_layers)
    if kind != "moe":  # the MoE blocks have no dense feed-forward
        assert any(layer.gate_up is not None for layer in fused.layers)
    assert fused.fused_intact() and not any(layer.qkv for layer in plain.layers)
    a, _ = fused.prefill(ids[:10], slot=0, all_logits=True)
    b, _ = plain.prefill(ids[:10], slot=0, all_logits=True)
    assert (a - b).abs().max().item() < TOL
    for p in range(10, 14):
        la, _ = fused.decode(torch.tensor([ids[p]]), torch.tensor([p]))
        lb, _ = plain.decode(torch.tensor([ids[p]]), torch.tensor([p]))
        assert (la - lb).abs().max().item() < TOL
    after = _reference(loaded.model, ids)
    assert torch.equal(before, after)
    assert all(torch.equal(v, state[k]) for k, v in loaded.model.state_dict().items())


def test_an_in_place_weight_load_reaches_the_fused_projections():
    """Loading new weights into the model (as every publication does, in place) changes
    what the fused products compute; replacing a parameter object breaks the sharing,
    and ``fused_intact`` says so."""
    loaded = build_tiny("dense", seed=10)
    other = build_tiny("dense", seed=11)
    ids = [5, 9, 2, 7, 3]
    im = InferenceModel(loaded.model, max_slots=1, capacity=32)
    loaded.model.load_state_dict(other.model.state_dict())
    logits, _ = im.prefill(ids, slot=0, all_logits=True)
    assert (logits - _reference(other.model, ids)).abs().max().item() < TOL
    assert im.fused_intact()
    w_q = loaded.model.blocks["0"].attention.w_q
    w_q.weight = torch.nn.Parameter(w_q.weight.detach().clone())
    assert not im.fused_intact()


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


@pytest.mark.parametrize("kind", ["dense", "moe"])
def test_batched_ragged_prefill_matches_sequential(kind):
    """Ragged prompts prefilled in ONE forward (right-padded, masked; the dense model has
    an 8-token window) give the sequential prefill's logits, experts and cache: decoding
    after either gives the same logits. Non-contiguous slots take the indexed write."""
    loaded = build_tiny(kind, seed=6)
    gen = torch.Generator().manual_seed(8)
    seqs = [torch.randint(1, 128, (n,), generator=gen).tolist() for n in (5, 13, 1, 9)]
    seq_im = InferenceModel(loaded.model, max_slots=4, capacity=32)
    seq = [seq_im.prefill(s, slot=i, all_logits=True) for i, s in enumerate(seqs)]
    for slots in ([0, 1, 2, 3], [3, 0, 2, 1]):
        im = InferenceModel(loaded.model, max_slots=4, capacity=32)
        last, full, experts = im.prefill_batch(seqs, slots, want_all=[True, False, True, False])
        for b, (logits, ex) in enumerate(seq):
            assert (last[b] - logits[-1]).abs().max().item() < TOL
            if b in (0, 2):
                assert (full[b] - logits).abs().max().item() < TOL
            else:
                assert full[b] is None
            if kind == "moe":
                assert torch.equal(experts[b], ex)
        # continue all four by decoding two tokens, in slot order
        order = sorted(range(4), key=lambda b: slots[b])
        for step in range(2):
            toks = torch.tensor([(7 * b + step) % 127 + 1 for b in order])
            pos = torch.tensor([len(seqs[b]) + step for b in order])
            moved = [seqs[b] + [(7 * b + s) % 127 + 1 for s in range(step + 1)] for b in order]
            got, _ = im.decode(toks, pos)
            for row, b in enumerate(order):
                ref = _reference(loaded.model, moved[row])[-1]
                assert (got[row] - ref).abs().max().item() < TOL, (slots, step, b)


def test_equal_length_batch_uses_plain_causal_path():
    loaded = build_tiny("dense", seed=3, window=None)
    gen = torch.Generator().manual_seed(2)
    seqs = [torch.randint(1, 128, (6,), generator=gen).tolist() for _ in range(3)]
    im = InferenceModel(loaded.model, max_slots=3, capacity=16)
    last, _, _ = im.prefill_batch(seqs, [0, 1, 2])
    for b, s in enumerate(seqs):
        assert (last[b] - _reference(loaded.model, s)[-1]).abs().max().item() < TOL


def test_prefill_attention_leaves_cudnn_out(monkeypatch):
    """Prefill's attention runs with cuDNN's SDPA backend off (a plan built per new shape),
    plain and after a cached prefix; the flags are restored after it."""
    from runtime.engines.embedded import forward as fwd

    seen: list[bool] = []
    sdpa = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        seen.append(torch.backends.cuda.cudnn_sdp_enabled())
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(fwd.F, "scaled_dot_product_attention", spy)
    before = torch.backends.cuda.cudnn_sdp_enabled()
    im = InferenceModel(build_tiny("dense", seed=1).model, max_slots=2, capacity=64)
    im.prefill_batch([[3, 4, 5, 6], [7, 8]], [0, 1])
    im.prefill_batch([[9, 10]], [0], starts=[4])
    assert seen and not any(seen)
    assert torch.backends.cuda.cudnn_sdp_enabled() == before


def test_decode_with_a_longer_kv_bucket_matches():
    """Graph buckets attend more cache than needed (masked): same logits as exact length."""
    loaded = build_tiny("dense", seed=5)
    ids = torch.randint(1, 128, (10,), generator=torch.Generator().manual_seed(4)).tolist()
    im = InferenceModel(loaded.model, max_slots=2, capacity=64)
    im.prefill_batch([ids[:9], ids[:5]], [0, 1])
    toks, pos = torch.tensor([ids[9], ids[5]]), torch.tensor([9, 5])
    exact, _ = im.decode(toks, pos)
    for length in (16, 64):
        padded, _ = im.decode(toks, pos, kv_len=length)
        assert (padded - exact).abs().max().item() < TOL


@pytest.mark.parametrize("kind", ["moe", "hybrid"])
def test_all_experts_decode_matches_routed(kind):
    """The static all-experts MoE decode (what CUDA graphs capture) gives the routed path's
    logits and exactly the same recorded experts, over a ragged batch."""
    loaded = build_tiny(kind, seed=6)
    gen = torch.Generator().manual_seed(7)
    seqs = [torch.randint(1, 128, (n,), generator=gen).tolist() for n in (6, 9, 13)]
    im = InferenceModel(loaded.model, max_slots=3, capacity=32)
    im.prefill_batch([s[:-2] for s in seqs], [0, 1, 2])
    toks = torch.tensor([s[-2] for s in seqs])
    pos = torch.tensor([len(s) - 2 for s in seqs])
    ref, ref_ex = im.decode(toks, pos)
    im.dense_moe = True
    got, got_ex = im.decode(toks, pos)
    assert (got - ref).abs().max().item() < TOL
    assert ref_ex is not None and got_ex is not None
    assert torch.equal(got_ex, ref_ex)


def test_graph_bucket_logic():
    from runtime.engines.embedded.forward import graph_batch_sizes, graph_bucket, kv_bucket

    assert graph_batch_sizes(48) == [1, 2, 4, 8, 16, 32, 48]
    assert graph_batch_sizes(8, [3, 64]) == [3, 8]
    assert kv_bucket(1, 256, 392) == 256
    assert kv_bucket(257, 256, 392) == 392
    assert kv_bucket(100, 0, 392) == 392  # one bucket: full capacity
    sizes = graph_batch_sizes(256)
    assert graph_bucket(200, 130, sizes, 128, 392) == (256, 256)
    assert graph_bucket(1, 1, sizes, 128, 392) == (1, 128)
    assert graph_bucket(64, 393, sizes, 128, 392) is None
    assert graph_bucket(300, 10, sizes, 128, 392) is None


def test_cuda_graphs_need_cuda():
    im = InferenceModel(build_tiny("dense").model, max_slots=2, capacity=8)
    with pytest.raises(UnsupportedModel):
        im.enable_cuda_graphs()


def test_compile_failure_falls_back_to_eager():
    """A broken torch.compile must not break serving: the step reruns eagerly."""
    loaded = build_tiny("dense", seed=1)
    im = InferenceModel(loaded.model, max_slots=1, capacity=16)
    im.prefill([1, 2, 3], slot=0)
    toks, pos = torch.tensor([4]), torch.tensor([3])
    ref, _ = im.decode(toks, pos)

    def broken(*_a):
        raise RuntimeError("inductor exploded")

    im._regions = {"layer": broken, "logits": broken, "sample": broken}
    got, _ = im.decode(toks, pos)
    assert not im.compiled
    assert (got - ref).abs().max().item() < TOL


def test_a_captured_wider_sampler_serves_narrower_batches() -> None:
    """Greedy batches replay the sampled step's graph when only that one is captured (it
    takes the argmax on greedy rows); nothing wider captured: the batch's own mode."""
    from runtime.engines.embedded.forward import InferenceModel

    im = InferenceModel.__new__(InferenceModel)
    im._step_graphs = {(8, 256, "sample"): (None, None)}
    assert im._graph_mode(8, 256, "greedy") == "sample"
    assert im._graph_mode(8, 256, "sample") == "sample"
    assert im._graph_mode(8, 256, "truncate") == "truncate"
    assert im._graph_mode(4, 256, "greedy") == "greedy"


def test_layers_share_one_rope_table_and_one_gather_per_step() -> None:
    """OLMo-core gives each block its own RoPE module; equal tables are one table, so a
    decode step gathers its sin/cos rows once, not once per layer (each gather is a kernel
    in the captured step)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class CountIndex(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if func is torch.ops.aten.index.Tensor:
                self.count += 1
            return func(*args, **(kwargs or {}))

    counts = {}
    for layers in (2, 6):
        loaded = build_tiny("dense", seed=1, n_layers=layers)
        im = InferenceModel(loaded.model, max_slots=2, capacity=64)
        assert len({id(layer.rope) for layer in im.layers}) == layers
        im.prefill_batch([[1, 2, 3], [4, 5]], [0, 1])
        assert len(im._rope_tables) == 1
        with CountIndex() as mode:
            im.decode(torch.tensor([6, 7]), torch.tensor([3, 2]))
        counts[layers] = mode.count
    assert counts[2] == counts[6] == 2  # the step's sin and cos rows


@pytest.mark.parametrize("kind", ["dense", "moe"])
def test_rows_after_a_cached_prefix_and_fresh_rows_prefill_apart(kind, monkeypatch):
    """A batch where only some rows continue a cached prefix: the fresh rows take the plain
    prefill, only the continuing rows take the continued (masked) one, and every row's
    logits, cache and routed experts match the model's own forward over the whole prompt,
    in the caller's row order."""
    loaded = build_tiny(kind, seed=7)
    gen = torch.Generator().manual_seed(8)
    seqs = [torch.randint(1, 128, (n,), generator=gen).tolist() for n in (9, 14, 6, 12)]
    starts = [0, 5, 0, 3]  # rows 1 and 3 hold their first tokens already
    im = InferenceModel(loaded.model, max_slots=4, capacity=32)
    for slot, (s, st) in enumerate(zip(seqs, starts, strict=True)):
        if st:
            im.prefill(s[:st], slot=slot)
    continued: list[int] = []
    real = im._prefill_continued
    monkeypatch.setattr(
        im, "_prefill_continued", lambda seqs_, *a: continued.append(len(seqs_)) or real(seqs_, *a)
    )
    last, full, experts = im.prefill_batch(
        [s[st:] for s, st in zip(seqs, starts, strict=True)],
        [0, 1, 2, 3],
        want_all=[False, True, True, False],
        starts=starts,
    )
    assert continued == [2]
    for b, (s, st) in enumerate(zip(seqs, starts, strict=True)):
        ref = _reference(loaded.model, s)
        assert (last[b] - ref[-1]).abs().max().item() < TOL, b
        if b in (1, 2):
            assert full[b] is not None and (full[b] - ref[st:]).abs().max().item() < TOL, b
        else:
            assert full[b] is None
        if experts is not None:
            assert experts[b].shape[0] == len(s) - st
    # and the caches hold every prompt: one decode step continues each row exactly
    nxt = [5, 6, 7, 8]
    logits, _ = im.decode(torch.tensor(nxt), torch.tensor([len(s) for s in seqs]))
    for b, s in enumerate(seqs):
        ref = _reference(loaded.model, [*s, nxt[b]])
        assert (logits[b] - ref[-1]).abs().max().item() < TOL, b
