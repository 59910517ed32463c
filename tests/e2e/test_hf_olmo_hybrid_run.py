"""`rlc run` from an olmo_hybrid HF checkpoint written by transformers (GatedDeltaNet layers
beside attention ones): the embedded engine serves it with each sequence's recurrent state
(started, as on a GPU, on zeros while it read the checkpoint), the trainer steps on its
rollouts, and the final HF export loads in transformers with the newest checkpoint's
logits (that one GRPO update moves the weights is checked in
tests/unit/test_hf_families.py, where the rewards are chosen)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rt_helpers import SMALL, compile_manifest, make_hf_checkpoint, records, run

pytestmark = pytest.mark.slow

N = 2


def test_olmo_hybrid_hf_source_trains_and_exports(tmp_path: Path, monkeypatch) -> None:
    # the GPU start-up order on the CPU: the trainer beside the engines, both on zeros
    # while they read the checkpoint (by default a CPU run loads first)
    monkeypatch.setenv("RLC_TRAINER_BESIDE_ENGINES", "1")
    monkeypatch.setenv("RLC_ENGINE_DEFER_WEIGHTS", "1")
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    src = make_hf_checkpoint(tmp_path / "olmo_hybrid", "olmo_hybrid")
    overrides = (
        *SMALL,
        f"training.num_rollouts={N}",
        f'model.source="{src}"',
        "output.export_hf=true",
        "inference.num_engines=1",
    )
    manifest = compile_manifest(tmp_path, overrides)
    facts = json.loads(Path(manifest).read_text())["facts"]
    assert facts["model_recurrent_layers"] == 1
    code, out = run(manifest, "--resume", "never", timeout=240)
    assert code == 0, out[-3000:]
    # the engine started on zeros and copied the checkpoint in before the weight audit;
    # the trainer was built beside it and filled with the same checkpoint (the audit passed)
    engine_line = next(ln for ln in out.splitlines() if "rlc: engine start-up (" in ln)
    assert "model (allocated)" in engine_line and "wait and copy" in engine_line
    assert "rlc: trainer start-up (beside the engines): build" in out
    root = tmp_path / "run"
    assert [r["collection"] for r in records(root)] == list(range(N))

    from runtime.models import load_model
    from runtime.models.gdn_cpu import install_transformers_cpu_fallbacks

    install_transformers_cpu_fallbacks()
    newest = sorted((root / "checkpoints").glob("step-*"))[-1]
    ours = load_model(str(newest / "model")).model
    x = torch.randint(0, 60, (2, 16), generator=torch.Generator().manual_seed(0))
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        str(root / "export-hf"), dtype=torch.float32
    )
    with torch.no_grad():
        diff = (hf.eval()(x).logits - ours(x)).abs().max().item()
    assert diff < 1e-4, diff
