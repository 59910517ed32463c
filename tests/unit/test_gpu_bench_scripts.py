"""The next GPU session's scripts parse their arguments and run their CPU-sized smokes, so
a device call is not spent finding a typo (the long-context smoke first found that the
engine refused the trainer's activation-checkpointed modules)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("torch")
pytest.importorskip("olmo_core")

ROOT = Path(__file__).resolve().parents[2]


def _load(rel: str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / rel)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_engine_admission_smoke(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bench = _load("benchmarks/engine_admission.py", "engine_admission_bench")
    argv = ["--prompts", "2", "--group", "2", "--prompt-len", "40", "--collections", "1"]
    assert bench.main([*argv, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| 4 requests |" in out and "gathering off" in out
    assert (tmp_path / "engine_admission.json").is_file()


def test_decode_variants_smoke(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The merged-projection A/B (``unfused``) parses and runs on the tiny model."""
    decode = _load("benchmarks/gpu/decode.py", "gpu_decode_bench")
    argv = ["--device", "cpu", "--source", "builtin:tiny", "--batch-sizes", "2"]
    argv += ["--prompt-len", "8", "--new-tokens", "4", "--repeats", "1", "--hf", "dynamic"]
    assert decode.main([*argv, "--variants", "eager", "eager,unfused", "--out", str(tmp_path)]) == 0
    assert "eager,unfused" in capsys.readouterr().out
    assert not decode.parse_variant("graph,unfused").fuse


def test_e2e_dry_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the script points the compiler caches at --compile-cache unless already set
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    e2e = _load("benchmarks/gpu/e2e.py", "gpu_e2e_bench")
    # --graph-kv-step reaches the engine (no decode graphs on a CPU: nothing captured)
    argv = ["--dry-run", "--compile-cache", str(tmp_path / "cache"), "--graph-kv-step", "64"]
    assert e2e.main(argv) == 0
    out = capsys.readouterr().out
    assert "collection 1:" in out and "total_s" in out


def test_long_context_dry_run(capsys: pytest.CaptureFixture[str]) -> None:
    long = _load("benchmarks/gpu/long_context.py", "gpu_long_bench")
    assert long.main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    assert '"decode_finish": {"type": "length"' in out  # the engine decoded after the update
    assert "update_error" not in out and '"error"' not in out
    assert "plan parts: trainer {'activations'" in out


def test_startup_dry_run_compiles_the_1b_spec(capsys: pytest.CaptureFixture[str]) -> None:
    startup = _load("benchmarks/gpu/startup.py", "gpu_startup_bench")
    assert startup.main(["--dry-run"]) == 0
    assert "compiled: gpu-dense, model builtin:olmo3-1b" in capsys.readouterr().out
    assert startup.main(["--dry-run", "--set", "trainer.gpus=oops"]) == 2


def test_olmoe_script_dry_run() -> None:
    env = {**os.environ, "PY": sys.executable}
    res = subprocess.run(
        ["bash", "benchmarks/gpu/olmoe_hf.sh", "--dry-run"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert "gpu-moe.toml: ok" in res.stderr and "would run" in res.stdout
