"""``trainer.row_specialization = "static"``: one row shape for every step, same update."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("olmo_core")

from runtime.trainer import GRPOConfig, Sample, Trainer, TrainerConfig  # noqa: E402
from runtime.trainer.packing import IGNORE, pack_samples, pad_row  # noqa: E402


def _batch(seed: int, vocab: int) -> list[Sample]:
    """Groups of different prompt/response lengths (so dynamic rows differ per step)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for p, r in [(5 + seed, 3), (4, 7 + seed), (9, 2), (3, 11 - seed)]:
        ids = torch.randint(1, vocab, (p + r,), generator=g).tolist()
        adv = float(torch.randn((), generator=g))
        out.append(Sample(ids[:p], ids[p:], adv, rollout_logprobs=[-1.0] * r))
    return out


def _run(row_specialization: str, packing: bool, **extra: Any) -> tuple[Any, list[Any], list]:
    cfg = TrainerConfig(
        model_source=extra.pop("model_source", "builtin:tiny"),
        lr=1.0,
        adam_eps=1.0,  # the step is linear in the gradient: compares gradients
        clip_grad=None,
        seed=3,
        sequence_packing=packing,
        packing_max_tokens=48,
        max_row_tokens=48,
        row_specialization=row_specialization,
        grpo=GRPOConfig(entropy_coef=0.01),
        **extra,
    )
    tr = Trainer(cfg)
    shapes: list[tuple[int, ...]] = []
    tr.model.register_forward_pre_hook(lambda _m, args: shapes.append(tuple(args[0].shape)))
    vocab = tr.loaded.tokenizer.vocab_size
    metrics = [tr.train_step(_batch(step, vocab)) for step in range(2)]
    params = {k: v.clone() for k, v in tr.state_dict_for_publication().items()}
    return params, metrics, shapes


@pytest.mark.parametrize("packing", [True, False])
def test_static_rows_keep_one_shape_and_the_same_update(packing: bool) -> None:
    dyn_params, dyn_metrics, dyn_shapes = _run("dynamic", packing)
    st_params, st_metrics, st_shapes = _run("static", packing)
    assert set(st_shapes) == {(1, 48)}  # every forward of every step: one shape
    assert len(set(dyn_shapes)) > 1  # dynamic rows follow their samples
    for d, s in zip(dyn_metrics, st_metrics, strict=True):
        for key in ("loss", "pg_loss", "entropy", "response_tokens", "tokens", "rows"):
            if key in d:
                assert s[key] == pytest.approx(d[key], rel=1e-5, abs=1e-6), key
    diff = max(float((dyn_params[k] - st_params[k]).abs().max()) for k in dyn_params)
    assert diff < 1e-5


def test_static_rows_with_router_losses_equal_dynamic() -> None:
    """Padding tokens are routed but left out of the router aux / z losses."""
    extra = {"model_source": "builtin:tiny-moe", "router_aux_loss_coef": 0.1}
    dyn_params, dyn_metrics, _ = _run("dynamic", True, **dict(extra))
    st_params, st_metrics, st_shapes = _run("static", True, **dict(extra))
    assert set(st_shapes) == {(1, 48)}
    assert st_metrics[0]["router/aux_loss"] == pytest.approx(
        dyn_metrics[0]["router/aux_loss"], rel=1e-5
    )
    diff = max(float((dyn_params[k] - st_params[k]).abs().max()) for k in dyn_params)
    assert diff < 1e-5


def test_padding_is_its_own_document_without_loss() -> None:
    samples = [Sample([1, 2, 3], [4, 5], 1.0), Sample([6, 7], [8], -1.0)]
    (row,) = pack_samples(samples, 64)
    padded = pad_row(row, 16)
    assert padded.num_tokens == 16 and padded.real_tokens == row.num_tokens == 8
    assert padded.doc_lens == [5, 3, 8]  # the padding attends only to itself
    assert bool((padded.targets[8:] == IGNORE).all())
    assert float(padded.loss_mask[8:].abs().sum()) == 0.0
    assert torch.equal(padded.loss_mask[:8], row.loss_mask)
    assert pad_row(padded, 10) is padded  # never cut
