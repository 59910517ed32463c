"""`rlc run` as a person follows it without a terminal: plain progress lines, and Ctrl-C
ending with exit 130 and one line that says where it stopped, in start-up and mid-run.

The interrupt is sent to the whole process group, as a terminal's Ctrl-C is, once the run
has printed the line that marks the phase (no timing is assumed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from rt_helpers import QUICKSTART, ROOT, env

pytestmark = pytest.mark.slow


def _run_until(tmp_path: Path, marker: str, rollouts: int) -> tuple[int, str]:
    argv = [sys.executable, "-m", "rlc_cli.main", "run", str(QUICKSTART)]
    argv += ["--set", f'output.root="{tmp_path / "run"}"']
    argv += ["--set", f"training.num_rollouts={rollouts}", "--set", "training.eval_interval=2"]
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stderr is not None
    seen: list[str] = []
    for line in proc.stderr:
        seen.append(line)
        if marker in line:
            os.killpg(proc.pid, signal.SIGINT)
            break
    seen += proc.stderr.readlines()
    return proc.wait(timeout=300), "".join(seen)


def test_ctrl_c_during_start_up_is_130_without_a_traceback(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    code, err = _run_until(tmp_path, "rlc: checking the manifest and loading the runtime", 4)
    assert code == 130, err
    assert "Traceback" not in err
    assert "rlc: interrupted during start-up; nothing was trained" in err


def test_plain_progress_lines_and_ctrl_c_mid_run(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("sglang_router")
    code, err = _run_until(tmp_path, "rlc: collection 4/40", 40)
    assert code == 130, err
    assert "Traceback" not in err
    progress = [ln for ln in err.splitlines() if ln.startswith("rlc: collection ")]
    assert progress[0].startswith("rlc: collection 2/40  reward ")  # every 40 // 20 = 2
    assert " tok/s  elapsed " in progress[0] and " eta " in progress[0]
    [done] = [ln for ln in err.splitlines() if ln.startswith("rlc: stopped (SIGINT) after ")]
    # the summary says where it stopped and which update its evaluation is of
    assert " of 40 collections" in done
    assert "held-out evaluation" in done and "(at update " in done
