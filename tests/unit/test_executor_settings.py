"""The code executor has one settings type: the manifest's ``[rewards.code]`` (defaults
included) reaches the ``code`` verifier and the executor service as the same object."""

from __future__ import annotations

import copy
from pathlib import Path

import httpx
import pytest

from compiler.pipeline import compile_spec
from contract.run import parse
from contract.spec.rewards import CodeReward
from runtime.config import RunConfig
from runtime.executor.sandbox import Limits
from runtime.executor.server import parse_args, settings_from_args
from runtime.executor.settings import ExecutorSettings
from runtime.rewards.judge_binding import RunVerifiers

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def manifest() -> dict:
    result = compile_spec(str(ROOT / "specs" / "examples" / "quickstart.toml"))
    assert result.ok, result.diagnostics
    return result.manifest()


def test_the_defaults_are_the_spec_defaults() -> None:
    spec, settings = CodeReward(), ExecutorSettings()
    for name in CodeReward.model_fields:
        assert getattr(settings, name) == getattr(spec, name), name
    limits = Limits()  # what the service applies to a request that names no limits
    assert settings.limits() == {
        "wall_s": limits.wall_s,
        "cpu_s": limits.cpu_s,
        "memory_mb": limits.memory_mb,
        "max_processes": limits.max_processes,
    }


def test_the_manifest_default_reaches_the_verifier_and_the_service(manifest: dict) -> None:
    cfg = RunConfig.from_contract(parse(manifest))
    assert cfg.executor == ExecutorSettings()  # the quickstart leaves [rewards.code] alone
    verifiers = RunVerifiers(cfg.rewards, {}, executor=cfg.executor)
    code = verifiers("code")
    try:
        assert code.settings is cfg.executor
        assert code.concurrency == CodeReward().concurrency
        assert code.limits == cfg.executor.limits()
        health = httpx.get(code.url + "/health", timeout=30, trust_env=False).json()
        assert health["workers"] == cfg.executor.workers
    finally:
        verifiers.close()


def test_manifest_values_reach_both(manifest: dict) -> None:
    m = copy.deepcopy(manifest)
    m["config"]["rewards"]["code"].update(
        concurrency=3, max_processes=5, time_limit_s=2.5, network=True, allow_unsandboxed=True
    )
    cfg = RunConfig.from_contract(parse(m))
    code = RunVerifiers(cfg.rewards, {}, executor=cfg.executor)("code")
    try:
        assert code.concurrency == 3 and code.network
        assert code.limits == {"wall_s": 2.5, "cpu_s": 2.5, "memory_mb": 1024, "max_processes": 5}
    finally:
        code.close()
    # the local service reads back exactly these settings from its command line
    args = parse_args(["--port", "0", *cfg.executor.service_args()])
    service = settings_from_args(args)
    assert (service.network, service.allow_unsandboxed, service.isolation, service.workers) == (
        True,
        True,
        cfg.executor.isolation,
        cfg.executor.workers,
    )
