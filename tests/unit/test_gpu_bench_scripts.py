"""The GPU benchmark scripts parse their arguments and run their CPU-sized smokes, so a
GPU run is not spent finding a typo (the long-context smoke first found that the
engine refused the trainer's activation-checkpointed modules)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import threading
import time
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
    """The merged-projection A/B (``unfused``) and the FP8 cache (``kv=``) parse and run on
    the tiny model; the bound counts the FP8 cache's one-byte entries."""
    decode = _load("benchmarks/gpu/decode.py", "gpu_decode_bench")
    argv = ["--device", "cpu", "--source", "builtin:tiny", "--batch-sizes", "2"]
    argv += ["--prompt-len", "8", "--new-tokens", "4", "--repeats", "1", "--hf", "dynamic"]
    variants = ["eager", "eager,unfused", "eager,kv=fp8_e4m3"]
    assert decode.main([*argv, "--variants", *variants, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "eager,unfused" in out and "eager,kv=fp8_e4m3" in out
    assert not decode.parse_variant("graph,unfused").fuse
    assert decode.parse_variant("graph,kv=fp8_e5m2").kv_dtype == "fp8_e5m2"
    with pytest.raises(ValueError, match="kv=fp8_e4m3"):
        decode.parse_variant("graph,kv=int4")


def test_e2e_dry_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the script points the compiler caches at --compile-cache unless already set
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    e2e = _load("benchmarks/gpu/e2e.py", "gpu_e2e_bench")
    # --graph-kv-step reaches the engine (no decode graphs on a CPU: nothing captured)
    argv = ["--dry-run", "--compile-cache", str(tmp_path / "cache"), "--graph-kv-step", "64"]
    argv += ["--kv-cache-dtype", "fp8_e4m3"]
    assert e2e.main([*argv, "--sample-admission"]) == 0
    out = capsys.readouterr().out
    assert "KV cache float8_e4m3fn" in out
    assert "collection 1:" in out and "total_s" in out
    # each collection says where its admissions' host time went, and what it compiled
    assert out.count("'admission_stacks': {'within': '_admit'") == 2
    assert "'generation_new_compiled_graphs': 0" in out


def test_stack_sampler_counts_only_inside_the_named_function() -> None:
    stacks = _load("benchmarks/gpu/stacks.py", "gpu_stacks")
    go, stop = threading.Event(), threading.Event()

    def spin_outside() -> None:
        while not go.is_set():
            pass

    def _admit() -> None:
        deadline = time.perf_counter() + 0.2
        while time.perf_counter() < deadline:
            pass

    def body() -> None:
        spin_outside()
        _admit()
        stop.wait(5)

    worker = threading.Thread(target=body, daemon=True)
    worker.start()
    assert worker.ident is not None
    sampler = stacks.StackSampler(worker.ident, "_admit", interval_s=0.002).start()
    time.sleep(0.1)  # spinning outside ``_admit``: not counted
    go.set()
    time.sleep(0.35)
    report = sampler.stop()
    stop.set()
    worker.join()
    assert report["within"] == "_admit"
    assert 0.02 <= report["sampled_s"] <= 0.25
    frames = [name for name, _ in report["leaf_frames_s"]]
    assert frames and all(":_admit:" in name for name in frames)
    assert report["own_frames_s"] == []  # no frame of runtime/ on this stack


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


def test_decode_gemm_products_and_cpu_refusal(capsys: pytest.CaptureFixture[str]) -> None:
    """The products follow the engine's fused layout; without a GPU the script says so."""
    gemm = _load("benchmarks/gpu/decode_gemm.py", "gpu_decode_gemm")
    args = gemm.argparse.Namespace(
        heads=16, kv_heads=4, head_dim=128, hidden=2048, ffn=8192, vocab=100352
    )
    assert gemm.products(args) == [
        ("qkv", 3072, 2048),
        ("o", 2048, 2048),
        ("gate_up", 16384, 2048),
        ("down", 2048, 8192),
        ("head", 100352, 2048),
    ]
    if not gemm.torch.cuda.is_available():
        assert gemm.main(["--batch-sizes", "64"]) == 2
        assert "needs a CUDA GPU" in capsys.readouterr().err
