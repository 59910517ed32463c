"""Checkpoints: atomic save, retention, mismatch refusal, exact resume."""

from __future__ import annotations

import json
import random

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("olmo_core")
np = pytest.importorskip("numpy")

from runtime.checkpoints import (  # noqa: E402
    COMPLETE,
    CheckpointManager,
    CheckpointMismatch,
    CheckpointWriteError,
    latest_complete,
    list_complete,
    load,
)
from runtime.models import load_model, state_checksum  # noqa: E402
from runtime.trainer import Sample, Trainer, TrainerConfig  # noqa: E402


def _samples(tok, seed: int) -> list[Sample]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(4):
        prompt = torch.randint(10, 200, (5,), generator=g).tolist()
        resp = torch.randint(10, 200, (3,), generator=g).tolist() + [tok.eos_token_id]
        out.append(Sample(prompt, resp, advantage=[1.0, -1.0, 0.5, -0.5][i]))
    return out


@pytest.fixture(scope="module")
def trainer():
    tr = Trainer(TrainerConfig(lr=1e-3, schedule="cosine", warmup_steps=1, total_steps=10, seed=1))
    tr.train_step(_samples(tr.loaded.tokenizer, 0))
    return tr


def test_save_layout_and_load(trainer, tmp_path) -> None:
    mgr = CheckpointManager(tmp_path, interval=2)
    extra = {"data_cursor": 17, "policy_version": trainer.policy_version}
    path = mgr.save(trainer.step, trainer, extra=extra, digest="sha256:abc")
    assert path.name == "step-000001" and (path / COMPLETE).is_file()
    assert not list(tmp_path.glob("*.tmp"))
    data = load(path, expect_topology=trainer.topology(), expect_digest="sha256:abc")
    assert data.step == 1 and data.extra == extra
    assert data.topology == {"world_size": 1, "expert_parallel": 1, "device_kind": "cpu"}
    assert state_checksum(data.model_state) == trainer.publication_checksum()
    assert data.rng is not None and set(data.rng) >= {"python", "numpy", "torch"}
    # the model part is a native model dir that load_model reads (for engines / export)
    lm = load_model(str(path))
    assert state_checksum(lm.model.state_dict()) == trainer.publication_checksum()
    assert mgr.should_save(2) and mgr.should_save(4) and not mgr.should_save(3)
    assert not CheckpointManager(tmp_path, interval=None).should_save(2)


def test_mismatch_is_refused(trainer, tmp_path) -> None:
    path = CheckpointManager(tmp_path).save(3, trainer, digest="sha256:abc")
    with pytest.raises(CheckpointMismatch, match="spec digest"):
        load(path, expect_digest="sha256:other")
    topo = {**trainer.topology(), "world_size": 4}
    with pytest.raises(CheckpointMismatch, match="world_size: checkpoint 1 vs run 4"):
        load(path, expect_topology=topo)
    with pytest.raises(CheckpointMismatch, match="device_kind"):
        load(path, expect_topology={**trainer.topology(), "device_kind": "cuda"})


def test_interrupted_save_never_wins(trainer, tmp_path) -> None:
    mgr = CheckpointManager(tmp_path, keep_last=3)
    good = mgr.save(2, trainer)
    # a crash mid-save leaves a .tmp dir and a step dir without the COMPLETE marker
    (tmp_path / "step-000005.tmp").mkdir()
    (tmp_path / "step-000005.tmp" / "meta.json").write_text("{}")
    (tmp_path / "step-000004").mkdir()
    assert latest_complete(tmp_path) == good
    with pytest.raises(FileNotFoundError, match="not a complete checkpoint"):
        load(tmp_path / "step-000004")
    # saving the same step again replaces it atomically
    again = mgr.save(2, trainer)
    assert again == good and (good / COMPLETE).is_file()
    assert latest_complete(tmp_path) == good


def test_retention_keep_last_and_keep_every(trainer, tmp_path) -> None:
    mgr = CheckpointManager(tmp_path, keep_last=2, keep_every=4)
    for step in range(1, 8):
        mgr.save(step, trainer)
    assert [s for s, _ in list_complete(tmp_path)] == [4, 6, 7]
    assert latest_complete(tmp_path).name == "step-000007"
    assert latest_complete(tmp_path / "missing") is None


def test_resume_continues_exactly(tmp_path) -> None:
    cfg = TrainerConfig(lr=1e-3, schedule="linear", total_steps=6, seed=2)
    a = Trainer(cfg)
    tok = a.loaded.tokenizer
    a.train_step(_samples(tok, 0))
    mgr = CheckpointManager(tmp_path)
    mgr.save(a.step, a, extra={"cursor": 4})
    expect_rng = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    ma = a.train_step(_samples(tok, 1))

    random.seed(999)
    np.random.seed(999)
    torch.manual_seed(999)
    b = Trainer(cfg)
    data = mgr.restore(b)
    # the draws right after restore equal the draws right after save
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expect_rng
    assert data is not None and data.extra == {"cursor": 4}
    assert b.step == 1 and b.policy_version == 1
    mb = b.train_step(_samples(tok, 1))
    assert b.publication_checksum() == a.publication_checksum()
    assert mb["lr"] == ma["lr"] and mb["loss"] == ma["loss"]
    meta = json.loads((mgr.latest_complete() / "meta.json").read_text())
    assert meta["step"] == 1


def test_restore_without_checkpoint_returns_none(trainer, tmp_path) -> None:
    assert CheckpointManager(tmp_path / "empty").restore(trainer) is None


@pytest.mark.parametrize("disk_full", [True, False])
def test_a_failed_write_is_one_line_and_loses_nothing(trainer, tmp_path, monkeypatch, disk_full):
    """A save that cannot write (here a real short write: the file size limit) removes its
    partial directory, keeps the checkpoints before it, and says why in one line: a full
    disk as such (torch's zip writer reports it only as "unexpected pos")."""
    import resource
    import shutil
    import signal

    mgr = CheckpointManager(tmp_path, keep_last=3)
    good = mgr.save(2, trainer)
    if disk_full:
        real = shutil.disk_usage
        monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=10 * 2**20))
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, hard))
    try:
        with pytest.raises(CheckpointWriteError) as info:
            mgr.save(4, trainer)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old)
    message = str(info.value)
    assert "\n" not in message and "step-000004" in message
    if disk_full:
        assert "the disk is full" in message and "output.root" in message
    else:
        assert "disk is full" not in message
        assert "File too large" in message or "unexpected pos" in message
    assert not (tmp_path / "step-000004.tmp").exists() and not (tmp_path / "step-000004").exists()
    assert latest_complete(tmp_path) == good
    assert load(good).step == 2
