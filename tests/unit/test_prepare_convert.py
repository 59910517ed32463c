"""OLMo-core checkpoints as sources: loaded with the hf_template tokenizer, converted for SGLang
by the preparation job, or refused there with the reason (hybrid MoE has no HF architecture)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("olmo_core")

from compiled_run import compile_manifest  # noqa: E402

from contract.run import RunContract, parse  # noqa: E402
from runtime.entrypoints.prepare import EXIT_USER, _convert  # noqa: E402
from runtime.models import load_model, state_checksum  # noqa: E402


def _olmo_core_checkpoint(root: Path, source: str) -> tuple[Path, Path, object]:
    """An OLMo-core trainer checkpoint (config.json + model_and_optim/) and a template dir."""
    from olmo_core.distributed.checkpoint import save_model_and_optim_state

    src = load_model(source, seed=3)
    ckpt, tpl = root / "ckpt", root / "tpl"
    save_model_and_optim_state(str(ckpt / "model_and_optim"), src.model)
    (ckpt / "config.json").write_text(json.dumps({"model": src.config.as_config_dict()}))
    src.tokenizer.save(tpl)
    return ckpt, tpl, src


def _manifest(ckpt: Path, tpl: Path, engine: str, prepared: Path) -> RunContract:
    """A compiled run on the checkpoint (the compiler reads its architecture); the engine
    and the preparation directory are set afterwards (SGLang runs need GPUs to compile)."""
    model = {"source": str(ckpt), "format": "olmo_core", "hf_template": str(tpl)}
    m = compile_manifest(prepared.parent / "spec", model=model)
    m["config"]["inference"]["engine"] = engine
    m["paths"]["prepared"] = str(prepared)
    return parse(m)


def test_hybrid_moe_checkpoint_loads_with_template_tokenizer(tmp_path: Path) -> None:
    ckpt, tpl, src = _olmo_core_checkpoint(tmp_path, "builtin:tiny-hybrid-moe")
    lm = load_model(str(ckpt), hf_template=str(tpl), architecture="hybrid_moe")
    assert lm.family == "hybrid_moe"
    assert state_checksum(lm.model.state_dict()) == state_checksum(src.model.state_dict())  # type: ignore[attr-defined]
    # embedded engines read it directly: preparation converts nothing
    assert _convert(_manifest(ckpt, tpl, "embedded", tmp_path / "prep")) == 0
    assert not (tmp_path / "prep").exists()


def test_sglang_conversion_of_hybrid_moe_is_refused(tmp_path: Path, capsys) -> None:
    ckpt, tpl, _ = _olmo_core_checkpoint(tmp_path, "builtin:tiny-hybrid-moe")
    assert _convert(_manifest(ckpt, tpl, "sglang", tmp_path / "prep")) == EXIT_USER
    err = capsys.readouterr().err
    assert "hybrid MoE" in err and "Traceback" not in err and err.count("\n") == 1


def test_sglang_conversion_writes_a_transformers_checkpoint(tmp_path: Path) -> None:
    ckpt, tpl, src = _olmo_core_checkpoint(tmp_path, "builtin:tiny")
    assert _convert(_manifest(ckpt, tpl, "sglang", tmp_path / "prep")) == 0
    out = tmp_path / "prep" / "hf"
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    x = torch.randint(0, 50, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        diff = (hf(x).logits - src.model(x)).abs().max().item()  # type: ignore[attr-defined]
    assert diff < 1e-5
    assert (out / "tokenizer.json").is_file()


@pytest.mark.parametrize("family", ["olmo3", "olmoe"])
def test_olmo_core_source_trains_exports_and_serves(tmp_path: Path, family: str) -> None:
    """An OLMo-core checkpoint whose tokenizer is only in hf_template: one GRPO update, then
    the HF export loads in transformers with our logits, and the embedded engine serves it."""
    from test_hf_families import _samples, write_hf_checkpoint

    from runtime.engines.embedded.forward import InferenceModel
    from runtime.models import export_hf
    from runtime.trainer import Trainer, TrainerConfig

    write_hf_checkpoint(tmp_path / "hf", family)
    ckpt, tpl, _ = _olmo_core_checkpoint(tmp_path, str(tmp_path / "hf"))
    assert not (ckpt / "tokenizer.json").exists()
    lm = load_model(str(ckpt), hf_template=str(tpl))
    assert lm.family == ("moe" if family == "olmoe" else "dense")
    cfg = TrainerConfig(model_source=str(ckpt), hf_template=str(tpl), lr=1e-2)
    trainer = Trainer(cfg, loaded=lm)
    trainer.train_step(_samples(lm.tokenizer))
    out = tmp_path / "export"
    export_hf(lm, lm.tokenizer, out, state_dict=trainer.state_dict_for_publication())
    assert json.loads((out / "config.json").read_text())["model_type"] == family
    assert (out / "tokenizer.json").is_file()
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    x = torch.randint(
        0, lm.tokenizer.vocab_size, (1, 20), generator=torch.Generator().manual_seed(0)
    )
    trainer.model.eval()
    with torch.no_grad():
        ours = trainer.model(x)
        assert (hf(x).logits - ours).abs().max().item() < 2e-5
    im = InferenceModel(trainer.model, max_slots=1, capacity=32)
    logits, _ = im.prefill(x[0].tolist(), slot=0, all_logits=True)
    assert (logits - ours[0]).abs().max().item() < 1e-4
