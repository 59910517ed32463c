"""Engine failures: a dead engine behind the router is survived (group retry + drop; the
weight-update group of distributed publication is re-formed without it), a
lone engine's death fails the run clearly with exit 3."""

from __future__ import annotations

from pathlib import Path

import pytest
from rt_helpers import SMALL, child_pids, compile_manifest, kill9, records, start, wait_for

pytestmark = pytest.mark.slow


def _finish(proc, timeout: float = 120) -> str:  # type: ignore[no-untyped-def]
    out, _ = proc.communicate(timeout=timeout)
    return out


@pytest.mark.parametrize("transport", ["disk", "distributed"])
def test_engine_killed_behind_router_run_continues(tmp_path: Path, transport: str) -> None:
    """With distributed publication the weight-update group is re-formed with the survivor."""
    manifest = compile_manifest(
        tmp_path,
        (
            *SMALL,
            "training.num_rollouts=5",
            "inference.max_response_length=8",
            f'runtime.publication_transport="{transport}"',
            *(['inference.placement="disaggregated"'] if transport == "distributed" else []),
        ),
    )
    root = tmp_path / "run"
    proc = start(manifest)
    wait_for(lambda: len(records(root)) >= 1, timeout=100, proc=proc)
    kill9(child_pids(root)["engine:1"])
    out = _finish(proc)
    assert proc.returncode == 0, out
    assert "engine:1" in out and "continuing with 1 engine" in out
    assert [r["collection"] for r in records(root)] == list(range(5))


def test_lone_engine_killed_fails_clearly(tmp_path: Path) -> None:
    manifest = compile_manifest(
        tmp_path,
        (
            *SMALL,
            "training.num_rollouts=50",
            "inference.num_engines=1",
            "runtime.group_retries=1",
            "runtime.http_retries=1",
            "runtime.retry_backoff_s=0.1",
        ),
    )
    root = tmp_path / "run"
    proc = start(manifest)
    wait_for(lambda: len(records(root)) >= 1, timeout=100, proc=proc)
    kill9(child_pids(root)["engine:0"])
    out = _finish(proc)
    assert proc.returncode == 3, out
    assert "run failed" in out and ("engine:0" in out or "group" in out)
    # one clear line (the cause, then where the engine's full log is), no traceback
    assert "Traceback" not in out
    assert len(records(root)) < 50
