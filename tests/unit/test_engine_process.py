"""Process supervision and the SGLang launcher (embedded engine standing in for SGLang)."""

from __future__ import annotations

import os
import signal
import sys
import time

import httpx
import pytest

from runtime.engines.process import ServerProcess, ServerStartError, free_port, start_server
from runtime.engines.sglang import get_flag, set_flag, sglang_argv, sglang_installed, start_sglang


def test_sglang_argv_normalises_compiled_lines():
    compiled = [
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/m",
        "--tp-size",
        "1",
        "--port",
        "30000",
        "--host=0.0.0.0",
        "--mem-fraction-static",
        "0.8",
    ]
    argv = sglang_argv(compiled, host="127.0.0.1", port=30005, python="/py")
    assert argv[:3] == ["/py", "-m", "sglang.launch_server"]
    assert get_flag(argv, "--host") == "127.0.0.1" and get_flag(argv, "--port") == "30005"
    assert argv.count("--port") == 1 and not any(a.startswith("--host=") for a in argv)
    assert get_flag(argv, "--mem-fraction-static") == "0.8"
    # flags-only form, keeping the compiled port
    bare = sglang_argv(["--model-path", "/m", "--port", "30001"], python="/py")
    assert bare[3:] == ["--model-path", "/m", "--port", "30001", "--host", "127.0.0.1"]
    with pytest.raises(ValueError):
        sglang_argv(["--port", "1"])
    with pytest.raises(ValueError):
        sglang_argv(["--model-path", "/m"])
    assert set_flag(["--a", "1", "--b", "2"], "--a", "3") == ["--b", "2", "--a", "3"]


def test_real_sglang_missing_is_a_clear_error(tmp_path):
    if sglang_installed():
        pytest.skip("sglang is installed here")
    with pytest.raises(ServerStartError, match="not installed"):
        start_sglang(["--model-path", "/m", "--port", "1"], log_path=tmp_path / "x.log")


def test_death_before_healthy_is_reported_with_log(tmp_path):
    argv = [sys.executable, "-c", "import sys; print('boom: bad model'); sys.exit(3)"]
    with pytest.raises(ServerStartError, match="boom: bad model") as info:
        start_server(
            "dies", argv, f"http://127.0.0.1:{free_port()}/health", tmp_path / "d.log", timeout=30
        )
    assert "code 3" in str(info.value)


def test_health_timeout_stops_the_process(tmp_path):
    argv = [sys.executable, "-c", "import time; time.sleep(60)"]
    server = ServerProcess(
        "sleeper", argv, f"http://127.0.0.1:{free_port()}/health", tmp_path / "s.log"
    )
    server.start()
    try:
        with pytest.raises(ServerStartError, match="not healthy"):
            server.wait_healthy(timeout=1.0, interval=0.1)
        assert server.alive()
    finally:
        code = server.stop(grace=5)
    assert not server.alive() and code is not None


def test_sigterm_ignored_escalates_to_sigkill(tmp_path):
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    server = ServerProcess(
        "stubborn", [sys.executable, "-c", code], "http://127.0.0.1:1/health", tmp_path / "k.log"
    ).start()
    import time

    deadline = time.monotonic() + 20
    while "ready" not in (tmp_path / "k.log").read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.stop(grace=0.5) == -9


def test_embedded_engine_stands_in_for_sglang(tmp_path):
    """The SGLang launch path (argv, env, health wait, stop) run against our engine, which
    accepts SGLang's --model-path/--tp-size/--random-seed spellings."""
    pytest.importorskip("olmo_core")
    port = free_port()
    compiled = [
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "engine-test:dense",
        "--tp-size",
        "1",
        "--port",
        "1",
        "--context-length",
        "64",
        "--max-running-requests",
        "2",
        "--random-seed",
        "4",
    ]
    server = start_sglang(
        compiled,
        port=port,
        log_path=tmp_path / "e.log",
        timeout=180,
        module="runtime.engines.embedded",
    )
    try:
        assert server.alive()
        url = f"http://127.0.0.1:{port}"

        def two_tokens() -> int:
            body = {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 2}}
            out = httpx.post(f"{url}/generate", json=body, timeout=30).json()
            return int(out["meta_info"]["completion_tokens"])

        assert two_tokens() == 2
        info = httpx.get(f"{url}/get_server_info", timeout=5).json()
        assert info["seed"] == 4 and info["max_running_requests"] == 2
        # the server owns its process: once warmed up, start-up's heap is frozen
        warm = httpx.post(f"{url}/warm_up", json={}, timeout=60).json()
        assert warm["success"] and warm["frozen_objects"] > 0
        # its own start-up, from the process's start: what "engines ready" is made of
        names = [p["name"] for p in warm["startup"]]
        assert names == ["interpreter and imports", "model", "engine (KV pool)"]
        assert all(p["seconds"] >= 0 for p in warm["startup"])
        assert warm["startup"][0]["seconds"] > 0.1  # torch's import at least
        info = httpx.get(f"{url}/get_server_info", timeout=5).json()
        assert info["gc_full_collections"] >= 1 and info["gc_pause_s"] > 0
        # kill -USR1: every thread's stack into the log, and the server goes on serving
        assert server.pid is not None
        os.kill(server.pid, signal.SIGUSR1)
        # the dump is written thread by thread: wait for the scheduler's own stack in it
        deadline = time.monotonic() + 10
        while "in _loop" not in (log := server.log_path.read_text(errors="replace")):
            assert time.monotonic() < deadline, f"no scheduler stack in the log: {log[-2000:]}"
            time.sleep(0.1)
        assert "most recent call first" in log
        assert two_tokens() == 2
    finally:
        code = server.stop(grace=10)
    assert code == 0, "engine should exit cleanly on SIGTERM"
    assert not server.alive()
