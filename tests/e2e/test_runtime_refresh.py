"""Async quickstart runs with the refresh and engine_drain publication modes: each
completes, survives kill -9 and resumes, and its records carry the per-token version
accounting (samples spanning versions under refresh, never under engine_drain; lag by the
oldest token)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rt_helpers import SMALL, compile_manifest, records, run, start, wait_for

pytestmark = pytest.mark.slow

N = 3


@pytest.mark.parametrize("mode", ["refresh", "engine_drain"])
def test_publication_mode_run_survives_kill9_and_resumes(tmp_path: Path, mode: str) -> None:
    manifest = compile_manifest(
        tmp_path,
        (
            *SMALL,
            f"training.num_rollouts={N}",
            "inference.max_response_length=24",  # publications land mid-response
            "async.enabled=true",
            f'async.publication_mode="{mode}"',
        ),
    )
    root = tmp_path / "run"
    proc = start(manifest)
    wait_for(lambda: len(records(root)) >= 1, timeout=120, proc=proc)
    proc.kill()
    proc.wait(timeout=30)
    assert proc.returncode == -9

    code, out = run(manifest, timeout=200)
    assert code == 0, out
    assert "resumed from collection" in out
    lag = json.loads(manifest.read_text())["config"]["async"]["max_policy_lag"]
    got = records(root)
    assert [r["collection"] for r in got] == list(range(N))
    assert [r["policy_version"] for r in got] == list(range(1, N + 1))
    seen = [pid for r in got for pid in r["prompt_ids"]]
    assert len(seen) == len(set(seen))  # no prompt trained twice across the kill
    for r in got:
        assert r["samples"] > 0
        assert r["async/lag_max"] <= lag
        # per-token versions came back through the router; drain never mixes versions
        assert r["async/mixed_version_samples"] >= 0
        if mode == "engine_drain":
            assert r["async/mixed_version_samples"] == 0
