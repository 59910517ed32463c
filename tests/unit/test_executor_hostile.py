"""Hostile programs against a real executor, in every sandbox mode this host offers.

Each program tries one way out (network, UNIX sockets, other processes, memory, processes,
files, devices, time, outliving the run, kernel calls) and prints ``ESCAPED <what>`` when it
gets through, or ``HELD <MiB>`` for the memory it managed to hold at once. Each has the
verdicts it may get; after every mode's batch the host is checked: the listeners (TCP, UDP,
UNIX sockets under ``/run`` and elsewhere, an abstract socket) received nothing, no canary
file appeared, nothing the programs started is still running, the service is healthy.

The ``none`` mode (opt-in, unsandboxed) runs the same programs as a throw-away uid and the
test checks that its warning names exactly the kinds of escape that got through.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from runtime.executor import sandbox as sb
from runtime.executor.client import LocalExecutor
from runtime.executor.settings import ExecutorSettings

TAG = "rlc-hostile-" + uuid.uuid4().hex[:12]
SECRET = "rlc-secret-" + uuid.uuid4().hex
SYSTEM_PYTHON = "/usr/bin/python3"
ROOT = os.geteuid() == 0
HAS_SETPRIV = shutil.which("setpriv") is not None
# The unsandboxed service runs as a uid no other process on the host has, so the programs'
# kill -1 reaches only what this test started.
NONE_UID = 1_400_000_000 + os.getpid() % 1_000_000
HERE = Path(__file__).resolve().parent
WORKERS = 4  # runs at once: most programs sleep or wait on a limit
QUICK = {"wall_s": 1.5, "cpu_s": 1.5}  # for the programs that run into the time limit
# Each run's budget: the whole process tree of a program must fit in MEMORY_MB.
MEMORY_MB = 320
LIMITS = {
    "wall_s": 4,
    "cpu_s": 4,
    "memory_mb": MEMORY_MB,
    "max_processes": 8,
    "disk_mb": 16,
    "file_bytes": 4 * 1024 * 1024,
    "open_files": 64,
    "output_bytes": 65536,
}

OK = {"ok"}
FAILS = {"failed", "error", "killed", "memory", "output_limit"}
ANY = {"ok", *FAILS, "timeout"}

# Shared preamble: report an escape, hold memory.
PRE = """\
import os, sys, socket, time, ctypes, errno, signal
libc = ctypes.CDLL(None, use_errno=True)
def esc(what):
    print('ESCAPED', what, flush=True)
def attempt(what, fn):
    try:
        fn()
    except Exception:
        return False
    esc(what)
    return True
CHUNK = 4 << 20
"""

HOLD_CHILDREN = """
def anonymous_chunk():
    return b'\\x01' * CHUNK
def memfd_chunk():
    fd = os.memfd_create('x')  # one per chunk: RLIMIT_FSIZE bounds each file
    os.write(fd, b'\\x01' * CHUNK)
    return fd
def hold_in_children(n, grab=anonymous_chunk, seconds=1.5):
    # MiB that n children hold at once (stopped, so none is still being killed)
    r, w = os.pipe()
    kids = []
    for _ in range(n):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            os.close(r)
            held = []
            try:
                while True:
                    held.append(grab())
                    os.write(w, f'{os.getpid()} {4 * len(held)}\\n'.encode())
            except (MemoryError, OSError):
                pass
            time.sleep(30)
            os._exit(0)
        kids.append(pid)
    os.close(w)
    time.sleep(seconds)
    for p in kids:
        os.kill(p, signal.SIGSTOP)
    time.sleep(0.5)
    os.set_blocking(r, False)
    data = b''
    with __import__('contextlib').suppress(BlockingIOError):
        while chunk := os.read(r, 1 << 16):
            data += chunk
    last = {}
    for line in data.decode().splitlines():
        pid, mb = line.split()
        last[int(pid)] = int(mb)
    alive = [p for p in kids if os.waitpid(p, os.WNOHANG) == (0, 0)]
    total = sum(last.get(p, 0) for p in alive)
    for p in kids:
        with __import__('contextlib').suppress(OSError):
            os.kill(p, 9)
    return total
"""


@dataclass(frozen=True)
class Hostile:
    name: str
    kind: str  # the kind of escape, as the unsandboxed warning names it
    code: str
    expect: set[str] = field(default_factory=lambda: set(OK))
    limits: dict[str, float] = field(default_factory=dict)
    none_safe: bool = True  # run against the unsandboxed mode too


def programs(ctx: dict[str, object]) -> list[Hostile]:
    """The suite, with this run's ports, paths and pids filled in."""
    c = ctx
    return [
        # -- network ------------------------------------------------------------------------
        Hostile(
            "tcp-loopback",
            "network",
            f"s = socket.create_connection(('127.0.0.1', {c['tcp_port']}), timeout=1)\n"
            "s.sendall(b'tcp-loopback'); esc('tcp')\n",
            ANY - {"timeout"},
        ),
        Hostile(
            "udp-loopback",
            "network",
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            f"s.sendto(b'udp-loopback', ('127.0.0.1', {c['udp_port']})); esc('udp')\n",
            ANY - {"timeout"},
        ),
        Hostile(
            "tcp-bind-listen",
            "network",
            "attempt('bind', lambda: socket.create_server(('0.0.0.0', 0)))\n",
        ),
        Hostile(
            "raw-and-packet-sockets",
            "network",
            "attempt('raw', lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, 1))\n"
            "attempt('packet', lambda: socket.socket(17, socket.SOCK_RAW, 0))\n",
        ),
        Hostile(
            "network-interfaces",
            "network",
            "try:\n    names = [n for _, n in socket.if_nameindex() if n != 'lo']\n"
            "except OSError:\n    names = []\n"
            "print(names)\nif names: esc('interfaces ' + ','.join(names))\n",
        ),
        # -- UNIX sockets -------------------------------------------------------------------
        Hostile(
            "unix-stream-under-run",
            "unix sockets",
            "def go():\n    s = socket.socket(socket.AF_UNIX)\n"
            f"    s.connect({c['unix_run']!r}); s.sendall(b'unix-stream-under-run')\n"
            "attempt('unix stream /run', go)\n",
        ),
        Hostile(
            "unix-stream-via-var-run",
            "unix sockets",
            "def go():\n    s = socket.socket(socket.AF_UNIX)\n"
            f"    s.connect({c['unix_var_run']!r}); s.sendall(b'unix-stream-via-var-run')\n"
            "attempt('unix stream /var/run', go)\n",
        ),
        Hostile(
            "unix-dgram-under-run",
            "unix sockets",
            "def go():\n    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
            f"    s.sendto(b'unix-dgram-under-run', {c['unix_dgram']!r})\n"
            "attempt('unix dgram /run', go)\n",
        ),
        Hostile(
            "unix-socket-elsewhere",
            "unix sockets",
            "def go():\n    s = socket.socket(socket.AF_UNIX)\n"
            f"    s.connect({c['unix_else']!r}); s.sendall(b'unix-socket-elsewhere')\n"
            "attempt('unix stream elsewhere', go)\n",
        ),
        Hostile(
            "unix-abstract",
            "unix sockets",
            "def go():\n    s = socket.socket(socket.AF_UNIX)\n"
            f"    s.connect({c['unix_abstract']!r}); s.sendall(b'unix-abstract')\n"
            "attempt('abstract socket', go)\n",
        ),
        Hostile(
            "unix-socketpair-dgram-sendto",
            "unix sockets",
            "def go():\n    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
            f"    a.sendto(b'unix-socketpair-dgram-sendto', {c['unix_dgram']!r})\n"
            "attempt('socketpair sendto', go)\n"
            "def go2():\n    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
            f"    a.connect({c['unix_dgram']!r}); a.send(b'unix-socketpair-dgram-sendto')\n"
            "attempt('socketpair connect', go2)\n",
        ),
        # -- /proc --------------------------------------------------------------------------
        Hostile(
            "proc-other-processes",
            "other processes",
            "pids = [int(p) for p in os.listdir('/proc') if p.isdigit()]\n"
            "if len(pids) > 2: esc(f'{len(pids)} pids')\n",
        ),
        Hostile(
            "proc-environ-secrets",
            "other processes",
            "import glob\nfor p in glob.glob('/proc/[0-9]*/environ'):\n"
            "    try:\n        data = open(p, 'rb').read()\n    except OSError:\n        continue\n"
            f"    if {SECRET.encode()!r} in data: esc('secret in ' + p)\n",
        ),
        Hostile(
            "proc-service-cmdline",
            "other processes",
            "import glob\nfor p in glob.glob('/proc/[0-9]*/cmdline'):\n"
            "    try:\n        data = open(p, 'rb').read()\n    except OSError:\n        continue\n"
            "    if b'runtime.executor' in data: esc('service cmdline ' + p)\n",
        ),
        Hostile(
            "proc-fd-of-init",
            "other processes",
            "import glob\nfor p in glob.glob('/proc/[0-9]*/fd/*'):\n"
            "    if p.startswith(f'/proc/{os.getpid()}/') or p.startswith('/proc/self'):\n"
            "        continue\n"
            "    try:\n        fd = os.open(p, os.O_WRONLY | os.O_NONBLOCK)\n"
            "    except OSError:\n        continue\n"
            "    esc('opened ' + p)\n",
        ),
        # -- ptrace and signals -------------------------------------------------------------
        Hostile(
            "ptrace-parent",
            "other processes",
            # PTRACE_SEIZE: attaches without stopping the tracee (attach would freeze it)
            "ppid = os.getppid()\n"
            "if libc.ptrace(0x4206, ppid, 0, 0) == 0: esc('ptrace parent')\n"
            f"if libc.ptrace(0x4206, {c['service_pid']}, 0, 0) == 0: esc('ptrace service')\n",
        ),
        Hostile(
            "process-vm-readv",
            "other processes",
            "class iov(ctypes.Structure):\n"
            "    _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]\n"
            "buf = ctypes.create_string_buffer(16)\nl = iov(ctypes.addressof(buf), 16)\n"
            "r = iov(0x400000, 16)\n"
            f"for pid in (os.getppid(), {c['service_pid']}):\n"
            "    if libc.process_vm_readv(pid, ctypes.byref(l), 1, ctypes.byref(r), 1, 0) > 0:\n"
            "        esc('process_vm_readv')\n",
        ),
        Hostile(
            "signal-the-service",
            "other processes",
            f"for pid in ({c['service_pid']}, {c['sentinel_pid']}):\n"
            "    attempt(f'signal {pid}', lambda: os.kill(pid, 0))\n",
        ),
        Hostile(
            "kill-the-parent",
            "other processes",
            "os.kill(os.getppid(), signal.SIGKILL)\ntime.sleep(0.2)\nprint('still here')\n",
            ANY - {"timeout"},
            none_safe=False,
        ),
        Hostile(
            "kill-minus-one",
            "other processes",
            "os.kill(-1, signal.SIGKILL)\ntime.sleep(0.2)\n",
            ANY - {"timeout"},
            none_safe=False,
        ),
        Hostile(
            "kill-minus-one-probe",
            "other processes",
            "attempt('kill -1', lambda: os.kill(-1, 0))\n",
        ),
        Hostile(
            "forge-exit-status",
            "verdicts",
            "import glob\nfor p in glob.glob('/proc/[0-9]*/fd/*'):\n"
            "    if p.startswith(f'/proc/{os.getpid()}/'):\n        continue\n"
            "    try:\n        fd = os.open(p, os.O_WRONLY | os.O_NONBLOCK)\n"
            "        os.write(fd, b'0\\n')\n    except OSError:\n        continue\n"
            "sys.exit(3)\n",
            {"failed"},
        ),
        # -- memory -------------------------------------------------------------------------
        Hostile(
            "memory-one-process",
            "memory",
            "held = []\ntry:\n    while True:\n        held.append(b'\\x01' * CHUNK)\n"
            "except MemoryError:\n    pass\nprint('HELD', 4 * len(held))\n",
            ANY - {"timeout"},
        ),
        Hostile(
            "memory-child-processes",
            "memory",
            HOLD_CHILDREN + "print('HELD', hold_in_children(7))\n",
            ANY - {"timeout"},
        ),
        Hostile(
            "memory-threads",
            "memory",
            "import threading\nheld = []\ndef grab():\n    try:\n        while True:\n"
            "            held.append(b'\\x01' * CHUNK)\n    except MemoryError:\n        pass\n"
            "ts = []\nfor _ in range(4):\n    try:\n        t = threading.Thread(target=grab)\n"
            "        t.start(); ts.append(t)\n    except RuntimeError:\n        break\n"
            "for t in ts: t.join()\nprint('HELD', 4 * len(held))\n",
            ANY - {"timeout"},
        ),
        Hostile(
            "memory-memfd",
            "memory",
            "mb = 0\ntry:\n    fds = [os.memfd_create('x') for _ in range(48)]\n"
            "    for fd in fds:\n        try:\n            while True:\n"
            "                os.write(fd, b'\\x01' * CHUNK); mb += 4\n"
            "        except OSError:\n            pass\nexcept OSError:\n    pass\n"
            "print('HELD', mb)\n",
            ANY - {"timeout"},
        ),
        Hostile(
            "memory-memfd-in-children",
            "memory",
            HOLD_CHILDREN + "print('HELD', hold_in_children(6, memfd_chunk))\n",
            ANY - {"timeout"},
        ),
        Hostile(
            "memory-tmpfs-and-children",
            "memory",
            HOLD_CHILDREN + "mb = 0\ntry:\n    with open('fill', 'wb') as fh:\n"
            "        while True:\n            fh.write(b'\\x01' * (1 << 20)); fh.flush(); mb += 1\n"
            "except OSError:\n    pass\nprint('HELD', mb + hold_in_children(7))\n",
            ANY - {"timeout"},
            {"file_bytes": 64 * 1024 * 1024},
        ),
        Hostile(
            "memory-sysv-shm",
            "memory",
            "libc.shmget.restype = ctypes.c_int\nlibc.shmat.restype = ctypes.c_void_p\nmb = 0\n"
            "for _ in range(16):\n    sid = libc.shmget(0, ctypes.c_size_t(32 << 20), 0o1600)\n"
            "    if sid < 0:\n        break\n    addr = libc.shmat(sid, None, 0)\n"
            "    if addr in (None, ctypes.c_void_p(-1).value):\n        break\n"
            "    ctypes.memset(addr, 1, 32 << 20); libc.shmdt(ctypes.c_void_p(addr)); mb += 32\n"
            "print('HELD', mb)\n",
            ANY - {"timeout"},
        ),
        Hostile(
            "memory-posix-shm",
            "memory",
            f"attempt('/dev/shm', lambda: open({c['shm_file']!r}, 'wb').write(b'x'))\n",
        ),
        Hostile(
            "memory-message-queues",
            "memory",
            "n = 0\nfor _ in range(64):\n    if libc.msgget(0, 0o1600) < 0:\n        break\n"
            "    n += 1\nif n: esc(f'{n} message queues')\n",
        ),
        # -- processes ----------------------------------------------------------------------
        Hostile(
            "fork-bomb",
            "processes",
            "while True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
            {"timeout", "killed", "failed", "error"},
            QUICK,
            none_safe=False,
        ),
        Hostile(
            "thread-bomb",
            "processes",
            "import threading\nn = 0\ntry:\n    while True:\n"
            "        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
            "        n += 1\nexcept RuntimeError:\n    pass\nprint('threads', n)\n"
            "if n > 16: esc(f'{n} threads')\nos._exit(0)\n",
        ),
        Hostile(
            "subprocess-bomb",
            "processes",
            "import subprocess\nps = []\ntry:\n    for _ in range(64):\n"
            "        ps.append(subprocess.Popen([sys.executable, '-S', '-c', "
            f"'import time; time.sleep(60)', {TAG!r}]))\n"
            "except OSError:\n    pass\nif len(ps) > 8: esc(f'{len(ps)} processes')\n",
        ),
        Hostile(
            "daemonise-to-outlive",
            "outliving the run",
            # the program ends only once its grandchild has left the run's session (on a
            # loaded host the first child may not have reached setsid() when the run ends)
            "r, w = os.pipe()\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            "        os.write(w, b'x')\n        os.closerange(0, 3)\n"
            f"        os.execv(sys.executable, [sys.executable, '-S', '-c', "
            f"'import time; time.sleep(60)', {TAG!r}])\n    os._exit(0)\n"
            "os.close(w)\nos.read(r, 1)\ntime.sleep(0.3)\n",
        ),
        Hostile(
            "child-holds-the-pipes",
            "outliving the run",
            "if os.fork() == 0:\n"
            f"    os.execv(sys.executable, [sys.executable, '-S', '-c', "
            f"'import time; time.sleep(60)', {TAG!r}])\n",
        ),
        # -- files --------------------------------------------------------------------------
        Hostile(
            "write-outside-the-work-dir",
            "files",
            f"for p in {c['write_targets']!r}:\n"
            "    attempt('wrote ' + p, lambda: open(p, 'w').write('x'))\n",
        ),
        Hostile(
            "read-host-files",
            "files",
            f"for p in ({c['secret_file']!r}, '/etc/shadow', '/root/.bash_history'):\n"
            "    try:\n        data = open(p).read()\n    except OSError:\n        continue\n"
            f"    if p != '/root/.bash_history' or data: esc('read ' + p)\n",
        ),
        Hostile(
            "read-env-secrets",
            "files",
            f"if any({SECRET!r} in v for v in os.environ.values()): esc('env secret')\n",
        ),
        Hostile(
            "symlink-to-host-file",
            "files",
            f"os.symlink({c['secret_file']!r}, 'link')\n"
            "attempt('read via symlink', lambda: open('link').read())\n"
            "attempt('write via symlink', lambda: open('link', 'a').write('x'))\n"
            f"attempt('hard link', lambda: os.link({c['secret_file']!r}, 'hard'))\n",
        ),
        Hostile(
            "symlink-race-on-cleanup",
            "files",
            "for name in os.listdir('.'):\n    os.rename(name, name + '.moved')\n"
            f"os.symlink({str(Path(c['secret_file']).parent)!r}, 'main.py')\n"
            f"os.symlink({c['secret_file']!r}, 'victim')\n",
        ),
        Hostile(
            "device-files",
            "devices",
            "for p in ('/dev/mem', '/dev/kmem', '/dev/port', '/dev/kmsg', '/dev/sda', "
            "'/dev/vda', '/dev/nvme0n1', '/dev/kvm', '/dev/fuse'):\n"
            "    attempt('opened ' + p, lambda: os.close(os.open(p, os.O_RDWR)))\n"
            "attempt('mknod', lambda: os.mknod('mem', 0o600 | 0o20000, os.makedev(1, 1)))\n",
        ),
        Hostile(
            "file-size-bomb",
            "files",
            "with open('big', 'wb') as fh:\n    for _ in range(128):\n"
            "        fh.write(b'\\x01' * (1 << 20))\nesc('128 MiB file')\n",
            FAILS,
        ),
        Hostile(
            "disk-fill-many-files",
            "files",
            "i = 0\ntry:\n    while i < 512:\n"
            "        open(f'f{i}', 'wb').write(b'\\x01' * 65536); i += 1\n"
            "except OSError:\n    pass\nif i * 64 > 16 * 1024: esc(f'{i} files')\n",
        ),
        Hostile(
            "fd-exhaustion",
            "files",
            "fds = []\ntry:\n    while True:\n        fds.append(os.open('/dev/null', os.O_RDONLY))\n"
            "except OSError:\n    pass\nprint('fds', len(fds))\nif len(fds) > 64: esc('fds')\n",
        ),
        Hostile(
            "huge-stdout",
            "output",
            "chunk = 'x' * (1 << 20)\nfor _ in range(512):\n    sys.stdout.write(chunk)\n",
            {"output_limit", "killed", "failed", "error"},
        ),
        Hostile(
            "huge-stderr",
            "output",
            "chunk = 'x' * (1 << 20)\nfor _ in range(64):\n    sys.stderr.write(chunk)\n",
            ANY,
        ),
        # -- time ---------------------------------------------------------------------------
        Hostile("sleep-past-the-limit", "time", "time.sleep(60)\n", {"timeout"}, QUICK),
        Hostile("busy-loop", "time", "while True:\n    pass\n", {"timeout"}, QUICK),
        Hostile(
            "ignore-signals-and-spin",
            "time",
            "for s in (signal.SIGTERM, signal.SIGXCPU, signal.SIGINT, signal.SIGHUP):\n"
            "    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    pass\n",
            {"timeout", "killed"},
            QUICK,
        ),
        # -- kernel -------------------------------------------------------------------------
        Hostile(
            "new-namespaces-and-mounts",
            "kernel",
            "if libc.unshare(0x10000000) == 0: esc('unshare user')\n"
            "if libc.mount(b'none', b'/tmp', b'tmpfs', 0, None) == 0: esc('mount')\n"
            "if libc.chroot(b'/tmp') == 0: esc('chroot')\n",
        ),
        Hostile(
            "kernel-objects",
            "kernel",
            "libc.syscall.restype = ctypes.c_long\n"
            "p = ctypes.create_string_buffer(120)\n"
            "if libc.syscall(425, 8, p) >= 0: esc('io_uring')\n"
            "if libc.syscall(321, 0, p, 48) >= 0: esc('bpf')\n"
            "if libc.syscall(248, b'user', b'k', b'v', 1, -3) >= 0: esc('add_key')\n",
        ),
    ]


# -- the host side ------------------------------------------------------------------------


class Listeners:
    """Sockets on the host that no sandboxed program should reach."""

    def __init__(self, run_dir: Path, else_dir: Path) -> None:
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.paths = {
            "unix_run": str(run_dir / "stream.sock"),
            "unix_dgram": str(run_dir / "dgram.sock"),
            "unix_else": str(else_dir / "stream.sock"),
        }
        self.unix = []
        for key in ("unix_run", "unix_else"):
            s = socket.socket(socket.AF_UNIX)
            s.bind(self.paths[key])
            s.listen(16)
            self.unix.append(s)
        self.dgram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.dgram.bind(self.paths["unix_dgram"])
        self.abstract_name = "\0" + TAG + "-" + uuid.uuid4().hex[:6]
        self.abstract = socket.socket(socket.AF_UNIX)
        self.abstract.bind(self.abstract_name)
        self.abstract.listen(16)
        for path in self.paths.values():
            os.chmod(path, 0o777)
        for sock in self.all():
            sock.setblocking(False)

    def all(self) -> list[socket.socket]:
        return [self.tcp, self.udp, *self.unix, self.dgram, self.abstract]

    def received(self) -> list[str]:
        """What reached any listener (names of the programs that sent)."""
        got: list[str] = []
        for sock in (self.tcp, *self.unix, self.abstract):
            while True:
                try:
                    conn, _ = sock.accept()
                except BlockingIOError:
                    break
                conn.settimeout(1)
                with contextlib.suppress(OSError):
                    got.append("connect:" + conn.recv(256).decode(errors="replace"))
                conn.close()
        for sock in (self.udp, self.dgram):
            while True:
                try:
                    got.append("datagram:" + sock.recv(256).decode(errors="replace"))
                except BlockingIOError:
                    break
        return got

    def close(self) -> None:
        for sock in self.all():
            sock.close()


def host_pids_with(tag: str) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            with contextlib.suppress(OSError):
                if tag.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    out.append(int(entry))
    return out


def uid_pids(lo: int, hi: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, KeyError):
            status = Path(f"/proc/{entry}/status").read_text()
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            if lo <= int(fields["Uid"].split()[0]) <= hi:
                out.append(int(entry))
    return out


def wait_gone(tag: str, timeout_s: float = 5.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := host_pids_with(tag)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


@dataclass
class Batch:
    results: dict[str, dict]
    received: list[str]
    leftover: list[int]
    sandbox_leftover: list[int]
    canaries: list[str]
    secret_intact: bool
    service_alive: bool
    sentinel_alive: bool
    isolation: dict
    suite: list[Hostile]


def held_mb(result: dict) -> int:
    held = [int(line.split()[1]) for line in result["stdout"].splitlines() if line[:5] == "HELD "]
    return max(held, default=0)


def run_batch(mode: str) -> Batch:
    """Start an executor in ``mode``, run the whole suite against it, inspect the host."""
    # Host sockets under /run and next to this file (a place no sandbox hides).
    run_dir = Path("/run") / f"{TAG}-{mode}"
    else_dir = HERE / f".{TAG}-{mode}"
    try:
        run_dir.mkdir(mode=0o755)
        else_dir.mkdir(mode=0o755)
        return _run_batch(mode, run_dir, else_dir)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
        shutil.rmtree(else_dir, ignore_errors=True)


def _run_batch(mode: str, run_dir: Path, else_dir: Path) -> Batch:
    secret_file = else_dir / "secret.txt"
    secret_file.write_text(SECRET)
    os.chmod(secret_file, 0o644)
    listeners = Listeners(run_dir, else_dir)
    targets = [
        f"/tmp/{TAG}-{mode}",
        f"/var/tmp/{TAG}-{mode}",
        f"/dev/shm/{TAG}-{mode}",
        f"/dev/shm/{TAG}-{mode}-shm",
        f"/{TAG}-{mode}",
        str(run_dir / "written"),
        str(else_dir / "written"),
    ]
    wrapper: list[str] = []
    service_python = None
    env = dict(os.environ, RLC_TEST_SECRET=SECRET)
    sentinel_uid = None
    if mode in ("namespaces", "userns"):
        settings = ExecutorSettings(workers=WORKERS, isolation=mode)
    elif mode == "unprivileged":
        wrapper = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
        settings = ExecutorSettings(workers=WORKERS, isolation="userns")
    elif mode == "none":
        wrapper = ["setpriv", f"--reuid={NONE_UID}", f"--regid={NONE_UID}", "--clear-groups"]
        settings = ExecutorSettings(workers=WORKERS, isolation="none", allow_unsandboxed=True)
        sentinel_uid = NONE_UID
    if wrapper:
        import aiohttp

        service_python = SYSTEM_PYTHON
        env["PYTHONPATH"] = str(Path(aiohttp.__file__).resolve().parents[1])
        for d in (run_dir, else_dir):
            os.chmod(d, 0o777)
    sentinel = subprocess.Popen(
        [*(wrapper if sentinel_uid else []), "sleep", "300"], start_new_session=True
    )
    ex = None
    try:
        ex = LocalExecutor(settings, env=env, service_python=service_python, wrapper=wrapper)
        ctx = {
            "tcp_port": listeners.tcp.getsockname()[1],
            "udp_port": listeners.udp.getsockname()[1],
            "unix_var_run": listeners.paths["unix_run"].replace("/run/", "/var/run/", 1),
            "unix_abstract": listeners.abstract_name,
            "service_pid": ex.proc.pid,
            "sentinel_pid": sentinel.pid,
            "secret_file": str(secret_file),
            "write_targets": [t for t in targets if not t.endswith("-shm")],
            "shm_file": f"/dev/shm/{TAG}-{mode}-shm",
            **listeners.paths,
        }
        suite = [p for p in programs(ctx) if mode != "none" or p.none_safe]
        # Unsandboxed, max_processes counts every process of the service's uid: give the
        # runs room, so the suite shows what a process can do rather than a failed fork.
        extra = {"max_processes": 64} if mode == "none" else {}
        with httpx.Client(timeout=120, trust_env=False) as http:

            def one(p: Hostile) -> tuple[str, dict]:
                body = {
                    "code": PRE + p.code,
                    "mode": "stdio",
                    "tests": [{"input": "", "output": ""}],
                    "limits": {**LIMITS, **p.limits, **extra},
                }
                resp = http.post(ex.url + "/run", json=body)
                assert resp.status_code == 200, (p.name, resp.text)
                return p.name, resp.json()["results"][0]

            with ThreadPoolExecutor(WORKERS + 2) as pool:
                results = dict(pool.map(one, suite))
            health = http.get(ex.url + "/health").json()
            uid_range = health.get("uid_range")
        leftover = wait_gone(TAG)
        sandbox_leftover = uid_pids(*uid_range) if uid_range else []
        service_alive = ex.proc.poll() is None
        sentinel_alive = sentinel.poll() is None
        return Batch(
            results,
            listeners.received(),
            leftover,
            sandbox_leftover,
            [t for t in targets if os.path.lexists(t)],
            secret_file.read_text() == SECRET,
            service_alive,
            sentinel_alive,
            health["isolation"],
            suite,
        )
    finally:
        if ex is not None:
            ex.close()
        sentinel.kill()
        sentinel.wait()
        for pid in host_pids_with(TAG):
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
        listeners.close()
        for t in targets:
            with contextlib.suppress(OSError):
                os.unlink(t)


SANDBOXED = ["namespaces", "userns", "unprivileged"]


def _unshare_works(flags: int, as_nobody: bool = False) -> bool:
    """Whether the kernel lets a (root or uid 65534) process create these namespaces."""
    code = (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        f"os._exit(0 if libc.unshare({flags}) == 0 else 1)\n"
    )
    wrapper = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
    python = SYSTEM_PYTHON if as_nobody else sys.executable
    argv = [*(wrapper if as_nobody else []), python, "-I", "-S", "-c", code]
    return subprocess.run(argv, capture_output=True, timeout=60).returncode == 0


def _skip_reason(mode: str) -> str:
    """Why this host cannot show ``mode`` (an absent primitive), or ''."""
    if mode in ("namespaces", "unprivileged", "none") and not ROOT:
        return f"{mode}: needs root (CAP_SYS_ADMIN, or setpriv to another uid)"
    if mode in ("unprivileged", "none") and not (HAS_SETPRIV and os.access(SYSTEM_PYTHON, os.X_OK)):
        return f"{mode}: needs setpriv and {SYSTEM_PYTHON}"
    if mode == "namespaces" and not _unshare_works(0x20000000 | 0x40000000 | 0x00020000):
        return "namespaces: unshare of mount, PID and network namespaces is refused here"
    if mode in ("userns", "unprivileged") and not _unshare_works(
        0x10000000, as_nobody=mode == "unprivileged"
    ):
        return f"{mode}: user namespaces are disabled on this host"
    return ""


_BATCHES: dict[str, Batch] = {}


@pytest.fixture(scope="module", params=SANDBOXED)
def batch(request) -> Batch:
    mode = request.param
    if reason := _skip_reason(mode):
        pytest.skip(reason)
    if mode not in _BATCHES:
        _BATCHES[mode] = run_batch(mode)
    return _BATCHES[mode]


def test_the_suite_is_large_enough():
    names = [p.name for p in programs(_dummy_ctx())]
    assert len(names) >= 40 and len(set(names)) == len(names)


def _dummy_ctx() -> dict[str, object]:
    keys = ("tcp_port", "udp_port", "service_pid", "sentinel_pid")
    ctx: dict[str, object] = dict.fromkeys(keys, 1)
    ctx.update(
        {k: "/x" for k in ("unix_run", "unix_dgram", "unix_else", "unix_var_run", "secret_file")}
    )
    ctx.update(unix_abstract="\0x", write_targets=["/x"], shm_file="/x")
    return ctx


def verdict(result: dict) -> str:
    """The run's status; a program that exited 0 counts as ``ok`` (its expected output is
    empty: what it prints is what the test reads)."""
    if result["status"] == "failed" and result["detail"].startswith("output differs"):
        return "ok"
    return result["status"]


def test_every_program_gets_its_expected_verdict(batch: Batch):
    wrong = {
        p.name: (batch.results[p.name]["status"], batch.results[p.name]["detail"])
        for p in batch.suite
        if verdict(batch.results[p.name]) not in p.expect
    }
    assert not wrong, wrong


def test_no_program_escapes(batch: Batch):
    escaped = {
        name: [line for line in r["stdout"].splitlines() if line.startswith("ESCAPED")]
        for name, r in batch.results.items()
        if "ESCAPED" in r["stdout"]
    }
    assert not escaped, escaped


def test_unix_sockets_on_the_host_receive_nothing(batch: Batch):
    """A socket under /run, one elsewhere, and an abstract one: none hears a program."""
    assert batch.received == []


def test_memory_of_the_whole_process_tree_is_bounded(batch: Batch):
    """Children, threads, memfd, tmpfs and shared memory all count toward one budget."""
    over = {
        name: held_mb(r)
        for name, r in batch.results.items()
        if name.startswith("memory-") and held_mb(r) > MEMORY_MB
    }
    assert not over, f"held more than {MEMORY_MB} MiB: {over}"


def test_the_host_is_unaffected(batch: Batch):
    assert batch.canaries == [] and batch.secret_intact
    assert batch.leftover == [] and batch.sandbox_leftover == []
    assert batch.service_alive and batch.sentinel_alive


# -- the opt-in unsandboxed mode ----------------------------------------------------------


def test_unsandboxed_warning_names_exactly_what_gets_through():
    """Every kind of escape that works without a sandbox is named by the warning, and the
    warning names nothing that the suite did not get through."""
    if reason := _skip_reason("none"):
        pytest.skip(reason)
    batch = run_batch("none")
    through: set[str] = set()
    for p in batch.suite:
        r = batch.results[p.name]
        if "ESCAPED" in r["stdout"] or verdict(r) not in p.expect:
            through.add(p.kind)
        if p.kind == "memory" and held_mb(r) > MEMORY_MB:
            through.add(p.kind)
    if batch.received:
        through.add("network")
    if batch.canaries or not batch.secret_intact:
        through.add("files")
    if batch.leftover:
        through.add("outliving the run")
    if not batch.sentinel_alive:
        through.add("other processes")
    named = set(sb.UNSANDBOXED_GAPS)
    assert through == named, (sorted(through), sorted(named))
    warning = batch.isolation["warning"]
    for kind, what in sb.UNSANDBOXED_GAPS.items():
        assert what in warning, kind


# -- how each mode bounds memory ----------------------------------------------------------


def test_each_mode_says_how_the_whole_run_is_bounded(batch: Batch):
    """A run's memory is bounded by a cgroup, or by shares of the budget; /health says which,
    and why there is no cgroup when there is none."""
    iso = batch.isolation
    assert iso["memory"].startswith("whole run bounded by"), iso
    if iso["cgroup"]:
        assert iso["memory"].endswith(iso["cgroup"])
    else:
        assert "per-process shares" in iso["memory"] and iso["cgroup_note"], iso


def test_a_root_service_uses_a_cgroup_where_the_host_has_one(batch: Batch):
    if not batch.isolation["drop_uid"]:
        pytest.skip("this service runs as an unprivileged uid (its fallback is checked above)")
    from runtime.executor import cgroups

    base, why = cgroups.probe(f"rlc-executor-probe-{os.getpid()}")
    if base is None:
        pytest.skip(f"this host has no writable cgroup with memory and pids: {why}")
    cgroups.remove_base(base)
    assert batch.isolation["cgroup"] == base.describe()


@pytest.mark.parametrize(
    ("memory_mb", "disk_mb", "max_processes"),
    [(128, 64, 16), (320, 16, 8), (1024, 64, 16), (64, 1024, 1), (8192, 1024, 256)],
)
def test_per_process_shares_add_up_to_the_budget(memory_mb, disk_mb, max_processes):
    limits = sb.Limits(memory_mb=memory_mb, disk_mb=disk_mb, max_processes=max_processes)
    plan = sb.memory_plan(limits, counted=False)
    assert plan.tmpfs_mb <= disk_mb and plan.tmpfs_mb <= max(1, memory_mb // 4)
    assert plan.address_space_mb * max_processes + plan.tmpfs_mb <= memory_mb
    counted = sb.memory_plan(limits, counted=True)
    assert counted == sb.MemoryPlan(memory_mb, disk_mb)


def test_the_fallback_filter_denies_memfd_and_unix_sockets():
    """Where no cgroup counts memfd pages, memfd_create is denied; AF_UNIX sockets never."""
    code = (
        "import ctypes, os, socket\n"
        "for fn in (lambda: os.memfd_create('x'), lambda: socket.socket(socket.AF_UNIX),\n"
        "           lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)):\n"
        "    try:\n        fn()\n        print('allowed')\n"
        "    except OSError:\n        print('denied')\n"
        "socket.socketpair()\nprint('pair')\n"
    )
    out = {}
    for memfd in (False, True):
        bpf = sb.build_seccomp(False, memfd=memfd)
        prog = (
            "import ctypes, sys\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "class P(ctypes.Structure):\n"
            "    _fields_ = [('len', ctypes.c_ushort), ('f', ctypes.c_void_p)]\n"
            f"b = ctypes.create_string_buffer({bpf!r}, {len(bpf)})\n"
            f"p = P({len(bpf) // 8}, ctypes.cast(b, ctypes.c_void_p))\n"
            "assert libc.prctl(38, 1, 0, 0, 0) == 0\n"
            "assert libc.prctl(22, 2, ctypes.byref(p), 0, 0) == 0\n" + code
        )
        res = subprocess.run(
            [sys.executable, "-I", "-S", "-c", prog], capture_output=True, text=True, timeout=60
        )
        assert res.returncode == 0, res.stderr
        out[memfd] = res.stdout.split()
    assert out[False] == ["denied", "denied", "denied", "pair"]
    assert out[True] == ["allowed", "denied", "denied", "pair"]
