"""Metrics jsonl (resume truncation, torn lines), the report PNG and the supervisor."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from runtime.metrics import MetricsWriter, fifths, read_metrics
from runtime.node.supervisor import ChildDied, Supervisor
from runtime.report import summary, write_report


def test_writer_truncates_on_resume_and_ignores_torn_lines(tmp_path: Path) -> None:
    w = MetricsWriter(tmp_path / "m.jsonl")
    for c in range(5):
        w.write({"collection": c, "reward/mean": c / 10, "bad": float("nan")})
    with open(w.path, "a") as f:
        f.write('{"collection": 5, "rew')  # a kill mid-write
    recs = read_metrics(w.path)
    assert [r["collection"] for r in recs] == [0, 1, 2, 3, 4]
    assert recs[0]["bad"] is None  # NaN is not JSON
    w.truncate_from(3)
    assert [r["collection"] for r in read_metrics(w.path)] == [0, 1, 2]


def test_report_png_and_summary(tmp_path: Path) -> None:
    w = MetricsWriter(tmp_path / "m.jsonl")
    for c in range(10):
        w.write(
            {"collection": c, "reward/mean": c / 10, "response_length/mean": 3.0, "tokens/total": 5}
        )
    out = write_report(w.path, tmp_path / "report.png", title="t")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    s = summary(w.path)
    assert s["collections"] == 10 and s["tokens"] == 50
    assert s["reward_first_fifth"] == pytest.approx(0.05) and s[
        "reward_last_fifth"
    ] == pytest.approx(0.85)
    assert fifths([1.0]) == (1.0, 1.0)


def test_supervisor_detects_death_and_cleans_up(tmp_path: Path) -> None:
    sup = Supervisor(log_dir=tmp_path, grace_s=2.0)
    ok = sup.start("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"])
    bad = sup.start("crasher", [sys.executable, "-c", "print('dying now'); raise SystemExit(7)"])
    deadline = time.monotonic() + 10
    while bad.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    with pytest.raises(ChildDied) as died:
        sup.check()
    # one line: the cause first, then where the full log is
    assert str(died.value) == (
        f"crasher exited (exit code 7): dying now; full log: {tmp_path / 'crasher.log'}"
    )
    with pytest.raises(ChildDied):
        sup.wait_ready("crasher", lambda: False, timeout_s=1)
    with pytest.raises(TimeoutError, match="sleeper was not ready"):
        sup.wait_ready("sleeper", lambda: False, timeout_s=0.3)
    sup.shutdown()
    assert not ok.alive()
    assert json.dumps(sup.dead()) == "[]"  # stopped on purpose: not reported as dead
