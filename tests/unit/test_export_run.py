"""`rlc export` of a sharded trainer's checkpoint (dist/ shards, no model dir beside them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("olmo_core")

from compiled_run import compile_manifest  # noqa: E402

from runtime.entrypoints.export import ExportError, export_run  # noqa: E402
from runtime.models import load_model  # noqa: E402


def test_sharded_checkpoint_exports_through_the_filed_manifest(tmp_path: Path) -> None:
    from olmo_core.distributed.checkpoint import save_model_and_optim_state

    lm = load_model("builtin:tiny", seed=4)
    with torch.no_grad():
        for p in lm.model.parameters():
            p.add_(0.01 * torch.randn_like(p))  # "trained": not the source's init
    run = tmp_path / "run"
    ckpt = run / "checkpoints" / "step-000002"
    save_model_and_optim_state(str(ckpt / "dist"), lm.model)
    # the run's own manifest, compiled by the real compiler, names the model
    manifest = compile_manifest(tmp_path / "spec", model={"source": "builtin:tiny"})
    digest = manifest["digest"]
    (ckpt / "meta.json").write_text(json.dumps({"step": 2, "digest": digest}))
    (ckpt / "COMPLETE").write_text("{}")
    with pytest.raises(ExportError, match="no manifest"):
        export_run(run, tmp_path / "out0")
    (run / "manifests").mkdir()
    short = digest.removeprefix("sha256:")[:16]
    (run / "manifests" / f"t-{short}.json").write_text(json.dumps(manifest))
    step, out = export_run(run, tmp_path / "out")
    assert step == 2
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    x = torch.randint(0, 50, (1, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (hf(x).logits - lm.model(x)).abs().max() < 1e-5
