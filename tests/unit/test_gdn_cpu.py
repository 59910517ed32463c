"""The torch paths of GatedDeltaNet (``runtime.models.gdn_cpu``) against independent
implementations: transformers' olmo_hybrid reference functions, fla's recurrent reference,
and OLMo-core's own module. (fla's triton kernels need a GPU; the GPU check lives in
benchmarks/gpu/gdn_parity.py.)"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("fla")
hf = pytest.importorskip("transformers.models.olmo_hybrid.modeling_olmo_hybrid")

from runtime.models import gdn_cpu  # noqa: E402

B, T, H, K, V = 2, 37, 4, 8, 16  # T crosses no chunk boundary twice; 37 is not a multiple


def _inputs(seed: int = 0, heads: int = H):
    g = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    q, k, v = r(B, T, heads, K), r(B, T, heads, K), r(B, T, heads, V)
    decay = -torch.rand(B, T, heads, generator=g) * 0.5
    beta = torch.rand(B, T, heads, generator=g) * 2.0
    return q, k, v, decay, beta


def _transformers_reference(name: str):
    fn = getattr(hf, name)
    return getattr(fn, "__wrapped__", fn)  # the torch function under the kernel wrapper


def test_chunk_rule_matches_transformers_reference_with_state() -> None:
    q, k, v, g, beta = _inputs()
    init = torch.randn(B, H, K, V, generator=torch.Generator().manual_seed(5)) * 0.1
    ours, s1 = gdn_cpu.chunk_gated_delta_rule_torch(
        q, k, v, g, beta, initial_state=init, output_final_state=True,
        use_qk_l2norm_in_kernel=True,
    )  # fmt: skip
    ref = _transformers_reference("torch_chunk_gated_delta_rule")
    theirs, s2 = ref(
        q, k, v, g=g, beta=beta, initial_state=init, output_final_state=True,
        use_qk_l2norm_in_kernel=True,
    )  # fmt: skip
    assert (ours - theirs).abs().max() < 1e-4
    assert (s1 - s2).abs().max() < 1e-4


def test_step_recurrence_continues_the_chunked_prefill() -> None:
    """Prefill T-5 tokens chunked, then 5 single steps from its final state: the same
    outputs as the whole sequence chunked (what the engine's decode relies on)."""
    q, k, v, g, beta = _inputs(1)
    whole, _ = gdn_cpu.chunk_gated_delta_rule_torch(q, k, v, g, beta, use_qk_l2norm_in_kernel=True)
    cut = T - 5
    _, state = gdn_cpu.chunk_gated_delta_rule_torch(
        q[:, :cut], k[:, :cut], v[:, :cut], g[:, :cut], beta[:, :cut],
        output_final_state=True, use_qk_l2norm_in_kernel=True,
    )  # fmt: skip
    for t in range(cut, T):
        o, state = gdn_cpu.gated_delta_step(
            gdn_cpu.l2norm(q[:, t]), gdn_cpu.l2norm(k[:, t]), v[:, t], g[:, t], beta[:, t], state
        )
        assert (o - whole[:, t]).abs().max() < 1e-4, t


def test_packed_documents_keep_their_own_state() -> None:
    q, k, v, g, beta = _inputs(2)
    cu = torch.tensor([0, 10, T, T + 20, 2 * T])  # row 0: two documents; row 1: two more
    packed, states = gdn_cpu.chunk_gated_delta_rule_torch(
        q, k, v, g, beta, output_final_state=True, use_qk_l2norm_in_kernel=True, cu_seqlens=cu
    )
    flat = [t.reshape(1, B * T, *t.shape[2:]) for t in (q, k, v, g, beta)]
    out = packed.reshape(1, B * T, H, V)
    for i, (a, b) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True)):
        alone, s = gdn_cpu.chunk_gated_delta_rule_torch(
            *(t[:, a:b] for t in flat), output_final_state=True, use_qk_l2norm_in_kernel=True
        )
        assert (out[:, a:b] - alone).abs().max() < 1e-5
        assert (states[i] - s[0]).abs().max() < 1e-5


def test_conv_and_gated_norm_match_transformers() -> None:
    gen = torch.Generator().manual_seed(3)
    x, w = torch.randn(B, T, 24, generator=gen), torch.randn(24, 4, generator=gen)
    ours, _ = gdn_cpu.causal_conv1d_torch(x, w, None, "silu")
    theirs = hf.causal_conv1d_fn(x.transpose(1, 2), w, None, activation="silu").transpose(1, 2)
    assert (ours - theirs).abs().max() < 1e-5
    norm = hf.OlmoHybridRMSNormGated(V, eps=1e-5)
    torch.nn.init.normal_(norm.weight, generator=gen)
    o, gate = torch.randn(B, T, V, generator=gen), torch.randn(B, T, V, generator=gen)
    ours_n = gdn_cpu.rms_norm_gated_torch(o, gate, norm.weight, 1e-5, "silu")
    assert (ours_n - norm(o, gate)).abs().max() < 1e-5


def test_olmo_core_module_runs_and_learns_on_cpu() -> None:
    """OLMo-core's GatedDeltaNet (fla kernels on GPU) builds and back-propagates here."""
    from olmo_core.nn.attention.recurrent import GatedDeltaNetConfig

    gdn_cpu.install_cpu_gdn_fallbacks()
    torch.manual_seed(0)
    cfg = GatedDeltaNetConfig(n_heads=2, n_v_heads=4, head_dim=8)
    layer = cfg.build(d_model=32, layer_idx=0, n_layers=1)
    x = torch.randn(2, 9, 32, requires_grad=True)
    y = layer(x)
    assert y.shape == x.shape
    y.square().mean().backward()
    assert x.grad is not None and layer.A_log.grad is not None
    assert all(p.grad is not None for p in layer.parameters())
