"""MoE router replay and router aux/z-loss controls in the trainer (CPU, builtin:tiny-moe)."""

from __future__ import annotations

import base64
from contextlib import contextmanager
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("olmo_core")

from compiled_run import edited_contract  # noqa: E402
from olmo_core.nn.moe.router import MoERouter  # noqa: E402

from runtime.models import load_model, state_checksum  # noqa: E402
from runtime.trainer import Sample, Trainer, TrainerConfig, pack_samples  # noqa: E402
from runtime.trainer.replay import (  # noqa: E402
    as_routed_experts,
    moe_routers,
    router_losses,
    router_tap,
    routing_shape,
)

MOE = "builtin:tiny-moe"


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _samples() -> list[Sample]:
    return [
        Sample([1, 5, 9, 13, 17], [21, 25, 29, 33], 1.0),
        Sample([2, 6, 10], [14, 18, 22, 26, 30, 34], -0.5),
        Sample([3, 7, 11, 15], [19, 23], 0.25),
    ]


def _trainer(**kw) -> Trainer:
    return Trainer(TrainerConfig(model_source=MOE, lr=1e-3, **kw))


def own_routing(model: torch.nn.Module, sample: Sample, device: str = "cpu") -> torch.Tensor:
    """``(tokens - 1, layers, top_k)`` experts the model itself picks (what an engine records);
    on CUDA under the trainer's bf16 autocast."""
    (row,) = pack_samples([sample], None)
    was = model.training
    model.eval()
    with (
        torch.no_grad(),
        router_tap(model, collect=True) as tap,
        torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"),
    ):
        model(row.input_ids.unsqueeze(0).to(device))
    model.train(was)
    ids = torch.stack([r.indices.reshape(-1, r.indices.shape[-1]) for r in tap.records], 1)
    return ids[:-1].cpu().clone()


def rotated(ids: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Different experts at every (token, layer): the set {e+1 mod E} never equals {e}."""
    return (ids + 1) % num_experts


@contextmanager
def forced_experts(model: torch.nn.Module, ids: torch.Tensor):
    """Independent reference: replace MoERouter.forward with one that uses ``ids``."""
    routers = moe_routers(model)
    index = {id(r): layer for layer, r in enumerate(routers)}
    original = MoERouter.forward

    def forward(self, x, *, loss_div_factor=None):
        del loss_div_factor
        scores = self.get_expert_logits(x).float().softmax(dim=-1)
        layer = ids[:, index[id(self)], :]
        n = x.shape[1]
        free = torch.topk(scores, self.top_k, dim=-1).indices[0]
        idx = torch.cat([layer[:n], free[layer.shape[0] :]]).unsqueeze(0)
        counts = torch.bincount(idx.reshape(-1), minlength=self.num_experts)
        return scores.gather(-1, idx), idx, counts, None

    MoERouter.forward = forward
    try:
        yield
    finally:
        MoERouter.forward = original


def test_routing_shape_and_wire_decoding() -> None:
    tr = _trainer()
    layers, top_k = routing_shape(tr.model)
    assert (layers, top_k) == (2, 2)
    ids = own_routing(tr.model, _samples()[0])
    wire = base64.b64encode(ids.numpy().astype("<i4").tobytes()).decode()
    assert torch.equal(as_routed_experts(wire, layers, top_k), ids)
    assert torch.equal(as_routed_experts(ids.tolist(), layers, top_k), ids)
    assert as_routed_experts("", layers, top_k) is None
    with pytest.raises(ValueError, match="shape"):
        as_routed_experts(ids[:, :1], layers, top_k)
    with pytest.raises(ValueError, match="multiple"):
        as_routed_experts(base64.b64encode(b"abc").decode(), layers, top_k)


def test_replaying_own_routing_is_exact() -> None:
    plain, replay = _trainer(), _trainer(router_replay=True)
    samples = _samples()
    replayed = [
        Sample(**{**vars(s), "routed_experts": own_routing(replay.model, s)}) for s in samples
    ]
    ref = plain.compute_logprobs(samples)
    got = replay.compute_logprobs(replayed)
    assert all(torch.equal(a, b) for a, b in zip(ref, got, strict=True))
    m_plain = plain.train_step(samples)
    m_replay = replay.train_step(replayed)
    assert m_replay["replay/route_mismatch"] == 0.0
    assert m_replay["replay/decisions"] == sum(s.num_tokens - 1 for s in samples) * 2
    assert m_replay["loss"] == m_plain["loss"]
    assert state_checksum(plain.model.state_dict()) == state_checksum(replay.model.state_dict())


def test_replaying_other_experts_matches_forced_reference() -> None:
    tr = _trainer(router_replay=True)
    samples = _samples()
    num_experts = moe_routers(tr.model)[0].num_experts
    other = [rotated(own_routing(tr.model, s), num_experts) for s in samples]
    replayed = [
        Sample(**{**vars(s), "routed_experts": o}) for s, o in zip(samples, other, strict=True)
    ]
    free = tr.compute_logprobs(samples)  # no recorded routing: routes freely
    got = tr.compute_logprobs(replayed)
    one = Trainer(TrainerConfig(model_source=MOE), loaded=tr.loaded)  # same modules, no replay
    for s, o, g, f in zip(samples, other, got, free, strict=True):
        assert not torch.allclose(g, f)
        with forced_experts(one.model, o):
            (ref,) = one.compute_logprobs([s])
        torch.testing.assert_close(g, ref, rtol=0, atol=1e-6)
    m = tr.train_step(replayed)
    assert m["replay/route_mismatch"] == 1.0


def test_packed_replay_equals_unpacked_replay() -> None:
    samples = _samples()
    packed = _trainer(router_replay=True, packing_max_tokens=64)
    unpacked = _trainer(router_replay=True, sequence_packing=False)
    num_experts = moe_routers(packed.model)[0].num_experts
    routed = []
    for i, s in enumerate(samples):
        ids = own_routing(packed.model, s)
        if i == 1:
            ids[2:5] = rotated(ids[2:5], num_experts)  # partly different routing
        routed.append(Sample(**{**vars(s), "routed_experts": ids}))
    assert len(packed._rows(routed)) == 1 and len(unpacked._rows(routed)) == 3
    for a, b in zip(
        packed.compute_logprobs(routed), unpacked.compute_logprobs(routed), strict=True
    ):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    mp, mu = packed.train_step(routed), unpacked.train_step(routed)
    assert mp["replay/route_mismatch"] == mu["replay/route_mismatch"] == pytest.approx(6 / 42)
    assert mp["loss"] == pytest.approx(mu["loss"], abs=1e-6)


def test_pack_samples_lays_out_routings_at_packed_positions() -> None:
    samples = _samples()
    routed = [torch.full((s.num_tokens - 1, 2, 2), i) for i, s in enumerate(samples)]
    routed[2] = None
    (row,) = pack_samples(samples, 64, routed)
    assert row.routed_experts is not None and row.replay_mask is not None
    expected_mask, expected_ids = [], []
    for i, s in enumerate(samples):
        n = s.num_tokens
        expected_mask += [routed[i] is not None] * (n - 1) + [False]
        expected_ids += [i if routed[i] is not None else 0] * (n - 1) + [0]
    assert row.replay_mask.tolist() == expected_mask
    assert row.routed_experts[:, 0, 0].tolist() == expected_ids
    resp = [j >= len(s.prompt_ids) for s in samples for j in range(s.num_tokens)]
    assert row.response_mask.tolist() == resp


def _router_grads(tr: Trainer, samples: list[Sample]) -> list[torch.Tensor]:
    grads: list[torch.Tensor] = []
    handles = [
        r.weight.register_hook(lambda g: grads.append(g.detach().clone())) for r in tr.routers
    ]
    try:
        tr.train_step(samples)
    finally:
        for h in handles:
            h.remove()
    return grads


@pytest.mark.parametrize("which", ["aux", "z"])
def test_router_loss_coef_controls_router_gradient(which: str) -> None:
    zero_adv = [Sample(**{**vars(s), "advantage": 0.0}) for s in _samples()]
    key = "router_aux_loss_coef" if which == "aux" else "router_z_loss_coef"
    off = _trainer(router_aux_loss_coef=0.0, router_z_loss_coef=0.0)
    on = _trainer(**{"router_aux_loss_coef": 0.0, "router_z_loss_coef": 0.0, key: 0.1})
    g_off, g_on = _router_grads(off, zero_adv), _router_grads(on, zero_adv)
    assert g_off and all(float(g.abs().max()) == 0.0 for g in g_off)
    assert all(float(g.abs().max()) > 0.0 for g in g_on)
    # the coefficient scales the gradient linearly (no other router-loss source)
    double = _trainer(**{"router_aux_loss_coef": 0.0, "router_z_loss_coef": 0.0, key: 0.2})
    for a, b in zip(g_on, _router_grads(double, zero_adv), strict=True):
        torch.testing.assert_close(2 * a, b)


def test_default_coefs_come_from_model_config() -> None:
    tr = _trainer()
    # builtin MoE config (OLMo-core keeps weight / n_layers on each router)
    assert (tr.aux_loss_coef, tr.z_loss_coef) == pytest.approx((0.01, 0.001))
    assert all(r.lb_loss_weight is None and r.z_loss_weight is None for r in tr.routers)
    m = tr.train_step(_samples())
    assert m["router/aux_loss"] > 0 and m["router/z_loss"] > 0
    assert "replay/route_mismatch" not in m


@pytest.mark.parametrize("which", ["aux", "z"])
def test_token_reduction_matches_olmo_core_builtin_loss(which: str) -> None:
    """One row, all tokens: our loss has OLMo-core's value and router gradient."""
    sample = _samples()[0]
    (row,) = pack_samples([sample], None)
    ids = row.input_ids.unsqueeze(0)
    ours = load_model(MOE).model.train()
    routers = moe_routers(ours)
    for r in routers:
        r.lb_loss_weight = r.z_loss_weight = None
    with router_tap(ours, collect=True) as tap:
        ours(ids)
    aux, z = router_losses(
        tap.records,
        routers,
        torch.ones(row.num_tokens, dtype=torch.bool),
        row.response_mask,
        aux_reduction="token",
        z_reduction="token",
        want_aux=which == "aux",
        want_z=which == "z",
    )
    (aux if which == "aux" else z).backward()
    theirs = load_model(MOE).model.train()
    per_layer = 1.0 / len(routers)  # OLMo-core's weight / n_layers
    for r in moe_routers(theirs):
        r.lb_loss_weight = per_layer if which == "aux" else None
        r.z_loss_weight = per_layer if which == "z" else None
        r.reset_metrics()
    (theirs(ids).sum() * 0.0).backward()
    for a, b in zip(routers, moe_routers(theirs), strict=True):
        torch.testing.assert_close(a.weight.grad, b.weight.grad, rtol=1e-5, atol=1e-7)
    unscaled = per_layer * sum(
        float(r.load_balancing_loss if which == "aux" else r.z_loss) for r in moe_routers(theirs)
    )
    assert float((aux if which == "aux" else z).detach()) == pytest.approx(unscaled, rel=1e-5)


def test_response_reduction_averages_response_tokens_only() -> None:
    samples = [_samples()[0]]
    tok = _trainer(router_aux_loss_coef=0.0, router_z_loss_coef=1e-3)
    resp = _trainer(
        router_aux_loss_coef=0.0, router_z_loss_coef=1e-3, router_z_loss_reduction="response"
    )
    (row,) = pack_samples(samples, None)
    with torch.no_grad(), router_tap(resp.model, collect=True) as tap:
        resp.model(row.input_ids.unsqueeze(0))
    per_token = sum(torch.logsumexp(r.logits[0], -1).square() for r in tap.records) / 2
    p = len(samples[0].prompt_ids)
    m_tok, m_resp = tok.train_step(samples), resp.train_step(samples)
    assert m_resp["router/z_loss"] == pytest.approx(float(per_token[p:].mean()), rel=1e-5)
    assert m_tok["router/z_loss"] == pytest.approx(float(per_token.mean()), rel=1e-5)
    assert m_tok["router/z_loss"] != pytest.approx(m_resp["router/z_loss"], rel=1e-4)


def test_config_validation_and_manifest_mapping(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="reduction"):
        _trainer(router_aux_loss_reduction="sequence")
    with pytest.raises(ValueError, match="MoE"):
        Trainer(TrainerConfig(model_source="builtin:tiny", router_replay=True))
    cfg = TrainerConfig.from_contract(
        edited_contract(
            tmp_path,
            {
                "model.source": MOE,
                "model.architecture": "moe",
                "trainer.router_replay": True,
                "trainer.router_aux_loss_coef": 0.0,
                "trainer.router_z_loss_coef": 1e-5,
                "trainer.router_aux_loss_reduction": "response",
                "trainer.router_z_loss_reduction": "token",
            },
        )
    )
    assert cfg.router_replay and cfg.router_aux_loss_reduction == "response"
    assert (cfg.router_aux_loss_coef, cfg.router_z_loss_coef) == (0.0, 1e-5)
    assert cfg.router_z_loss_reduction == "token"


def test_engine_recorded_routing_replays_without_mismatch() -> None:
    """End to end: embedded engine records experts, the trainer replays them on the same
    weights and agrees on every decision."""
    from runtime.engines.client import EngineClient
    from runtime.engines.embedded.inprocess import InProcessServer

    tr = _trainer(router_replay=True, router_aux_loss_coef=0.0, router_z_loss_coef=0.0)
    engine_model = load_model(MOE)  # same seed: same weights, separate modules
    assert state_checksum(engine_model.model.state_dict()) == state_checksum(tr.model.state_dict())
    prompts = [[1, 5, 9, 13], [2, 6, 10, 14, 18, 22]]
    with InProcessServer(engine_model, max_running_requests=2, context_length=64, seed=3) as srv:
        client = EngineClient(srv.url)
        outs = [
            client.generate(
                p,
                {"max_new_tokens": 6, "temperature": 1.0, "ignore_eos": True},
                return_routed_experts=True,
            )
            for p in prompts
        ]
    samples = []
    for o in outs:
        assert o.routed_experts
        ids = as_routed_experts(o.routed_experts, 2, 2)
        assert ids.shape[0] == len(o.prompt_ids) + len(o.output_ids) - 1
        samples.append(
            Sample(
                o.prompt_ids,
                o.output_ids,
                1.0,
                rollout_logprobs=o.logprobs,
                routed_experts=o.routed_experts,
            )
        )
    m = tr.train_step(samples)
    assert m["replay/decisions"] == sum(s.num_tokens - 1 for s in samples) * 2
    assert m["replay/route_mismatch"] == 0.0
    assert m["logprob_abs_diff"] < 1e-4


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_replay_on_cuda_kernels_with_bf16_autocast() -> None:
    """Same invariants on OLMo-core's CUDA MoE kernels (no CPU fallback), bf16 autocast."""
    plain = _trainer(device="cuda", router_aux_loss_coef=0.0, router_z_loss_coef=0.0)
    replay = _trainer(device="cuda", router_replay=True, router_aux_loss_coef=0.01)
    samples = _samples()
    own = [own_routing(replay.model, s, "cuda") for s in samples]
    same = [Sample(**{**vars(s), "routed_experts": o}) for s, o in zip(samples, own, strict=True)]
    ref = plain.compute_logprobs(samples)
    got = replay.compute_logprobs(same)
    assert all(torch.equal(a, b) for a, b in zip(ref, got, strict=True))
    num_experts = moe_routers(replay.model)[0].num_experts
    other = [
        Sample(**{**vars(s), "routed_experts": rotated(o, num_experts)})
        for s, o in zip(samples, own, strict=True)
    ]
    changed = replay.compute_logprobs(other)
    assert not all(torch.allclose(a, b) for a, b in zip(ref, changed, strict=True))
    m_same = replay.train_step(same)
    assert m_same["replay/route_mismatch"] == 0.0 and m_same["router/aux_loss"] > 0
    m_other = replay.train_step(other)
    assert m_other["replay/route_mismatch"] > 0.5
