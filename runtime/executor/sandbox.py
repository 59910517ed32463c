"""Run one untrusted Python program in a sandbox and report what happened.

Every run starts `init` (``runtime/executor/init.py``), which builds the sandbox and makes the
program PID 1 of its own PID namespace. `probe_isolation` picks the strongest layer the host
allows, once, by running a real sandboxed program, and ``GET /health`` reports it:

* ``namespaces`` (root with CAP_SYS_ADMIN): mount, network, PID, IPC and UTS namespaces,
  a read-only mount tree whose only writable place is the size-capped tmpfs working
  directory, a private ``/proc``, and a throw-away uid per worker slot (no groups); every
  process of that uid, zombies included, is gone before the slot is used again.
* ``userns`` (no privilege needed): the same namespaces inside a new user namespace that maps
  only the service's own uid (as root: the slot's throw-away uid, swept like above);
  processes are bounded by RLIMIT_NPROC, which the kernel counts per user namespace, and
  the PID namespace, with all it holds, dies with its first process.
* In both: Landlock (reads only in system directories, writes only in the working directory,
  no TCP, no signals or abstract sockets out of the domain) where the kernel has it, a
  seccomp filter compiled with libseccomp (no ptrace, mount, new namespaces, bpf, keyrings,
  io_uring, System V IPC memory, ...; no ``AF_UNIX`` socket ever, so no host socket is
  reachable; no other socket unless network is allowed), ``no_new_privs``; and a cgroup per
  run (`runtime.executor.cgroups`) bounding the memory and tasks of its whole process tree,
  tmpfs and memfd pages included, where the host has one; else the budget is split into
  per-process shares and memfd is denied (`memory_plan`).
* ``none``: only rlimits. Used only when the service is started with an explicit opt-in
  (``--allow-unsandboxed``); it says so loudly at start-up, in ``/health`` and in every
  answer. Without the opt-in a host with no layer refuses to start the executor.

Always: rlimits (CPU, address space, processes, file size, open files, no core dumps), a
scrubbed environment, a wall-clock timeout that kills the whole run, and capped output.
Verdicts are never taken from the program: stdio output is compared by the service and
function tests are judged by a separate process (`judge`) on values rebuilt from plain data.
The judge runs the request's test code, so it gets a sandbox of its own (second uid of the
slot, no network); the two talk only through a pair of pipes.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from runtime.executor import cgroups
from runtime.executor.cgroups import CgroupBase, RunGroup
from runtime.executor.settings import ExecutorSettings

_HERE = Path(__file__).resolve().parent
INIT_SOURCE = (_HERE / "init.py").read_text(encoding="utf-8")
_VALUES_SOURCE = (_HERE / "values.py").read_text(encoding="utf-8")
HARNESS_SOURCE = _VALUES_SOURCE + "\n" + (_HERE / "harness.py").read_text(encoding="utf-8")
JUDGE_SOURCE = _VALUES_SOURCE + "\n" + (_HERE / "judge.py").read_text(encoding="utf-8")

PR_SET_PDEATHSIG = 1
SYS_LANDLOCK_CREATE_RULESET = 444
SANDBOX_WORK = "/tmp/work"
SANDBOX_PYTHON = "/tmp/.rlc-python"
# Throw-away uids: far above any real account, distinct per executor process and slot.
UID_BASE = 1_500_000_000
MAX_SLOTS = 256
KINDS = ("namespaces", "userns", "none")
SETUP_FAILED = "rlc-sandbox: set-up failed"
# What the opt-in ``none`` mode does not protect, by kind; the hostile-program suite checks
# that exactly these get through without a sandbox. It keeps only: the wall-clock kill,
# the stdout cap, RLIMIT_CPU, RLIMIT_FSIZE and RLIMIT_NOFILE per process, the scrubbed
# environment and the file permissions of the service's uid.
UNSANDBOXED_GAPS = {
    "files": "every file the service's uid may read or write (its secrets, the repository,"
    " /tmp), with no disk cap",
    "network": "the host's network (loopback services included)",
    "unix sockets": "the host's UNIX sockets, named and abstract",
    "other processes": "the service's and the judge's processes: their /proc (environment,"
    " command line, open pipes, so they can forge a passing verdict), ptrace and signals",
    "memory": "memory is bounded per process only (children, memfd and shared memory add up)",
    "processes": "max_processes counts every process of the service's uid, not the run's",
    "outliving the run": "a process that leaves the session outlives the run",
    "kernel": "every kernel call (new namespaces, chroot, io_uring, keyrings, ...)",
}
UNSANDBOXED_WARNING = (
    "WARNING: the code executor runs UNSANDBOXED (no namespaces, Landlock or seccomp on this "
    "host, explicitly allowed); it does not protect: "
    + "; ".join(f"{kind}: {what}" for kind, what in UNSANDBOXED_GAPS.items())
)

STATUSES = ("ok", "failed", "timeout", "memory", "error", "output_limit", "killed")


class SandboxUnavailable(RuntimeError):
    """No isolation layer works on this host and running unsandboxed was not allowed."""


_SPEC = ExecutorSettings()


@dataclass(frozen=True)
class Limits:
    """Per-run resource limits (a request may lower or raise them up to `MAX_LIMITS`)."""

    # a request that names none gets the code executor settings' (the spec's) limits
    wall_s: float = _SPEC.time_limit_s
    cpu_s: float = _SPEC.time_limit_s
    memory_mb: int = _SPEC.memory_limit_mb
    max_processes: int = _SPEC.max_processes
    output_bytes: int = 65536
    file_bytes: int = 16 * 1024 * 1024
    open_files: int = 64
    disk_mb: int = 64

    @classmethod
    def from_request(cls, raw: Any, ceiling: Limits | None = None) -> Limits:
        """Parse a request's ``limits`` object, clamped to ``ceiling``; raises ValueError."""
        base = cls()
        ceiling = ceiling or MAX_LIMITS
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise ValueError("limits must be an object")
        values: dict[str, Any] = {}
        for name, default in asdict(base).items():
            value = raw.get(name, default)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ValueError(f"limits.{name} must be a positive number")
            cap = getattr(ceiling, name)
            values[name] = type(default)(min(value, cap))
        unknown = sorted(set(raw) - set(values))
        if unknown:
            raise ValueError(f"unknown limits: {', '.join(unknown)}")
        return cls(**values)


MAX_LIMITS = Limits(
    wall_s=120.0,
    cpu_s=120.0,
    memory_mb=8192,
    max_processes=256,
    output_bytes=4 * 1024 * 1024,
    file_bytes=256 * 1024 * 1024,
    open_files=1024,
    disk_mb=1024,
)


@dataclass(frozen=True)
class Isolation:
    """What this host lets the executor enforce (reported by ``GET /health``)."""

    kind: str
    drop_uid: bool
    landlock_abi: int
    seccomp: bool
    python: str
    python_prefix: str
    reason: str = ""
    site: bool = False
    allow_network: bool = False
    cgroup: str = ""  # "cgroup v2" / "cgroup v1": the run's whole tree is bounded by it
    cgroup_note: str = ""  # why there is none

    @property
    def namespaces(self) -> bool:
        return self.kind in ("namespaces", "userns")

    def describe(self) -> dict[str, Any]:
        sandboxed = self.namespaces
        return {
            "kind": self.kind,
            "network": "netns" if sandboxed else "host",
            "filesystem": (
                "read-only root, private tmpfs work dir"
                + (", landlock" if self.landlock_abi else "")
                if sandboxed
                else "unrestricted"
            ),
            "proc": "private" if sandboxed else "host",
            "processes": (
                ("per-slot-uid" if self.drop_uid else "per-userns") + " RLIMIT_NPROC, pid namespace"
                if sandboxed
                else "RLIMIT_NPROC of the service's uid"
            ),
            "memory": (
                f"whole run bounded by {self.cgroup}"
                if sandboxed and self.cgroup
                else "whole run bounded by per-process shares of the budget, memfd denied"
                if sandboxed
                else "per process only"
            ),
            "cgroup": self.cgroup,
            "cgroup_note": self.cgroup_note,
            "namespaces": sandboxed,
            "drop_uid": self.drop_uid,
            "landlock_abi": self.landlock_abi,
            "seccomp": self.seccomp,
            "allow_network": self.allow_network,
            "python": self.python,
            "site_packages": self.site,
            "warning": "" if sandboxed else UNSANDBOXED_WARNING,
            "note": self.reason,
        }


@dataclass
class RunOutcome:
    """What one sandboxed run did."""

    status: str
    exit_code: int | None
    stdout: str
    stderr: str
    wall_s: float
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JudgeSpec:
    """A function test: the trusted prompt context, the test code and the entry point."""

    test: str
    entry_point: str
    context: str = ""


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: none)."""
    rc = int(_libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), 1))
    return max(rc, 0)


def _python_prefix(python: str) -> tuple[str, str]:
    """(real executable, base prefix) of ``python``."""
    out = subprocess.run(
        [
            python,
            "-I",
            "-c",
            "import os,sys;print(os.path.realpath(sys.executable));print(sys.base_prefix)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    exe, prefix = out.stdout.strip().splitlines()[-2:]
    return exe, prefix


# Denied to every sandboxed program (EPERM): debugging other processes, changing mounts or
# namespaces, kernel objects that have been the way out of sandboxes before.
DENIED_SYSCALLS = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "mount_setattr",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsmount",
    "fsconfig",
    "fspick",
    "bpf",
    "keyctl",
    "add_key",
    "request_key",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "open_by_handle_at",
    "name_to_handle_at",
    "fanotify_init",
    "quotactl",
    "swapon",
    "swapoff",
    "reboot",
    "acct",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "syslog",
    "personality",
)
NAMESPACE_FLAGS = (
    0x00020000,
    0x02000000,
    0x04000000,
    0x08000000,
    0x10000000,
    0x20000000,
    0x40000000,
)
AF_UNIX = 1
# socketpair types that stay connected to each other only (a datagram pair can still
# sendto or connect any named socket).
CONNECTED_SOCKET_TYPES = (1, 5)  # SOCK_STREAM, SOCK_SEQPACKET
# Kernel-held memory that no per-process limit counts: System V shared memory and message
# queues, POSIX message queues (and memfd where no cgroup counts it, see `build_seccomp`).
UNCOUNTED_MEMORY_SYSCALLS = ("shmget", "msgget", "mq_open")


def build_seccomp(network: bool, memfd: bool = True) -> bytes:
    """The BPF program for sandboxed processes, compiled by libseccomp (``pyseccomp``).

    No program may create an ``AF_UNIX`` socket (it could reach any named or abstract socket
    of the host, whatever the mount tree); a connected ``socketpair`` stays allowed.
    ``memfd``: whether ``memfd_create`` is allowed (only where a cgroup counts its pages)."""
    import errno

    import pyseccomp as sc  # type: ignore[import-untyped]

    filt = sc.SyscallFilter(defaction=sc.ALLOW)
    denied = (*DENIED_SYSCALLS, *UNCOUNTED_MEMORY_SYSCALLS, *(() if memfd else ("memfd_create",)))
    for name in denied:
        with contextlib.suppress(Exception):  # a call this architecture does not have
            filt.add_rule(sc.ERRNO(errno.EPERM), name)
    for flag in NAMESPACE_FLAGS:
        filt.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    # clone3 passes its flags in memory a filter cannot read: ENOSYS makes libc use clone.
    filt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    if network:
        filt.add_rule(sc.ERRNO(errno.EACCES), "socket", sc.Arg(0, sc.EQ, AF_UNIX))
    else:
        filt.add_rule(sc.ERRNO(errno.EACCES), "socket")
    filt.add_rule(sc.ERRNO(errno.EACCES), "socketpair", sc.Arg(0, sc.NE, AF_UNIX))
    for kind in range(16):
        if kind not in CONNECTED_SOCKET_TYPES:
            rule = sc.Arg(1, sc.MASKED_EQ, 0xF, kind)
            filt.add_rule(sc.ERRNO(errno.EACCES), "socketpair", rule)
    with tempfile.TemporaryFile() as fh:
        filt.export_bpf(fh)
        fh.seek(0)
        return fh.read()


def _seccomp_files(root: str, allow_network: bool, memfd: bool = False) -> dict[bool, str] | None:
    """Write the filters (without and, if allowed, with network) under ``root``."""
    try:
        out = {}
        for network in (False, True) if allow_network else (False,):
            path = os.path.join(root, f"seccomp-{'net' if network else 'nonet'}.bpf")
            Path(path).write_bytes(build_seccomp(network, memfd))
            out[network] = path
        return out
    except Exception:
        return None


def probe_isolation(
    python: str | None = None,
    mode: str = "auto",
    site: bool = False,
    allow_unsandboxed: bool = False,
    allow_network: bool = False,
) -> Isolation:
    """Pick the isolation: the first of ``namespaces`` (root), ``userns`` that runs a real
    program; ``none`` only when asked for or allowed. Raises `SandboxUnavailable`."""
    exe, prefix = _python_prefix(python or sys.executable)
    if not exe.startswith(prefix.rstrip("/") + "/"):
        prefix = str(Path(exe).parent.parent)
    is_root = os.geteuid() == 0
    abi = landlock_abi()
    if mode == "auto":
        candidates = ["namespaces", "userns"] if is_root else ["userns"]
    elif mode in KINDS:
        candidates = [mode]
    else:
        raise ValueError(f"unknown isolation {mode!r}; expected auto or one of {KINDS}")
    reasons = []
    with tempfile.TemporaryDirectory(prefix="rlc-probe-") as root:
        os.chmod(root, 0o711)
        filters = _seccomp_files(root, allow_network)
        if filters is None:
            reasons.append("seccomp unavailable (libseccomp / pyseccomp)")
        for kind in candidates:
            if kind == "none":
                break
            for layers in ((abi, filters), (0, None)):
                iso = Isolation(
                    kind=kind,
                    drop_uid=is_root,
                    landlock_abi=layers[0],
                    seccomp=layers[1] is not None,
                    python=exe,
                    python_prefix=prefix,
                    site=site,
                    allow_network=allow_network,
                )
                why = _probe_run(iso, root, layers[1])
                if not why:
                    if layers[0] != abi or (filters is not None and layers[1] is None):
                        reasons.append("Landlock/seccomp refused by the kernel")
                    return _with_reason(iso, "; ".join(reasons))
                reasons.append(f"{kind}: {why}")
    if mode == "none" or allow_unsandboxed:
        iso = Isolation("none", False, 0, False, exe, prefix, site=site, allow_network=True)
        return _with_reason(iso, "; ".join(reasons))
    raise SandboxUnavailable(
        "no sandbox layer works on this host ("
        + "; ".join(reasons)
        + "); refusing to run untrusted code. Start the executor with --allow-unsandboxed "
        "(rewards.code.allow_unsandboxed = true) only if the programs are trusted"
    )


def _with_reason(iso: Isolation, reason: str) -> Isolation:
    return Isolation(**{**asdict(iso), "reason": reason})


def _probe_run(iso: Isolation, root: str, filters: dict[bool, str] | None) -> str:
    """Run ``print(1)`` in the sandbox; '' when it worked, else why not."""
    workdir = tempfile.mkdtemp(prefix="probe-", dir=root)
    Path(workdir, "main.py").write_text("print(1)\n", encoding="utf-8")
    uid = UID_BASE + MAX_SLOTS - 1 if iso.drop_uid else None
    if uid is not None:
        os.chown(workdir, uid, uid)
    seccomp = filters[False] if filters else None
    argv = init_argv(iso, Limits(), workdir, uid, [*program_prefix(iso), "main.py"], seccomp)
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=sandbox_env(iso))
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    finally:
        if uid is not None:
            kill_uid(uid)
    if out.returncode == 0 and out.stdout.strip() == "1":
        return ""
    lines = (out.stderr.strip() or f"exit code {out.returncode}").splitlines()
    return lines[-1][:300]


def program_prefix(iso: Isolation) -> list[str]:
    """The interpreter command line inside the sandbox (``-I``; ``-S`` unless site)."""
    if iso.namespaces:
        exe = f"{SANDBOX_PYTHON}/{os.path.relpath(iso.python, iso.python_prefix)}"
    else:
        exe = iso.python
    return [exe, "-I", *([] if iso.site else ["-S"])]


def sandbox_env(iso: Isolation, workdir: str = SANDBOX_WORK) -> dict[str, str]:
    home = SANDBOX_WORK if iso.namespaces else workdir
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8"}


@dataclass(frozen=True)
class MemoryPlan:
    """How a run's memory budget is enforced: each process's address space and the size of
    the tmpfs working directory (whose pages are memory too)."""

    address_space_mb: int
    tmpfs_mb: int


def memory_plan(limits: Limits, counted: bool) -> MemoryPlan:
    """``counted``: a cgroup bounds the whole run (tmpfs and memfd pages included), so each
    process may use the whole budget. Otherwise the budget is split: the tmpfs gets at most a
    quarter of it, and each of the ``max_processes`` processes an equal share of the rest,
    so that together they can never hold more than ``memory_mb``."""
    if counted:
        return MemoryPlan(limits.memory_mb, limits.disk_mb)
    tmpfs = max(1, min(limits.disk_mb, limits.memory_mb // 4))
    share = (limits.memory_mb - tmpfs) // limits.max_processes
    return MemoryPlan(max(1, share), tmpfs)


def init_argv(
    iso: Isolation,
    limits: Limits,
    workdir: str,
    uid: int | None,
    program: list[str],
    seccomp: str | None,
    network: bool = False,
    pass_fds: tuple[int, ...] = (),
    counted: bool = False,
) -> list[str]:
    """The command that builds the sandbox in ``workdir`` and runs ``program`` in it;
    ``counted``: the run has a cgroup of its own (`memory_plan`)."""
    plan = memory_plan(limits, counted or not iso.namespaces)
    cfg = {
        "kind": iso.kind,
        "userns": iso.kind == "userns",
        "uid": uid,
        "network": network,
        "disk_mb": plan.tmpfs_mb,
        "address_space_mb": plan.address_space_mb,
        "limits": asdict(limits),
        "workdir": workdir,
        "prefix": iso.python_prefix,
        "landlock": iso.landlock_abi if iso.namespaces else 0,
        "seccomp": seccomp if iso.namespaces else None,
        "argv": program,
        "env": sandbox_env(iso, workdir),
        "pass_fds": list(pass_fds),
    }
    return [sys.executable, "-I", "-S", "-c", INIT_SOURCE, json.dumps(cfg)]


def _uid_processes(uid: int) -> list[int]:
    """Every process of ``uid``, zombies included (they still count for RLIMIT_NPROC)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as fh:
                for line in fh:
                    if line.startswith("Uid:"):
                        if uid in {int(x) for x in line.split()[1:]}:
                            pids.append(int(entry))
                        break
        except OSError:
            continue
    return pids


def kill_uid(uid: int, timeout_s: float = 10.0) -> bool:
    """SIGKILL every process of ``uid`` and wait until none is left, zombies included
    (they vanish once their PID namespace is gone); False if some remain."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pids = _uid_processes(uid)
        if not pids:
            return True
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)
    return not _uid_processes(uid)


def slot_uid_base(pid: int) -> int:
    """First throw-away uid of the executor process ``pid`` (slots add 0..workers-1)."""
    return UID_BASE + (pid % 10_000_000) * MAX_SLOTS


def _pdeathsig() -> None:
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _preexec(group: RunGroup | None) -> Any:
    """The child's set-up before ``execve``: die with the service, join the run's cgroup."""
    if group is None:
        return _pdeathsig

    def run() -> None:
        _pdeathsig()
        group.join()

    return run


class _ExitProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """Signals the main process's exit at once (``Process.wait`` also waits for the pipes,
    which an escaped descendant could hold open)."""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exited = asyncio.Event()

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()


async def _drain(stream: asyncio.StreamReader, cap: int, overflow: asyncio.Event | None) -> bytes:
    """Read to EOF keeping ``cap`` bytes (reading on past the cap so the pipe can close)."""
    buf = bytearray()
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            return bytes(buf)
        room = cap - len(buf)
        if room > 0:
            buf += chunk[:room]
        if len(chunk) > room and overflow is not None:
            overflow.set()


class Sandbox:
    """Creates working directories and runs programs in them, one slot per worker."""

    def __init__(
        self, iso: Isolation, workers: int, root: str | None = None, cgroup: bool = True
    ) -> None:
        """``cgroup``: bound each run's whole tree by a cgroup where this host allows one
        (`runtime.executor.cgroups`); else by per-process shares (`memory_plan`)."""
        # Each slot has two throw-away uids: the program's and its judge's.
        if not 1 <= workers <= MAX_SLOTS // 2:
            raise ValueError(f"workers must be in 1..{MAX_SLOTS // 2}")
        self.iso = iso
        self.workers = workers
        self.root = tempfile.mkdtemp(prefix="rlc-executor-", dir=root)
        os.chmod(self.root, 0o711)
        self._slots: asyncio.Queue[int] | None = None
        self.active = 0
        self.runs = 0
        self.quarantined: list[int] = []
        self.uid_base = slot_uid_base(os.getpid())
        self.cgroups: CgroupBase | None = None
        if iso.namespaces:
            note = "disabled"
            if cgroup:
                self.cgroups, note = cgroups.probe()
            self.iso = iso = replace(
                iso,
                cgroup=self.cgroups.describe() if self.cgroups else "",
                cgroup_note=note,
            )
        counted = self.cgroups is not None
        self._seccomp = (
            _seccomp_files(self.root, iso.allow_network, memfd=counted) if iso.seccomp else None
        )

    def _queue(self) -> asyncio.Queue[int]:
        if self._slots is None:
            self._slots = asyncio.Queue()
            for i in range(self.workers):
                self._slots.put_nowait(i)
        return self._slots

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        if self.cgroups is not None:
            cgroups.remove_base(self.cgroups)

    async def run(
        self,
        program: str,
        mode: str,
        limits: Limits,
        stdin: str | None = None,
        judge: JudgeSpec | None = None,
        network: bool = False,
    ) -> RunOutcome:
        """Run ``program`` once (stdio, or serving ``judge``'s calls); waits for a slot."""
        if network and not self.iso.allow_network:
            raise ValueError("this executor does not allow network access")
        slots = self._queue()
        if self.quarantined and slots.empty():
            await self._reclaim()
        slot = await slots.get()
        self.active += 1
        clean = True
        try:
            outcome, clean = await self._run_in_slot(
                slot, program, mode, limits, stdin, judge, network
            )
            return outcome
        finally:
            self.active -= 1
            self.runs += 1
            if clean:
                slots.put_nowait(slot)
            else:  # never reuse a slot whose uid still has processes
                self.quarantined.append(slot)

    async def _reclaim(self) -> None:
        """Give retired slots back once their uid has no process left."""
        for slot in list(self.quarantined):
            uids = (self.uid_base + slot, self.uid_base + self.workers + slot)
            if all([await asyncio.to_thread(kill_uid, u, 1.0) for u in uids]):
                self.quarantined.remove(slot)
                self._queue().put_nowait(slot)

    async def _run_in_slot(
        self,
        slot: int,
        program: str,
        mode: str,
        limits: Limits,
        stdin: str | None,
        judge: JudgeSpec | None,
        network: bool,
    ) -> tuple[RunOutcome, bool]:
        iso = self.iso
        uid = self.uid_base + slot if iso.drop_uid else None
        judge_uid = uid + self.workers if uid is not None and judge is not None else None
        uids = [u for u in (uid, judge_uid) if u is not None]
        workdir = tempfile.mkdtemp(prefix=f"run{slot}-", dir=self.root)
        groups: list[RunGroup] = []
        try:
            Path(workdir, "main.py").write_bytes(program.encode("utf-8", "replace"))
            if uid is not None:
                os.chown(workdir, uid, uid)
            os.chmod(workdir, 0o700)
            seccomp = self._seccomp.get(network) if self._seccomp else None
            group = self._group(f"run-{slot}-{self.runs}", limits)
            groups += [group] if group else []
            if judge is None:
                outcome = await self._run_stdio(
                    workdir, uid, limits, stdin, seccomp, network, group
                )
            else:
                judge_group = self._group(f"judge-{slot}-{self.runs}", _judge_limits(limits))
                groups += [judge_group] if judge_group else []
                outcome = await self._run_function(
                    workdir, uid, judge_uid, limits, judge, seccomp, network, group, judge_group
                )
            if group is not None and outcome.status != "ok" and group.oom_killed():
                detail = f"out of memory (limit {limits.memory_mb} MiB for the whole run)"
                outcome = replace(outcome, status="memory", detail=detail)
        except BaseException:
            for u in uids:
                await asyncio.to_thread(kill_uid, u)
            for g in groups:
                await asyncio.to_thread(g.remove)
            raise
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        clean = True
        for u in uids:
            clean = await asyncio.to_thread(kill_uid, u) and clean
        for g in groups:
            clean = await asyncio.to_thread(g.remove) and clean
        return outcome, clean

    def _group(self, name: str, limits: Limits) -> RunGroup | None:
        """The run's cgroup: memory for the whole tree, tasks for init, its parent and the
        program's ``max_processes`` (None where the host has no usable cgroup)."""
        if self.cgroups is None:
            return None
        return RunGroup.create(
            self.cgroups, name, limits.memory_mb * 1024 * 1024, limits.max_processes + 2
        )

    async def _start(
        self,
        argv: list[str],
        env: dict[str, str],
        stdin: bool,
        pass_fds: tuple[int, ...],
        preexec: Any,
    ) -> tuple[asyncio.subprocess.Process, _ExitProtocol, asyncio.SubprocessTransport]:
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.subprocess_exec(
            lambda: _ExitProtocol(limit=65536, loop=loop),
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            pass_fds=pass_fds,
            start_new_session=True,
            preexec_fn=preexec,
        )
        return asyncio.subprocess.Process(transport, protocol, loop), protocol, transport

    async def _run_stdio(
        self,
        workdir: str,
        uid: int | None,
        limits: Limits,
        stdin: str | None,
        seccomp: str | None,
        network: bool,
        group: RunGroup | None = None,
    ) -> RunOutcome:
        program = [*program_prefix(self.iso), "main.py"]
        counted = group is not None
        argv = init_argv(self.iso, limits, workdir, uid, program, seccomp, network, (), counted)
        start = time.monotonic()
        try:
            proc, protocol, transport = await self._start(
                argv, sandbox_env(self.iso, workdir), stdin is not None, (), _preexec(group)
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return RunOutcome("error", None, "", "", 0.0, detail=f"sandbox start failed: {exc}")
        run = _Watched(proc, protocol, transport, limits, stdin)
        timed_out = await run.wait(protocol.exited, limits.wall_s)
        out, err = await run.finish()
        return classify_stdio(
            proc.returncode,
            out,
            err,
            time.monotonic() - start,
            timed_out,
            run.overflow.is_set(),
            limits,
        )

    async def _run_function(
        self,
        workdir: str,
        uid: int | None,
        judge_uid: int | None,
        limits: Limits,
        judge: JudgeSpec,
        seccomp: str | None,
        network: bool,
        group: RunGroup | None = None,
        judge_group: RunGroup | None = None,
    ) -> RunOutcome:
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        status_r, status_w = os.pipe()
        # The judge runs the request's test code, so it is sandboxed too (its own namespaces
        # and throw-away uid, never network); the program cannot see or signal it.
        judge_dir = tempfile.mkdtemp(prefix="judge-", dir=self.root)
        Path(judge_dir, "context.py").write_text(judge.context, encoding="utf-8")
        Path(judge_dir, "test.py").write_text(judge.test, encoding="utf-8")
        if judge_uid is not None:
            os.chown(judge_dir, judge_uid, judge_uid)
        os.chmod(judge_dir, 0o700)
        program = [
            *program_prefix(self.iso),
            "-c",
            HARNESS_SOURCE,
            str(req_r),
            str(resp_w),
            judge.entry_point,
        ]
        argv = init_argv(
            self.iso, limits, workdir, uid, program, seccomp, network, (req_r, resp_w), bool(group)
        )
        judge_limits = _judge_limits(limits)
        judge_program = [
            *program_prefix(self.iso),
            "-c",
            JUDGE_SOURCE,
            str(req_w),
            str(resp_r),
            str(status_w),
            judge.entry_point,
        ]
        judge_seccomp = self._seccomp.get(False) if self._seccomp else None
        judge_argv = init_argv(
            self.iso,
            judge_limits,
            judge_dir,
            judge_uid,
            judge_program,
            judge_seccomp,
            False,
            (req_w, resp_r, status_w),
            judge_group is not None,
        )
        start = time.monotonic()
        run: _Watched | None = None
        judge_run: _Watched | None = None
        try:
            try:
                proc, protocol, transport = await self._start(
                    argv, sandbox_env(self.iso, workdir), False, (req_r, resp_w), _preexec(group)
                )
                run = _Watched(proc, protocol, transport, limits, None)
                os.close(req_r)
                os.close(resp_w)
                req_r = resp_w = -1
                jproc, jprotocol, jtransport = await self._start(
                    judge_argv,
                    sandbox_env(self.iso, judge_dir),
                    False,
                    (req_w, resp_r, status_w),
                    _preexec(judge_group),
                )
                judge_run = _Watched(jproc, jprotocol, jtransport, limits, None, hard=False)
            except (OSError, subprocess.SubprocessError) as exc:
                if run is not None:
                    await run.finish()
                return RunOutcome("error", None, "", "", 0.0, detail=f"sandbox start failed: {exc}")
            finally:
                for fd in (req_r, resp_w, req_w, resp_r, status_w):
                    if fd >= 0:
                        with contextlib.suppress(OSError):
                            os.close(fd)
            timed_out = await run.wait(jprotocol.exited, limits.wall_s)
            if not timed_out and not run.overflow.is_set():
                # Let a program that died on its own report how (CPU limit, memory).
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(protocol.exited.wait(), timeout=0.5)
            out, err = await run.finish()
            await judge_run.finish()
            verdict = _read_status(status_r)
        finally:
            os.close(status_r)
            shutil.rmtree(judge_dir, ignore_errors=True)
        return classify_function(
            verdict,
            proc.returncode,
            out,
            err,
            time.monotonic() - start,
            timed_out,
            run.overflow.is_set(),
            limits,
        )


def _judge_limits(limits: Limits) -> Limits:
    """The judge holds the tests' values: at least 1 GiB, CPU for the whole wall time, and
    few processes (test code needs none; where no cgroup bounds the judge, fewer processes
    leave each a larger share of the budget)."""
    return replace(
        limits,
        memory_mb=max(1024, limits.memory_mb),
        cpu_s=limits.wall_s + 1,
        max_processes=min(limits.max_processes, 4),
    )


class _Watched:
    """One started process: its output drained in the background, killed on `finish`."""

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        protocol: _ExitProtocol,
        transport: asyncio.SubprocessTransport,
        limits: Limits,
        stdin: str | None,
        hard: bool = True,
    ) -> None:
        self.proc, self.protocol, self.transport = proc, protocol, transport
        self.overflow = asyncio.Event()
        assert proc.stdout is not None and proc.stderr is not None
        stdout, stderr = proc.stdout, proc.stderr

        async def feed() -> None:
            if stdin is None or proc.stdin is None:
                return
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                proc.stdin.write(stdin.encode("utf-8"))
                await proc.stdin.drain()
                proc.stdin.close()

        async def collect() -> tuple[bytes, bytes]:
            _, out, err = await asyncio.gather(
                feed(),
                _drain(stdout, limits.output_bytes, self.overflow if hard else None),
                _drain(stderr, limits.output_bytes, None),
            )
            return out, err

        self.gather = asyncio.ensure_future(collect())

    async def wait(self, done: asyncio.Event, timeout_s: float) -> bool:
        """Wait for ``done``, an output overflow or the timeout; True on timeout."""
        waiter = asyncio.ensure_future(done.wait())
        overflow = asyncio.ensure_future(self.overflow.wait())
        try:
            finished, _ = await asyncio.wait(
                {waiter, overflow}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
        except asyncio.CancelledError:  # the client went away: do not leave the run behind
            await self.finish()
            raise
        finally:
            waiter.cancel()
            overflow.cancel()
        return not finished

    async def finish(self) -> tuple[bytes, bytes]:
        """Kill the process group (the PID namespace dies with it) and collect output."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        try:
            out, err = await asyncio.wait_for(asyncio.shield(self.gather), timeout=5.0)
        except TimeoutError:
            self.transport.close()
            self.gather.cancel()
            out, err = b"", b"<output not collected: a descendant kept the pipes open>"
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.proc.wait(), timeout=5.0)
        return out, err


def _read_status(fd: int) -> dict[str, Any]:
    try:
        os.set_blocking(fd, False)
        raw = os.read(fd, 65536).decode("utf-8", "replace")
        data = json.loads(raw.splitlines()[0]) if raw.strip() else {}
    except (BlockingIOError, OSError, ValueError):
        data = {}
    return data if isinstance(data, dict) else {}


def _signal_outcome(returncode: int, stderr: str, limits: Limits) -> tuple[str, str]:
    sig = -returncode
    if sig == signal.SIGXCPU:
        return "timeout", f"cpu time exceeded {limits.cpu_s}s"
    if sig == signal.SIGXFSZ:
        return "output_limit", f"file size exceeded {limits.file_bytes} bytes"
    if "MemoryError" in stderr:
        return "memory", f"out of memory (limit {limits.memory_mb} MiB)"
    name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
    return "killed", f"killed by {name}"


def _raised(stderr: str) -> str:
    """The exception name of a Python traceback's last line ('' when there is none)."""
    if "Traceback (most recent call last)" not in stderr:
        return ""
    last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    name = last.split(":", 1)[0].strip().rsplit(".", 1)[-1]
    return name if name.isidentifier() else ""


def _common(
    returncode: int | None, stderr: str, timed_out: bool, overflow: bool, limits: Limits
) -> tuple[str, str] | None:
    if overflow:
        return "output_limit", f"stdout exceeded {limits.output_bytes} bytes"
    if timed_out:
        return "timeout", f"wall time exceeded {limits.wall_s}s"
    if returncode == 125 and SETUP_FAILED in stderr:
        line = next(x for x in stderr.splitlines() if SETUP_FAILED in x)
        return "error", f"sandbox start failed: {line.split(':', 1)[-1].strip()}"
    return None


def classify_stdio(
    returncode: int | None,
    out: bytes,
    err: bytes,
    wall: float,
    timed_out: bool,
    overflow: bool,
    limits: Limits,
) -> RunOutcome:
    """A stdio run passes this stage only by exiting 0; the service then compares output."""
    stdout, stderr = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")

    def outcome(status: str, detail: str) -> RunOutcome:
        return RunOutcome(status, returncode, stdout, stderr, round(wall, 4), detail)

    common = _common(returncode, stderr, timed_out, overflow, limits)
    if common:
        return outcome(*common)
    if returncode is not None and returncode < 0:
        return outcome(*_signal_outcome(returncode, stderr, limits))
    if returncode == 0:
        return outcome("ok", "")
    name = _raised(stderr)
    if name == "MemoryError":
        return outcome("memory", f"out of memory (limit {limits.memory_mb} MiB)")
    if name:
        return outcome("error", f"raised {name}")
    return outcome("failed", f"exited with code {returncode}")


def classify_function(
    verdict: dict[str, Any],
    returncode: int | None,
    out: bytes,
    err: bytes,
    wall: float,
    timed_out: bool,
    overflow: bool,
    limits: Limits,
) -> RunOutcome:
    """The judge's verdict, explained with what the program did when it did not pass."""
    stdout, stderr = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    status, detail = str(verdict.get("status", "")), str(verdict.get("detail", ""))

    def outcome(status: str, detail: str) -> RunOutcome:
        return RunOutcome(status, returncode, stdout, stderr, round(wall, 4), detail)

    common = _common(returncode, stderr, timed_out, overflow, limits)
    if common:
        return outcome(*common)
    if status == "ok":
        return outcome("ok", "")
    if status == "assert":
        return outcome("failed", "assertion failed")
    if status == "exc":
        if detail == "MemoryError":
            return outcome("memory", f"out of memory (limit {limits.memory_mb} MiB)")
        return outcome("error", f"raised {detail}")
    if status == "bad":
        return outcome("failed", detail)
    if status == "test":
        return outcome("error", f"test error: {detail}")
    if status == "gone":
        if returncode is not None and returncode < 0:
            return outcome(*_signal_outcome(returncode, stderr, limits))
        tail = stderr.strip().splitlines()[-1] if stderr.strip() else ""
        if tail.startswith("program raised ") and tail.endswith(" before the tests ran"):
            name = tail[len("program raised ") : -len(" before the tests ran")]
            if name == "MemoryError":
                return outcome("memory", f"out of memory (limit {limits.memory_mb} MiB)")
            return outcome("error", f"raised {name}")
        if "MemoryError" in stderr:
            return outcome("memory", f"out of memory (limit {limits.memory_mb} MiB)")
        return outcome("failed", f"exited ({returncode}) before the tests finished")
    return outcome("error", "the judge did not report a verdict")
