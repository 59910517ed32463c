"""A child that dies at start-up is reported by its one-line cause and its log's path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from runtime.engines.process import ServerProcess, ServerStartError
from runtime.node.failure import cause_from_log, cause_from_text, describe_exit
from runtime.node.supervisor import ChildDied, Supervisor

TRACEBACK = """\
transformer_engine unavailable, disabling TE attention
Traceback (most recent call last):
  File "runtime/engines/embedded/__main__.py", line 90, in main
    loaded = load_model(args.model)
  File "runtime/models/hf.py", line 40, in hf_config_to_olmo_core
    raise ModelLoadError(f"unsupported model_type {kind!r}")
runtime.models.source.ModelLoadError: unsupported model_type 'gpt2'
"""


def test_cause_is_the_exception_line_of_a_traceback() -> None:
    assert cause_from_text(TRACEBACK) == (
        "runtime.models.source.ModelLoadError: unsupported model_type 'gpt2'"
    )


def test_cause_of_other_programs_is_their_error_line() -> None:
    text = "starting router\nError: failed to bind 127.0.0.1:30000: address in use\nbye\n"
    assert cause_from_text(text) == "Error: failed to bind 127.0.0.1:30000: address in use"
    assert cause_from_text("usage: x [-h]\nx: error: unrecognized arguments: --foo\n") == (
        "x: error: unrecognized arguments: --foo"
    )
    assert cause_from_text("just stopped\n") == "just stopped"
    assert cause_from_text("") == "no output"
    assert cause_from_log(None) == "no log"


def test_describe_exit_names_signal_and_log(tmp_path: Path) -> None:
    log = tmp_path / "engine-0.log"
    log.write_text(TRACEBACK)
    line = describe_exit("engine:0", -9, log)
    assert line == (
        "engine:0 exited (killed by SIGKILL): runtime.models.source.ModelLoadError: "
        f"unsupported model_type 'gpt2'; full log: {log}"
    )
    assert "\n" not in line


def test_supervised_child_dying_at_start_up(tmp_path: Path) -> None:
    sup = Supervisor(log_dir=tmp_path, grace_s=2.0)
    code = "import sys; sys.stderr.write('loading\\n'); raise ValueError('no such model: x')"
    sup.start("engine:0", [sys.executable, "-c", code])
    try:
        with pytest.raises(ChildDied) as died:
            sup.wait_ready("engine:0", lambda: False, timeout_s=30)
    finally:
        sup.shutdown()
    msg = str(died.value)
    assert msg.startswith("engine:0 exited (exit code 1): ValueError: no such model: x; ")
    assert msg.endswith(f"full log: {tmp_path / 'engine-0.log'}")
    assert "Traceback" not in msg


def test_first_death_names_a_child_that_died_mid_run(tmp_path: Path) -> None:
    """A run that fails on a dropped connection tells the dead child's exit instead (seen
    when a lone engine is killed: the request's `Connection reset` arrives first)."""
    sup = Supervisor(log_dir=tmp_path, grace_s=2.0)
    alive = sup.start("router", [sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert sup.first_death() is None
        code = "import os, time; time.sleep(0.3); os.kill(os.getpid(), 9)"
        sup.start("engine:0", [sys.executable, "-c", code])
        died = sup.first_death(grace_s=30.0)  # waits for the exit
    finally:
        sup.shutdown()
    assert died is not None and str(died).startswith("engine:0 exited (killed by SIGKILL)")
    assert alive.name == "router"


def test_server_process_dying_at_start_up(tmp_path: Path) -> None:
    code = "raise RuntimeError('unsupported architecture')"
    server = ServerProcess(
        name="judge",
        argv=[sys.executable, "-c", code],
        health_url="http://127.0.0.1:9/health",
        log_path=tmp_path / "judge.log",
    )
    with server.start(), pytest.raises(ServerStartError) as err:
        server.wait_healthy(timeout=30)
    assert str(err.value) == (
        "judge exited (exit code 1): RuntimeError: unsupported architecture; "
        f"full log: {tmp_path / 'judge.log'}"
    )
