"""Decode-path flags: compiled CUDA-graph decode by default on GPU, opt-outs honoured."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from compiler.pipeline import compile_spec

ROOT = Path(__file__).resolve().parents[2]


def _config(*overrides: str) -> dict[str, object]:
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        m = compile_spec("specs/examples/quickstart.toml", list(overrides)).manifest()
    finally:
        os.chdir(cwd)
    return m  # type: ignore[no-any-return]


def _engine_argv(*overrides: str) -> list[str]:
    argv: list[str] = _config(*overrides)["commands"]["engine_argv"][0]  # type: ignore[index]
    return argv


def _gpu_engine_argv(*overrides: str) -> list[str]:
    """The engine line the quickstart's config gives a GPU engine."""
    from compiler.resolve.argv import embedded_engine_argv

    config = _config(*overrides)["config"]
    return embedded_engine_argv(config, {"port": 1, "device": "cuda"}, "127.0.0.1")  # type: ignore[arg-type]


def test_cuda_graph_decode_false_reaches_the_engine() -> None:
    pytest.importorskip("torch")
    from runtime.engines.embedded.__main__ import build_parser

    # a GPU engine of the quickstart's config (on its CPU engines the graph options have no
    # effect: the compiler leaves them out and a rule warns where a spec sets them)
    on = _gpu_engine_argv()
    assert "--disable-cuda-graph" not in on and "--cuda-graph-max-bs" in on
    off = _gpu_engine_argv("inference.cuda_graph_decode=false")
    assert "--disable-cuda-graph" in off and "--cuda-graph-max-bs" not in off
    assert "--disable-cuda-graph" not in _engine_argv("inference.cuda_graph_decode=false")
    args = build_parser().parse_args(off[3:])
    assert args.cuda_graph is False and args.compile_decode is None
    args = build_parser().parse_args([*on[3:], "--disable-compile-decode"])
    assert args.cuda_graph is None and args.compile_decode is False
    assert args.compile_prefill is None  # by the engine: on with the compiled decode on a GPU
    assert build_parser().parse_args([*on[3:], "--compile-prefill"]).compile_prefill is True
    off = build_parser().parse_args([*on[3:], "--disable-compile-prefill"])
    assert off.compile_prefill is False
    assert args.fused_sampling is None  # by the engine: on wherever decode runs as graphs
    args = build_parser().parse_args([*on[3:], "--fused-sampling"])
    assert args.fused_sampling is True
    args = build_parser().parse_args([*on[3:], "--no-fused-sampling"])
    assert args.fused_sampling is False
    assert "--disable-overlap-schedule" not in on  # an engine option the compiler never emits
    assert args.overlap_schedule is True
    args = build_parser().parse_args([*on[3:], "--disable-overlap-schedule"])
    assert args.overlap_schedule is False


def test_triton_attention_off_a_gpu_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    from runtime.engines.embedded.__main__ import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--model", "engine-test:dense", "--port", "1", "--attention-backend", "triton"])
    assert exit_info.value.code == 2
    assert "--attention-backend triton needs --device cuda" in capsys.readouterr().err


def test_engine_defaults_follow_the_device() -> None:
    pytest.importorskip("olmo_core")
    from runtime.engines.embedded.engine import Engine
    from runtime.engines.embedded.tiny import build_tiny

    eng = Engine(build_tiny("dense"), model_path="t", max_running_requests=2, context_length=32)
    assert eng.cuda_graph is False and eng.compile_decode is False  # CPU: eager
    assert eng.fused_sampling is False  # no graphs: the sampler stays a separate step
    assert not eng.im.compiled and eng.im.graph_keys() == []
