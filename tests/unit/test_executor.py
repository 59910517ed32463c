"""The executor service: statuses, limits, and hostile programs against a real server."""

from __future__ import annotations

import os
import socket
import time
import uuid
from pathlib import Path

import httpx
import pytest

from runtime.executor.client import LocalExecutor
from runtime.executor.sandbox import UID_BASE, _probe_namespaces, slot_uid_base

SECRET = "rlc-secret-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def executor():
    env = dict(os.environ, RLC_TEST_SECRET=SECRET)
    with LocalExecutor(workers=2, env=env) as ex:
        yield ex


@pytest.fixture(scope="module")
def iso(http, executor):
    """The isolation the host allowed (namespaces when root with CAP_SYS_ADMIN)."""
    return http.get(executor.url + "/health").json()["isolation"]


@pytest.fixture(scope="module")
def http():
    with httpx.Client(timeout=60, trust_env=False) as client:
        yield client


def run(http, ex, code, tests=None, mode="function", entry="f", **limits):
    body = {"language": "python", "code": code, "mode": mode, "limits": limits}
    if mode == "function":
        body.update(tests=tests or "def check(c):\n    assert c() == 1\n", entry_point=entry)
    else:
        body["tests"] = tests
    resp = http.post(ex.url + "/run", json=body)
    assert resp.status_code == 200, resp.text
    return resp.json()


def one(http, ex, code, **kw):
    data = run(http, ex, code, **kw)
    assert data["total"] == 1
    return data["results"][0]


def sandbox_pids(http, ex) -> list[int]:
    """Live processes under this executor's sandbox uids (there must be none between runs)."""
    uid_range = http.get(ex.url + "/health").json()["uid_range"]
    if uid_range is None:
        return []
    lo, hi = uid_range
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        uid = int(fields["Uid"].split()[0])
        if lo <= uid <= hi and "Z" not in fields["State"]:
            out.append(int(entry))
    return out


def test_health_reports_isolation(http, executor):
    data = http.get(executor.url + "/health").json()
    assert data["status"] == "ok" and data["workers"] == 2
    iso = data["isolation"]
    assert iso["network"] in ("netns", "audit-hook")
    if _probe_namespaces()[0]:
        assert iso["network"] == "netns" and iso["drop_uid"] is True
        base = slot_uid_base(executor.proc.pid)
        assert data["uid_range"] == [base, base + 1] and base >= UID_BASE


def test_function_pass_fail_error(http, executor):
    assert one(http, executor, "def f():\n    return 1\n")["status"] == "ok"
    res = one(http, executor, "def f():\n    return 2\n")
    assert res["status"] == "failed" and not res["passed"]
    res = one(http, executor, "def f():\n    return undefined_name\n")
    assert res["status"] == "error" and "NameError" in res["stderr"]
    assert one(http, executor, "def f(:\n")["status"] == "error"


def test_early_exit_is_not_a_pass(http, executor):
    for code in ("import sys\nsys.exit(0)\n", "import os\nos._exit(0)\n"):
        res = one(http, executor, "def f():\n    return 2\n" + code)
        assert not res["passed"] and res["status"] == "failed", res


def test_stdio_per_test_results(http, executor):
    code = "n = int(input())\nprint(n * 2)\n"
    tests = [{"input": "3\n", "output": "6\n"}, {"input": "5", "output": "11"}]
    data = run(http, executor, code, tests=tests, mode="stdio")
    assert [r["status"] for r in data["results"]] == ["ok", "failed"]
    assert data["passed"] == 1 and data["total"] == 2 and data["status"] == "failed"
    assert data["results"][1]["stdout"] == "10\n"


def test_bad_request_is_400(http, executor):
    resp = http.post(executor.url + "/run", json={"code": "x", "mode": "nope", "tests": []})
    assert resp.status_code == 400 and "mode" in resp.json()["error"]
    resp = http.post(
        executor.url + "/run",
        json={"code": "x", "tests": "t", "entry_point": "f", "limits": {"wall_s": -1}},
    )
    assert resp.status_code == 400 and "wall_s" in resp.json()["error"]


def test_infinite_loop_cpu_and_wall(http, executor):
    t0 = time.monotonic()
    res = one(http, executor, "while True:\n    pass\n", cpu_s=1, wall_s=10)
    assert res["status"] == "timeout" and "cpu" in res["detail"]
    res = one(http, executor, "import time\ntime.sleep(60)\n", wall_s=1)
    assert res["status"] == "timeout" and "wall" in res["detail"]
    assert time.monotonic() - t0 < 15


def test_huge_allocation(http, executor):
    res = one(http, executor, "x = bytearray(16 * 1024**3)\n", memory_mb=512)
    assert res["status"] == "memory"


def test_output_limit(http, executor):
    res = one(http, executor, "print('x' * 10_000_000)\n", output_bytes=10_000)
    assert res["status"] == "output_limit"
    assert len(res["stdout"]) <= 10_000


def test_fork_bomb_is_contained(http, executor, iso):
    bomb = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    t0 = time.monotonic()
    res = one(http, executor, bomb, wall_s=2, max_processes=16)
    allowed = ("timeout", "killed") if not iso["audit_hook"] else ("error",)
    assert not res["passed"] and res["status"] in allowed, res
    assert time.monotonic() - t0 < 20
    assert sandbox_pids(http, executor) == []
    # The service still works afterwards.
    assert one(http, executor, "def f():\n    return 1\n")["status"] == "ok"


def test_writes_outside_workdir_fail(http, executor):
    tag = uuid.uuid4().hex
    targets = [f"/tmp/escape-{tag}", f"/root/escape-{tag}", f"/var/tmp/escape-{tag}"]
    targets.append(str(Path(__file__).resolve().parent / f"escape-{tag}"))
    for path in targets:
        code = f"open({path!r}, 'w').write('x')\ndef f():\n    return 1\n"
        res = one(http, executor, code)
        assert not res["passed"] and res["status"] == "error", (path, res)
        assert not os.path.exists(path), path
    # Its own directory is writable (and tempfile works there).
    code = (
        "import tempfile\nopen('own.txt', 'w').write('ok')\n"
        "tempfile.NamedTemporaryFile().write(b'x')\ndef f():\n    return 1\n"
    )
    assert one(http, executor, code)["status"] == "ok"


def test_disk_use_is_capped(http, executor, iso):
    if not iso["namespaces"]:
        pytest.skip("the disk cap is a tmpfs size, which needs a mount namespace")
    code = (
        "for i in range(4):\n"
        "    with open(f'blob{i}', 'wb') as fh:\n"
        "        fh.write(b'x' * 3_000_000)\n"
        "def f():\n    return 1\n"
    )
    res = one(http, executor, code, disk_mb=8)
    assert res["status"] == "error" and "No space left" in res["stderr"], res
    assert one(http, executor, code, disk_mb=32)["status"] == "ok"


def test_socket_to_local_listener_fails(http, executor):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        code = (
            "import socket\n"
            f"socket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'leak')\n"
            "def f():\n    return 1\n"
        )
        res = one(http, executor, code)
        assert not res["passed"] and res["status"] == "error", res
        assert "Error" in res["stderr"]
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()


def test_env_secrets_are_not_visible(http, executor):
    assert os.environ.get("RLC_TEST_SECRET") is None  # only the executor has it
    code = (
        "import os, glob\n"
        "print(dict(os.environ))\n"
        "for p in glob.glob('/proc/[0-9]*/environ'):\n"
        "    try:\n        print(open(p, 'rb').read())\n"
        "    except OSError:\n        pass\n"
        "def f():\n    return 1\n"
    )
    res = one(http, executor, code, output_bytes=1_000_000)
    assert res["status"] == "ok"
    assert SECRET not in res["stdout"] and "RLC_TEST_SECRET" not in res["stdout"]


def test_orphaned_child_is_killed(http, executor, iso):
    if iso["audit_hook"]:
        pytest.skip("the audit-hook fallback refuses to start processes at all")
    code = (
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'],\n"
        "                     start_new_session=True)\n"
        "print(p.pid, flush=True)\n"
        "def f():\n    return 1\n"
    )
    res = one(http, executor, code)
    assert res["status"] == "ok", res
    pid = int(res["stdout"].split()[0])
    time.sleep(0.2)
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        state = "State: gone"
    assert "sleeping" not in state and "running" not in state, state
    assert sandbox_pids(http, executor) == []


def test_concurrency_is_bounded(http, executor):
    from concurrent.futures import ThreadPoolExecutor

    code = "import time\ntime.sleep(0.5)\ndef f():\n    return 1\n"
    t0 = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda _: one(http, executor, code), range(4)))
    elapsed = time.monotonic() - t0
    assert all(r["status"] == "ok" for r in outs)
    assert elapsed >= 1.0  # 4 runs of 0.5 s on 2 workers need two rounds


@pytest.fixture(scope="module")
def audit_executor():
    with LocalExecutor(workers=1, isolation="audit") as ex:
        yield ex


def test_audit_fallback_blocks_network_and_writes(http, audit_executor):
    health = http.get(audit_executor.url + "/health").json()["isolation"]
    assert health["network"] == "audit-hook" and health["audit_hook"] is True
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    tag = uuid.uuid4().hex
    try:
        for code in (
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}))\n",
            f"open('/tmp/escape-{tag}', 'w')\n",
            "import subprocess\nsubprocess.run(['true'])\n",
            "import os\nopen(f'/proc/{os.getppid()}/environ', 'rb').read()\n",
        ):
            res = one(http, audit_executor, code + "def f():\n    return 1\n")
            assert res["status"] == "error" and "PermissionError" in res["stderr"], res
        assert not os.path.exists(f"/tmp/escape-{tag}")
        assert one(http, audit_executor, "def f():\n    return 1\n")["status"] == "ok"
    finally:
        listener.close()
