"""Compile-time checks of a readable model.source: unloadable checkpoints fail at the spec line.

The checkpoints here are config files written by hand (the compiler reads only JSON), so the
module needs neither torch nor transformers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.pipeline import compile_spec

ROOT = Path(__file__).resolve().parents[2]

SPEC = """schema_version = 1
name = "src"

[model]
source = "{source}"
{extra}

[data]
[[data.tasks]]
task = "arithmetic"
train_count = 8
eval_count = 4

[output]
root = "{root}"
{output}

[trainer]
gpus = 0

[inference]
engine = "{engine}"
num_engines = 1
max_context_length = 64
max_response_length = 8
"""


def _hf_dir(path: Path, model_type: str = "olmoe", **cfg: object) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"model_type": model_type, **cfg}))
    (path / "model.safetensors").write_bytes(b"")
    (path / "tokenizer.json").write_text("{}")
    (path / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    return path


def _compile(
    tmp_path: Path, source: str, *, extra: str = "", output: str = "", engine: str = "embedded"
):
    spec = tmp_path / "spec.toml"
    spec.write_text(
        SPEC.format(source=source, extra=extra, root=tmp_path / "run", output=output, engine=engine)
    )
    return compile_spec(str(spec)), spec


def _codes(result) -> list[str]:
    return [d.code for d in result.errors]


def test_olmoe_source_compiles_as_moe(tmp_path: Path) -> None:
    src = _hf_dir(tmp_path / "olmoe")
    r, _ = _compile(tmp_path, str(src))
    assert r.ok, _codes(r)
    manifest = r.manifest()
    assert manifest["config"]["model"]["architecture"] == "moe"
    r, _ = _compile(tmp_path, str(src), output="export_hf = true")
    assert r.ok, _codes(r)  # olmoe exports to HF


@pytest.mark.parametrize(
    ("model_type", "cfg", "reason"),
    [
        ("olmo_hybrid", {}, "num_hidden_layers"),
        ("llama", {}, "'llama' is not supported"),
        ("olmo2", {"attention_bias": True}, "attention_bias"),
        ("olmo2", {"rope_scaling": {"rope_type": "yarn"}}, "RoPE scaling"),
    ],
)
def test_unloadable_hf_source_is_refused_at_the_source_line(
    tmp_path: Path, model_type: str, cfg: dict, reason: str
) -> None:
    src = _hf_dir(tmp_path / "ckpt", model_type, **cfg)
    r, spec = _compile(tmp_path, str(src))
    errors = [d for d in r.errors if d.code == "model-source-unloadable"]
    assert errors and reason in errors[0].message, _codes(r)
    assert errors[0].span is not None and errors[0].span.line == 5  # the model.source line


def test_missing_weights_and_tokenizer(tmp_path: Path) -> None:
    src = _hf_dir(tmp_path / "a")
    (src / "model.safetensors").unlink()
    r, _ = _compile(tmp_path, str(src))
    assert "safetensors" in r.errors[0].message
    src = _hf_dir(tmp_path / "b")
    (src / "tokenizer.json").unlink()
    r, _ = _compile(tmp_path, str(src))
    assert "tokenizer.json" in r.errors[0].message


def test_architecture_is_checked_against_the_checkpoint(tmp_path: Path) -> None:
    src = _hf_dir(tmp_path / "olmoe")
    r, _ = _compile(tmp_path, str(src), extra='architecture = "dense"')
    assert _codes(r) == ["model-source-architecture"]


def test_olmo_core_checkpoint_given_as_hf(tmp_path: Path) -> None:
    src = tmp_path / "oc"
    (src / "model_and_optim").mkdir(parents=True)
    model = {"block": {"name": "moe_hybrid_reordered_norm", "feed_forward_moe": {}}}
    (src / "config.json").write_text(json.dumps({"model": model}))
    r, _ = _compile(tmp_path, str(src))
    assert 'format = "olmo_core"' in r.errors[0].message
    tpl = _hf_dir(tmp_path / "tpl", "olmo2")
    extra = f'format = "olmo_core"\nhf_template = "{tpl}"'
    r, _ = _compile(tmp_path, str(src), extra=extra)
    assert r.ok, _codes(r)
    assert r.manifest()["config"]["model"]["architecture"] == "hybrid_moe"
    r, _ = _compile(tmp_path, str(src), extra=extra, output="export_hf = true")
    assert _codes(r) == ["model-export-no-hf-architecture"]
    r, _ = _compile(tmp_path, str(src), extra=extra, engine="sglang")
    assert "model-sglang-no-hf-architecture" in _codes(r)
    (tpl / "tokenizer.json").unlink()
    r, _ = _compile(tmp_path, str(src), extra=extra)
    assert _codes(r) == ["model-template-unusable"]


def test_builtin_moe_export_refused(tmp_path: Path) -> None:
    r, _ = _compile(tmp_path, "builtin:tiny-moe", output="export_hf = true")
    assert _codes(r) == ["model-export-no-hf-architecture"]
    r, _ = _compile(tmp_path, "builtin:tiny", output="export_hf = true")
    assert r.ok


def test_unreadable_source_is_left_to_run_time(tmp_path: Path) -> None:
    r, _ = _compile(tmp_path, str(tmp_path / "not-here"))
    assert r.ok, _codes(r)


def test_a_missing_hub_id_is_refused_with_the_download_hint(tmp_path: Path) -> None:
    """``owner/name`` is a relative path nothing creates: the runtime never downloads."""
    r, _ = _compile(tmp_path, "allenai/OLMoE-1B-7B-0924")
    errors = [d for d in r.errors if d.code == "model-source-unloadable"]
    assert errors and "huggingface-cli download allenai/OLMoE-1B-7B-0924" in errors[0].message
    assert errors[0].span is not None and errors[0].span.line == 5
    _hf_dir(tmp_path / "allenai" / "OLMoE-1B-7B-0924")  # the downloaded directory is a source
    r, _ = _compile(tmp_path, "allenai/OLMoE-1B-7B-0924")
    assert r.ok, _codes(r)
    r, _ = _compile(tmp_path, "ckpts/step-3/model/x")  # other missing relative paths: run time
    assert r.ok, _codes(r)


def test_validate_exits_2_without_importing_torch(tmp_path: Path) -> None:
    src = _hf_dir(tmp_path / "ckpt", "olmo_hybrid")
    _, spec = _compile(tmp_path, str(src))
    out = subprocess.run(
        [sys.executable, "-m", "rlc_cli.main", "validate", str(spec)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "RLC_NO_CACHE": "1"},
    )
    assert out.returncode == 2, out.stderr
    assert "model-source-unloadable" in out.stderr + out.stdout
    assert "Traceback" not in out.stderr
    code = (
        "import sys; from compiler.pipeline import compile_spec; compile_spec(sys.argv[1]);"
        "bad=[m for m in sys.modules if m.split('.')[0] in ('torch','runtime','transformers')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(spec)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_compile_cache_notices_a_changed_checkpoint(tmp_path: Path, monkeypatch) -> None:
    from click.testing import CliRunner

    from rlc_cli.main import cli

    monkeypatch.setenv("RLC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("RLC_NO_CACHE", raising=False)
    src = _hf_dir(tmp_path / "ckpt", "olmoe")
    _, spec = _compile(tmp_path, str(src))
    args = ["compile", str(spec), "-o", str(tmp_path / "build")]
    assert CliRunner().invoke(cli, args).exit_code == 0
    (src / "config.json").write_text(json.dumps({"model_type": "olmo_hybrid", "pad": 1}))
    again = CliRunner().invoke(cli, args)
    assert again.exit_code == 2 and "model-source-unloadable" in again.output


def test_rederivation_does_not_reread_the_checkpoint(tmp_path: Path) -> None:
    """Compiled where the checkpoint was unreadable, run where it is: the manifest holds."""
    from compiler.manifest.trust import load_trusted

    src = tmp_path / "later"
    r, _ = _compile(tmp_path, str(src), extra='architecture = "moe"')
    assert r.ok, _codes(r)
    from compiler.manifest.manifest import write_manifest

    out = write_manifest(r.manifest(), tmp_path / "manifest.json")
    _hf_dir(src, "olmoe")
    assert load_trusted(out)["config"]["model"]["architecture"] == "moe"


OLMOE_CFG = dict(
    hidden_size=1024,
    num_hidden_layers=16,
    num_attention_heads=16,
    vocab_size=100,
    intermediate_size=256,
    num_experts=64,
    num_experts_per_tok=8,
)


def test_size_is_counted_from_the_config_and_small_moe_may_colocate(tmp_path: Path) -> None:
    src = _hf_dir(tmp_path / "olmoe", "olmoe", **OLMOE_CFG)
    spec = ROOT / "specs" / "examples" / "gpu-moe.toml"
    r = compile_spec(str(spec), [f'model.source="{src}"', f'output.root="{tmp_path / "run"}"'])
    assert r.ok, [(d.code, d.message) for d in r.errors]
    m = r.manifest()
    assert m["config"]["model"]["num_params"] == 873_735_168
    assert m["config"]["model"]["architecture"] == "moe"
    assert m["plan"]["memory"]["colocated_gib_per_gpu"] < 141
    huge = _hf_dir(tmp_path / "huge", "olmoe", **{**OLMOE_CFG, "num_hidden_layers": 900})
    r = compile_spec(str(spec), [f'model.source="{huge}"', f'output.root="{tmp_path / "run"}"'])
    assert "colocated-full-model" in _codes(r)


def test_a_file_is_not_a_model_source(tmp_path: Path) -> None:
    src = tmp_path / "weights.safetensors"
    src.write_bytes(b"")
    r, _ = _compile(tmp_path, str(src))
    assert _codes(r) == ["model-source-unloadable"] and "not a directory" in r.errors[0].message


@pytest.mark.parametrize("case", ["missing", "no-weights", "architecture"])
def test_runtime_refuses_an_unloadable_source_before_engines_start(
    tmp_path: Path, case: str
) -> None:
    """Not readable at compile time (here: created or removed after compile): the node's
    runtime refuses it with one line and exit 2, before any engine process starts. An
    architecture changed since (every file still there) is checked through OLMo-core
    while the engines start, its import off the critical path: the same one line."""
    src = _hf_dir(tmp_path / "ckpt", "olmo2")
    r, _ = _compile(tmp_path, str(src))
    assert r.ok, _codes(r)
    from compiler.manifest.manifest import manifest_bytes

    manifest = tmp_path / "manifest.json"
    manifest.write_bytes(manifest_bytes(r.manifest()))
    if case == "missing":
        for f in src.iterdir():
            f.unlink()
        src.rmdir()
    elif case == "no-weights":
        (src / "model.safetensors").unlink()
    else:
        (src / "config.json").write_text(json.dumps({"model_type": "llama"}))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "runtime.entrypoints.execute", str(manifest), "--no-progress"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("rlc: error: model.source:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    want = {"missing": "neither builtin", "no-weights": "safetensors", "architecture": "llama"}
    assert want[case] in lines[0]
    if case != "architecture":
        assert not (tmp_path / "run" / "logs").exists()  # no engine (or any role) started


def test_the_node_starts_its_engines_before_importing_torch() -> None:
    """What the trainer node runs before its engines start (manifest, config, the source's
    files, data, placement) imports neither torch nor OLMo-core: their import overlaps the
    engines' start-up (runtime.node.preload)."""
    code = (
        "import sys, runtime.entrypoints.execute, runtime.config, runtime.manifest, "
        "runtime.models.source, runtime.models.tokenizer, runtime.node.placement, "
        "runtime.rollout.driver, runtime.node.supervisor, runtime.node.preload; "
        "print(sorted(m for m in ('torch', 'olmo_core') if m in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_hf_source_without_a_chat_template_fails_at_model_source(tmp_path: Path) -> None:
    src = _hf_dir(tmp_path / "olmo2", "olmo2")
    (src / "chat_template.jinja").unlink()
    r, spec = _compile(tmp_path, str(src))
    assert not r.ok
    [err] = [d for d in r.errors if "no chat template" in d.message]
    assert err.span is not None and err.span.line == 5  # the model.source line
    # a template in tokenizer_config.json (older transformers) is found
    (src / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ 1 }}"}))
    r, _ = _compile(tmp_path, str(src))
    assert r.ok, _codes(r)
    # or the spec names one: a .jinja file relative to the spec
    (src / "tokenizer_config.json").unlink()
    (tmp_path / "mine.jinja").write_text("{{ 1 }}")
    r, _ = _compile(tmp_path, str(src), extra='chat_template = "mine.jinja"')
    assert r.ok, _codes(r)
    assert r.manifest()["config"]["model"]["chat_template"] == str(tmp_path / "mine.jinja")
    r, _ = _compile(tmp_path, str(src), extra='chat_template = "absent.jinja"')
    assert any("absent.jinja does not exist" in d.message for d in r.errors)


def test_a_named_chat_template_must_be_one_of_the_checkpoints(tmp_path: Path) -> None:
    src = _hf_dir(tmp_path / "olmo2", "olmo2")
    (src / "additional_chat_templates").mkdir()
    (src / "additional_chat_templates" / "tool_use.jinja").write_text("{{ 1 }}")
    r, _ = _compile(tmp_path, str(src), extra='chat_template = "tool_use"')
    assert r.ok, _codes(r)
    r, _ = _compile(tmp_path, str(src), extra='chat_template = "rag"')
    [err] = [d for d in r.errors if d.code == "model-source-unloadable"]
    assert "'rag' is not one of" in err.message and "(default, tool_use)" in err.message
    assert err.span is not None and err.span.line == 5


def test_builtin_chat_template_is_checked_at_compile_time(tmp_path: Path) -> None:
    """A builtin model has no named templates; only an existing .jinja file is taken
    (the trainer would otherwise refuse it after the engines started)."""
    for extra, reason in (
        ('chat_template = "chatml"', "names a template, but builtin models have none"),
        ('chat_template = "absent.jinja"', "absent.jinja does not exist"),
    ):
        r, _ = _compile(tmp_path, "builtin:tiny", extra=extra)
        [err] = [d for d in r.errors if d.code == "model-source-unloadable"]
        assert reason in err.message
        assert err.span is not None and err.span.line == 5  # the model.source line
    (tmp_path / "mine.jinja").write_text("{{ messages[0]['content'] }}")
    r, _ = _compile(tmp_path, "builtin:tiny", extra='chat_template = "mine.jinja"')
    assert r.ok, _codes(r)


HYBRID_CFG = dict(
    hidden_size=256,
    num_hidden_layers=8,  # transformers' default layer_types: every 4th layer attends
    num_attention_heads=8,
    num_key_value_heads=4,
    vocab_size=1000,
    intermediate_size=512,
    linear_num_key_heads=4,
    linear_num_value_heads=8,
    linear_key_head_dim=32,
    linear_value_head_dim=64,
)


def test_olmo_hybrid_is_counted_with_its_recurrent_state(tmp_path: Path) -> None:
    """olmo_hybrid compiles: dense family, the parameter count transformers' and OLMo-core's
    models report for this config (6,852,064), KV for the 2 attention layers only and one
    fixed-size state per running sequence for the 6 GatedDeltaNet layers."""
    src = _hf_dir(tmp_path / "hybrid", "olmo_hybrid", **HYBRID_CFG)
    r, _ = _compile(tmp_path, str(src), extra="", output="")
    assert r.ok, _codes(r)
    m = r.manifest()
    assert m["config"]["model"]["architecture"] == "dense"
    assert m["config"]["model"]["num_params"] == 6_852_064
    assert m["facts"]["model_recurrent_layers"] == 6
    engine = m["plan"]["memory"]["engine_parts_gib"]
    slots = m["config"]["inference"]["max_running_requests"]
    # fp32 state (8 x 32 x 64) + bf16 conv tails (768 channels x 3) per layer and sequence
    assert engine["recurrent_state"] == round(
        slots * 6 * (8 * 32 * 64 * 4 + 768 * 3 * 2) / 2**30, 3
    )
    plain = _hf_dir(tmp_path / "plain", "olmo2", **HYBRID_CFG)
    kv_plain = _compile(tmp_path, str(plain))[0].manifest()["plan"]["memory"]["engine_parts_gib"]
    assert engine["kv_cache"] == pytest.approx(kv_plain["kv_cache"] / 4, abs=1e-3)


def test_olmo_hybrid_on_sglang_is_refused_at_the_engine_line(tmp_path: Path) -> None:
    src = _hf_dir(tmp_path / "hybrid", "olmo_hybrid", **HYBRID_CFG)
    r, _ = _compile(tmp_path, str(src), engine="sglang")
    errors = [d for d in r.errors if d.code == "model-sglang-no-recurrent-layers"]
    assert errors and "OlmoHybridForCausalLM" in errors[0].message, _codes(r)
