"""Packing: document isolation (packed logits == unpacked logits), targets, row planning."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("olmo_core")

from runtime.models import load_model  # noqa: E402
from runtime.models.attention import document_mask, set_attention_backend  # noqa: E402
from runtime.trainer import Sample, pack_samples, plan_rows  # noqa: E402
from runtime.trainer.packing import IGNORE  # noqa: E402


def _sample(g: torch.Generator, p: int, r: int, vocab: int, adv: float = 1.0) -> Sample:
    ids = torch.randint(0, vocab, (p + r,), generator=g).tolist()
    return Sample(prompt_ids=ids[:p], response_ids=ids[p:], advantage=adv)


@pytest.mark.parametrize(
    ("name", "backend"), [("tiny", "sdpa"), ("tiny-moe", "sdpa"), ("tiny", "flex")]
)
def test_packed_logits_equal_unpacked(name: str, backend: str) -> None:
    lm = load_model(f"builtin:{name}")
    set_attention_backend(lm.model, backend)
    vocab = lm.tokenizer.vocab_size
    g = torch.Generator().manual_seed(1)
    # lengths > the sliding window (16) so window + document masks interact
    samples = [_sample(g, 7, 20, vocab), _sample(g, 3, 2, vocab), _sample(g, 12, 9, vocab)]
    (row,) = pack_samples(samples, max_tokens=1000)
    assert row.doc_lens == [27, 5, 21]
    with torch.no_grad():
        packed = lm.model(row.input_ids[None], **row.model_kwargs(torch.device("cpu")))[0]
        offset = 0
        for s in samples:
            ids = torch.tensor(s.prompt_ids + s.response_ids)[None]
            alone = lm.model(ids)[0]
            n = ids.shape[1]
            assert torch.allclose(packed[offset : offset + n], alone, atol=1e-5), name
            offset += n
        # without document masking the later documents see earlier ones: logits differ
        leaky = lm.model(row.input_ids[None])[0]
        assert not torch.allclose(leaky[27:32], packed[27:32], atol=1e-4)


def test_attention_backend_choices() -> None:
    lm = load_model("builtin:tiny")
    assert set_attention_backend(lm.model, "flex") == set_attention_backend(lm.model, "torch") > 0
    with pytest.raises(ValueError, match="one of"):
        set_attention_backend(lm.model, "xformers")
    try:
        import flash_attn  # noqa: F401
    except ImportError:
        with pytest.raises(RuntimeError, match="flash-attn package"):
            set_attention_backend(lm.model, "flash")


def test_targets_and_masks_align() -> None:
    s1 = Sample([1, 2, 3], [4, 5], advantage=0.5, rollout_logprobs=[-0.1, -0.2])
    s2 = Sample([6], [7, 8, 9], advantage=-1.0, loss_mask=[1, 0, 1])
    (row,) = pack_samples([s1, s2], max_tokens=64)
    assert row.input_ids.tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert row.targets.tolist() == [IGNORE, IGNORE, 4, 5, IGNORE, 7, 8, 9, IGNORE]
    assert row.loss_mask.tolist() == [0, 0, 1, 1, 0, 1, 0, 1, 0]
    assert row.advantages.tolist() == [0, 0, 0.5, 0.5, 0, -1, -1, -1, 0]
    assert row.sample_index.tolist() == [-1, -1, 0, 0, -1, 1, 1, 1, -1]
    rl = row.rollout_logprobs
    assert rl[2].item() == pytest.approx(-0.1) and torch.isnan(rl[5])


def test_plan_rows_first_fit_and_oversize() -> None:
    assert plan_rows([5, 5, 5], None) == [[0], [1], [2]]
    assert plan_rows([6, 5, 4, 3], 10) == [[0, 2], [1, 3]]
    assert plan_rows([20, 3], 10) == [[0], [1]]  # oversize sample: own row, not truncated


def test_sample_validation() -> None:
    with pytest.raises(ValueError, match="rollout_logprobs"):
        Sample([1], [2, 3], advantage=0.0, rollout_logprobs=[0.0])
    with pytest.raises(ValueError, match="prompt"):
        Sample([], [2], advantage=0.0)


def test_document_mask_window() -> None:
    cu = torch.tensor([0, 3, 5], dtype=torch.int32)
    m = document_mask(cu, 1, 5, (1, 0))[0, 0]
    expected = torch.tensor(
        [
            [1, 0, 0, 0, 0],
            [1, 1, 0, 0, 0],
            [0, 1, 1, 0, 0],
            [0, 0, 0, 1, 0],
            [0, 0, 0, 1, 1],
        ],
        dtype=torch.bool,
    )
    assert torch.equal(m, expected)


def test_trainer_honours_attention_backend(tmp_path: Path) -> None:
    from compiled_run import edited_contract

    from runtime.models.attention import FlexDocAttentionBackend
    from runtime.trainer import Trainer, TrainerConfig

    # the rules keep flex to GPUs; the trainer carries it out wherever it is asked for
    contract = edited_contract(tmp_path, {"trainer.attention_backend": "flex"})
    cfg = TrainerConfig.from_contract(contract)
    assert cfg.attention_backend == "flex"
    trainer = Trainer(cfg)
    try:
        kinds = {type(m) for m in trainer.model.modules() if "Backend" in type(m).__name__}
        assert kinds == {FlexDocAttentionBackend}
    finally:
        trainer.close()
