"""Disk snapshots in HF layout (what SGLang's ``/update_weights_from_disk`` loads), loaded by
an embedded engine process; the behavioural (logprob) audit used where an engine can show
neither a checksum nor its weights."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("olmo_core")
pytest.importorskip("transformers")

from runtime.engines.embedded.launch import start_embedded  # noqa: E402
from runtime.engines.process import free_port  # noqa: E402
from runtime.models import state_checksum  # noqa: E402
from runtime.publication.audit import WeightAuditError, audit, audit_by_logprobs  # noqa: E402
from runtime.publication.disk import DiskPublisher, hf_snapshot  # noqa: E402
from runtime.rollout.driver import _logprob_fn  # noqa: E402
from runtime.trainer import Trainer, TrainerConfig  # noqa: E402


class _Wrapped:
    def __init__(self, inner: Trainer) -> None:
        self.inner = inner


def test_hf_snapshot_loads_on_the_engine_and_audits(tmp_path) -> None:
    trainer = Trainer(TrainerConfig(model_source="builtin:tiny", seed=5))
    state = trainer.state_dict_for_publication()
    port = free_port("127.0.0.1")
    proc = start_embedded(
        "builtin:tiny", port=port, log_path=tmp_path / "engine.log", threads=1, seed=0
    )
    url = f"http://127.0.0.1:{port}"
    try:
        writer = hf_snapshot(trainer.model, trainer.loaded.tokenizer, None)
        res = DiskPublisher(tmp_path / "pub", [url], 60, writer=writer).publish(state, 2)
        files = {p.name for p in res.path.iterdir()}
        assert {"config.json", "model.safetensors"} <= files
        assert any(f.startswith("tokenizer") for f in files)
        from safetensors import safe_open

        with safe_open(str(res.path / "model.safetensors"), "pt") as f:
            assert "model.layers.0.self_attn.q_proj.weight" in set(f.keys())
        assert json.loads((res.path / "config.json").read_text())["architectures"]
        audit(state_checksum(state), [url], 60)  # the engine holds exactly these weights
        fn = _logprob_fn(_Wrapped(trainer))
        assert audit_by_logprobs(url, fn, 60) < 1e-3
        # other weights on the engine: the behavioural audit catches them
        other = {k: v + 0.05 * torch.randn_like(v) for k, v in state.items()}
        DiskPublisher(tmp_path / "pub", [url], 60, writer=writer).publish(other, 3)
        with pytest.raises(WeightAuditError, match="nats/token"):
            audit_by_logprobs(url, fn, 60)
    finally:
        proc.stop()
