"""The executor service: statuses, limits, forged verdicts and hostile programs against a
real server, in each sandbox mode this host offers (as root: namespaces, user namespaces, and
the service itself run as an unprivileged uid), plus the refusal to run without a sandbox."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import pytest

from runtime.executor import sandbox as sb
from runtime.executor.client import ExecutorStartError, LocalExecutor
from runtime.executor.sandbox import UID_BASE, slot_uid_base
from runtime.executor.settings import ExecutorSettings

SECRET = "rlc-secret-" + uuid.uuid4().hex
SYSTEM_PYTHON = "/usr/bin/python3"
NOBODY = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
# Root can also show the unprivileged layer: the service itself run as uid 65534 with the
# system interpreter (ours may live under a private home), our packages on its path.
UNPRIVILEGED = (
    os.geteuid() == 0 and os.access(SYSTEM_PYTHON, os.X_OK) and shutil.which("setpriv") is not None
)
MODES = ["auto", "userns", "unprivileged"] if os.geteuid() == 0 else ["auto"]


@pytest.fixture(scope="module", params=MODES)
def executor(request):
    env = dict(os.environ, RLC_TEST_SECRET=SECRET)
    if request.param != "unprivileged":
        with LocalExecutor(ExecutorSettings(workers=2, isolation=request.param), env=env) as ex:
            yield ex
        return
    if not UNPRIVILEGED:
        pytest.skip("needs root to become uid 65534, setpriv and a system python")
    import aiohttp

    site = str(Path(aiohttp.__file__).resolve().parents[1])
    env["PYTHONPATH"] = site
    settings = ExecutorSettings(workers=2, isolation="userns")
    with LocalExecutor(settings, env=env, service_python=SYSTEM_PYTHON, wrapper=NOBODY) as ex:
        yield ex


@pytest.fixture(scope="module")
def iso(http, executor):
    """The isolation the executor runs with."""
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
    """Processes under this executor's sandbox uids, zombies included (none between runs)."""
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
        if lo <= uid <= hi:
            out.append(int(entry))
    return out


def host_pids_with(tag: str) -> list[int]:
    """Host processes whose command line mentions ``tag``."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if tag.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    out.append(int(entry))
            except OSError:
                continue
    return out


def test_health_reports_isolation(http, executor):
    data = http.get(executor.url + "/health").json()
    assert data["status"] == "ok" and data["workers"] == 2
    iso = data["isolation"]
    assert iso["kind"] in ("namespaces", "userns") and iso["namespaces"] is True
    assert iso["network"] == "netns" and iso["proc"] == "private" and not iso["warning"]
    if iso["kind"] == "namespaces":
        assert iso["drop_uid"] is True
        base = slot_uid_base(executor.proc.pid)
        # Two uids per slot: the program's and its judge's.
        assert data["uid_range"] == [base, base + 3] and base >= UID_BASE
    assert iso["seccomp"] is True  # libseccomp is a dependency
    if sb.landlock_abi():
        assert iso["landlock_abi"] == sb.landlock_abi()


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


# -- forged verdicts (issue: a program could declare its own pass) -----------------------

FORGE = (
    "import os, re, sys\n"
    "sys.audit = lambda *a, **k: None\n"
    "words = re.findall(r'[0-9a-f]{32}', ' '.join(getattr(sys, 'orig_argv', sys.argv)))\n"
    "for fd in range(3, 64):\n"
    "    for w in words + ['ok']:\n"
    "        try:\n"
    "            os.write(fd, (w + ' ok\\n').encode())\n"
    '            os.write(fd, b\'{"ok": {"i": "1"}}\\n{"status": "ok"}\\n\')\n'
    "        except OSError:\n"
    "            pass\n"
    "os._exit(0)\n"
)


def test_nonce_and_pipe_forgery_does_not_pass(http, executor):
    """Reading argv for a nonce and writing 'ok' to every inherited fd is not a pass."""
    tests = "def check(c):\n    assert c(3) == 9\n"
    res = one(http, executor, "def f(x):\n    return 0\n" + FORGE, tests=tests)
    assert not res["passed"] and res["status"] == "failed", res
    stdio = [{"input": "3\n", "output": "9\n"}]
    res = one(http, executor, "print(0)\n" + FORGE, tests=stdio, mode="stdio")
    assert not res["passed"] and res["status"] == "failed", res


def test_always_equal_objects_do_not_pass(http, executor):
    tests = "def check(c):\n    assert c() == [1, 2]\n    assert c() != 5\n"
    for body in (
        "class A:\n    def __eq__(self, o): return True\n    def __ne__(self, o): return False\n",
        "class A(list):\n    def __eq__(self, o): return True\n",
        "class A(int):\n    def __eq__(self, o): return True\n",
        "class A(str):\n    def __eq__(self, o): return True\n",
    ):
        res = one(http, executor, body + "def f():\n    return A()\n", tests=tests)
        assert not res["passed"] and res["status"] == "failed", (body, res)
    # A list subclass is judged by its real items: this one really is [1, 2].
    good = "class A(list):\n    pass\ndef f():\n    return A([1, 2])\n"
    assert one(http, executor, good, tests=tests)["status"] == "ok"


def test_values_cross_as_plain_data(http, executor):
    tests = (
        "def check(c):\n"
        "    assert c((1, 'a'), {2: [3.5, None]}, k={1, 2}) == "
        "((1, 'a'), {2: [3.5, None]}, {1, 2}, b'x', float('inf'), 10**5000)\n"
        "    assert type(c(1, 2)[0]) is int\n"
    )
    code = "def f(a, b, k=None):\n    return a, b, k, b'x', float('inf'), 10**5000\n"
    assert one(http, executor, code, tests=tests)["status"] == "ok"
    # The test may catch the program's exceptions by type...
    raises = "def check(c):\n    try:\n        c()\n    except ValueError:\n        return\n    assert False\n"
    assert (
        one(http, executor, "def f():\n    raise ValueError('no')\n", tests=raises)["status"]
        == "ok"
    )
    # ...but a program that dies cannot be caught into a pass.
    catch_all = "def check(c):\n    try:\n        c()\n    except Exception:\n        pass\n"
    res = one(http, executor, "import os\ndef f():\n    os._exit(0)\n", tests=catch_all)
    assert not res["passed"] and res["status"] == "failed", res


def test_test_code_is_sandboxed_too(http, executor):
    """The judge runs the request's test code: it gets the same sandbox (and no network)."""
    tag = uuid.uuid4().hex
    here = Path(__file__).resolve().parent
    for attack in (
        f"open({str(here / ('judge-escape-' + tag))!r}, 'w')\n",
        f"open('/escape-{tag}', 'w')\n",
        "import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)\n",
    ):
        tests = attack + "def check(c):\n    assert c() == 1\n"
        res = one(http, executor, "def f():\n    return 1\n", tests=tests)
        assert res["status"] == "error" and res["detail"].startswith("test error"), res
    assert not (here / f"judge-escape-{tag}").exists() and not Path(f"/escape-{tag}").exists()


def test_prompt_context_is_visible_to_the_tests_only(http, executor):
    body = {
        "code": "def helper(x):\n    return 0\ndef f(x):\n    return x + 1\n",
        "mode": "function",
        "tests": "def check(c):\n    assert c(helper(1)) == 3\n",
        "entry_point": "f",
        "context": "def helper(x):\n    return 2 * x\n",
    }
    data = http.post(executor.url + "/run", json=body).json()
    assert data["results"][0]["status"] == "ok", data


def test_fork_bomb_is_contained_and_the_slot_is_clean_after(http, executor):
    bomb = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    t0 = time.monotonic()
    res = one(http, executor, bomb, wall_s=2, max_processes=16)
    assert not res["passed"] and res["status"] in ("timeout", "killed"), res
    assert time.monotonic() - t0 < 20
    assert sandbox_pids(http, executor) == []
    # The next runs in the same slots pass (zombies of the bomb no longer count).
    spawn = (
        "import subprocess, sys\n"
        "for _ in range(8):\n    subprocess.run([sys.executable, '-S', '-c', 'pass'], check=True)\n"
        "def f():\n    return 1\n"
    )
    for _ in range(4):
        assert one(http, executor, spawn, max_processes=16)["status"] == "ok"


def test_process_limit_applies(http, executor):
    code = (
        "import subprocess, sys\nps = []\n"
        "for _ in range(12):\n"
        "    ps.append(subprocess.Popen([sys.executable, '-S', '-c', 'import time; time.sleep(5)']))\n"
        "def f():\n    return 1\n"
    )
    res = one(http, executor, code, max_processes=6)
    assert res["status"] == "error" and "BlockingIOError" in res["stderr"], res
    assert one(http, executor, code, max_processes=32)["status"] == "ok"


def test_writes_outside_workdir_fail(http, executor):
    tag = uuid.uuid4().hex
    here = Path(__file__).resolve().parent
    world = here / f"world-writable-{tag}"  # not a /tmp-like place, but mode 1777
    world.mkdir()
    world.chmod(0o1777)
    try:
        targets = [f"/tmp/escape-{tag}", f"/root/escape-{tag}", f"/var/tmp/escape-{tag}"]
        targets += [str(here / f"escape-{tag}"), str(world / "x"), f"/escape-{tag}"]
        targets += [f"/dev/shm/escape-{tag}"]
        for path in targets:
            code = f"open({path!r}, 'w').write('x')\ndef f():\n    return 1\n"
            res = one(http, executor, code)
            assert not res["passed"] and res["status"] == "error", (path, res)
            assert not os.path.exists(path), path
    finally:
        world.rmdir()
    # Its own directory is writable (and tempfile works there).
    code = (
        "import tempfile\nopen('own.txt', 'w').write('ok')\n"
        "tempfile.NamedTemporaryFile().write(b'x')\ndef f():\n    return 1\n"
    )
    assert one(http, executor, code)["status"] == "ok"


def test_reads_of_private_places_fail(http, executor):
    """The service's files (the repository, /root) are not readable; system files are."""
    here = Path(__file__).resolve()
    code = (
        "import os\n"
        f"for p in ({str(here)!r}, '/root', {str(here.parents[2])!r}):\n"
        "    try:\n"
        "        print('READ', p, len(open(p).read()) if os.path.isfile(p) else os.listdir(p))\n"
        "    except OSError as exc:\n"
        "        print('DENIED', p, type(exc).__name__)\n"
        "print(len(open('/etc/hostname').read()) >= 0)\n"
        "def f():\n    return 1\n"
    )
    res = one(http, executor, code)
    assert res["status"] == "ok", res
    assert "READ" not in res["stdout"] and res["stdout"].count("DENIED") == 3, res["stdout"]


def test_disk_use_is_capped(http, executor):
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
            "import socket, sys\nsys.audit = lambda *a, **k: None\n"
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


def test_env_and_other_processes_are_not_visible(http, executor):
    assert os.environ.get("RLC_TEST_SECRET") is None  # only the executor has it
    code = (
        "import os, glob\n"
        "print('PIDS', sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
        "print(dict(os.environ))\n"
        "for p in glob.glob('/proc/[0-9]*/environ'):\n"
        "    try:\n        print(p, open(p, 'rb').read())\n"
        "    except OSError:\n        pass\n"
        "print([open(p, 'rb').read()[-3000:] for p in glob.glob('/proc/[0-9]*/cmdline')])\n"
        "def f():\n    return 1\n"
    )
    tag = "expected-" + uuid.uuid4().hex
    tests = f"def check(c):\n    assert c() == 1, {tag!r}\n"
    res = one(http, executor, code, tests=tests, output_bytes=1_000_000)
    assert res["status"] == "ok"
    out = res["stdout"]
    assert SECRET not in out and "RLC_TEST_SECRET" not in out
    assert tag not in out and "--port" not in out  # neither the judge nor the service
    # A private /proc: only the sandbox's init (1) and the program (2) exist.
    assert "PIDS [1, 2]" in out


def test_kernel_escape_hatches_are_closed(http, executor):
    code = (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "print('unshare', libc.unshare(0x10000000), ctypes.get_errno())\n"
        "print('ptrace', libc.ptrace(16, 1, 0, 0), ctypes.get_errno())\n"
        "print('mount', libc.mount(b'none', b'/tmp', b'tmpfs', 0, None), ctypes.get_errno())\n"
        "def f():\n    return 1\n"
    )
    res = one(http, executor, code)
    assert res["status"] == "ok", res
    for call in ("unshare", "ptrace", "mount"):
        assert re.search(rf"^{call} -1 ", res["stdout"], re.MULTILINE), res["stdout"]


def test_orphaned_child_is_killed(http, executor):
    tag = "orphan-" + uuid.uuid4().hex
    code = (
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-S', '-c', 'import time; time.sleep(120)', "
        f"{tag!r}], start_new_session=True)\n"
        "def f():\n    return 1\n"
    )
    res = one(http, executor, code)
    assert res["status"] == "ok", res
    deadline = time.monotonic() + 5
    while host_pids_with(tag) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert host_pids_with(tag) == []
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


def test_network_is_refused_unless_the_executor_allows_it(http, executor):
    body = {"code": "def f():\n    return 1\n", "tests": "def check(c):\n    assert c() == 1\n"}
    resp = http.post(executor.url + "/run", json={**body, "entry_point": "f", "network": True})
    assert resp.status_code == 400 and "network" in resp.json()["error"]


def test_network_when_allowed(http):
    with LocalExecutor(ExecutorSettings(workers=1, network=True)) as ex:
        code = (
            "import socket\ns = socket.socket()\ns.bind(('127.0.0.1', 0))\ndef f():\n    return 1\n"
        )
        body = {"code": code, "tests": "def check(c):\n    assert c() == 1\n", "entry_point": "f"}
        with_net = http.post(ex.url + "/run", json={**body, "network": True}).json()
        assert with_net["results"][0]["status"] == "ok", with_net
        without = http.post(ex.url + "/run", json=body).json()
        assert without["results"][0]["status"] == "error", without


# -- no sandbox: refuse unless explicitly allowed ---------------------------------------------


def test_no_sandbox_layer_refuses_to_start(monkeypatch):
    monkeypatch.setattr(sb, "_probe_run", lambda *a: "not permitted here")
    with pytest.raises(sb.SandboxUnavailable, match="refusing to run untrusted code"):
        sb.probe_isolation()
    iso = sb.probe_isolation(allow_unsandboxed=True)
    assert iso.kind == "none" and "UNSANDBOXED" in iso.describe()["warning"]


def test_unsandboxed_executor_needs_the_opt_in_and_warns(http):
    with pytest.raises(ExecutorStartError, match="allow-unsandboxed"):
        LocalExecutor(ExecutorSettings(workers=1, isolation="none"), startup_timeout_s=30)
    with LocalExecutor(ExecutorSettings(workers=1, isolation="none", allow_unsandboxed=True)) as ex:
        health = http.get(ex.url + "/health").json()["isolation"]
        assert health["kind"] == "none" and "UNSANDBOXED" in health["warning"]
        assert "forge a passing verdict" in health["warning"]  # said, not hidden
        res = run(http, ex, "def f():\n    return 1\n")
        assert res["results"][0]["status"] == "ok" and "UNSANDBOXED" in res["isolation"]["warning"]


# -- an unprivileged host ---------------------------------------------------------------------


@pytest.mark.skipif(
    not UNPRIVILEGED, reason="needs root to become uid 65534, setpriv and a system python"
)
def test_userns_sandbox_as_an_unprivileged_uid():
    """The ``userns`` layer as a plain uid (65534): read-only root, private /proc, no net,
    the process and disk limits, and nothing left running afterwards."""
    tag = "userns-orphan-" + uuid.uuid4().hex
    prefix = str(Path(os.path.realpath(SYSTEM_PYTHON)).parent.parent)
    iso = sb.Isolation(
        "userns", False, sb.landlock_abi(), True, os.path.realpath(SYSTEM_PYTHON), prefix
    )
    with tempfile.TemporaryDirectory() as root:
        os.chmod(root, 0o755)
        work = Path(root, "run")
        work.mkdir()
        os.chown(work, 65534, 65534)
        code = (
            "import os, socket\n"
            "print(os.getuid(), sorted(p for p in os.listdir('/proc') if p.isdigit()))\n"
            "for path in ('/escape', '/tmp/escape', '/var/tmp/escape'):\n"
            "    try:\n        open(path, 'w')\n        print('WROTE', path)\n"
            "    except OSError:\n        pass\n"
            "try:\n    socket.create_connection(('127.0.0.1', 22), timeout=1)\n    print('NET')\n"
            "except OSError:\n    pass\n"
            "import subprocess, sys\nps = []\n"
            "try:\n"
            "    for _ in range(12):\n"
            "        ps.append(subprocess.Popen([sys.executable, '-S', '-c',\n"
            f"                   'import time; time.sleep(120)', {tag!r}], start_new_session=True))\n"
            "except OSError as exc:\n    print('LIMIT', type(exc).__name__, len(ps))\n"
            "try:\n    open('big', 'wb').write(b'x' * 9_000_000)\n    print('DISK')\n"
            "except OSError:\n    pass\n"
            "open('own.txt', 'w').write('ok')\nprint('done')\n"
        )
        (work / "main.py").write_text(code)
        bpf = Path(root, "filter.bpf")
        bpf.write_bytes(sb.build_seccomp(False))
        argv = sb.init_argv(
            iso,
            sb.Limits(max_processes=6, disk_mb=8),
            str(work),
            None,
            [*sb.program_prefix(iso), "main.py"],
            str(bpf),
        )
        argv[0] = SYSTEM_PYTHON
        out = subprocess.run(
            [*NOBODY, *argv],
            capture_output=True,
            text=True,
            timeout=60,
            env=sb.sandbox_env(iso, str(work)),
            cwd=root,
        )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "1000 ['1', '2']" and lines[-1] == "done", out.stdout
    assert lines[1].startswith("LIMIT BlockingIOError") and len(lines) == 3, out.stdout
    time.sleep(0.2)
    assert host_pids_with(tag) == []  # the PID namespace took the sleepers with it


def test_a_slot_with_leftover_processes_waits_until_they_are_gone(monkeypatch):
    import asyncio

    iso = sb.probe_isolation()
    if not iso.drop_uid:
        pytest.skip("slot uids need root")
    real, calls = sb.kill_uid, []

    def first_sweep_fails(uid: int, timeout_s: float = 10.0) -> bool:
        calls.append(uid)
        return real(uid, timeout_s) and len(calls) > 1

    monkeypatch.setattr(sb, "kill_uid", first_sweep_fails)
    box = sb.Sandbox(iso, 1)

    async def go():
        first = await box.run("print(1)\n", "stdio", sb.Limits())
        assert box.quarantined == [0]  # not handed to the next run as it is
        second = await box.run("print(2)\n", "stdio", sb.Limits())
        return first, second

    try:
        first, second = asyncio.run(go())
    finally:
        box.close()
    assert first.status == second.status == "ok" and box.quarantined == []
    assert len(calls) == 4  # after run 1, the reclaim (program and judge uid), after run 2
