"""Run one untrusted Python program under OS limits and report what happened.

Each run gets a fresh private working directory and a fresh ``python -I`` process in its own
session. What is enforced depends on what the host allows; `probe_isolation` finds out once
at start-up and `/health` reports it:

* ``namespaces`` (root or CAP_SYS_ADMIN): a new network namespace (only a downed loopback,
  so every connect fails) and a new mount namespace in which ``/tmp``, ``/var/tmp``,
  ``/dev/shm`` and ``/run/lock`` are empty read-only tmpfs mounts; the working directory is
  a private size-capped tmpfs at ``/tmp/work`` (``limits.disk_mb``; gone with the run) and
  the interpreter's prefix is bind-mounted read-only at ``/tmp/.rlc-python``.
* ``uid`` (root): the program runs as a throw-away uid (one per worker slot, no passwd
  entry, no groups, ``no_new_privs``), so it can write only its own directory, cannot read
  other users' files (``/root``, other processes' ``/proc/PID/environ``), RLIMIT_NPROC
  applies to it, and every process of that uid is killed after the run, including
  children that left the session.
* ``audit`` (fallback when namespaces are unavailable): an audit hook inside the harness
  refuses sockets, process creation, ctypes and writes outside the working directory.
  This is best effort: native code can bypass it.

Always: rlimits (CPU, address space, processes, file size, open files, no core dumps), a
scrubbed environment, a wall-clock timeout that kills the whole process group, and capped
stdout/stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import resource
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HARNESS_PATH = Path(__file__).with_name("harness.py")

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38

# World-writable places a dropped uid could still write; hidden behind read-only tmpfs.
WRITABLE_SYSTEM_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
SANDBOX_WORK = "/tmp/work"
SANDBOX_PYTHON = "/tmp/.rlc-python"
# Throw-away uids: far above any real account, distinct per executor process and slot.
UID_BASE = 1_500_000_000
MAX_SLOTS = 256

STATUSES = ("ok", "failed", "timeout", "memory", "error", "output_limit", "killed")


@dataclass(frozen=True)
class Limits:
    """Per-run resource limits (a request may lower or raise them up to `MAX_LIMITS`)."""

    wall_s: float = 10.0
    cpu_s: float = 10.0
    memory_mb: int = 1024
    max_processes: int = 32
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

    namespaces: bool
    drop_uid: bool
    audit_hook: bool
    python: str
    python_prefix: str
    reason: str = ""
    site: bool = False

    def describe(self) -> dict[str, Any]:
        return {
            "network": "netns" if self.namespaces else "audit-hook",
            "filesystem": (
                ("private-readonly-tmp+" if self.namespaces else "audit-hook+")
                + ("unprivileged-uid" if self.drop_uid else "same-uid")
            ),
            "processes": "per-slot-uid-sweep" if self.drop_uid else "process-group",
            "namespaces": self.namespaces,
            "drop_uid": self.drop_uid,
            "audit_hook": self.audit_hook,
            "python": self.python,
            "site_packages": self.site,
            "note": self.reason,
        }


@dataclass
class RunOutcome:
    """What one sandboxed process did."""

    status: str
    exit_code: int | None
    stdout: str
    stderr: str
    wall_s: float
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


_libc = ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    rc = _libc.mount(
        src.encode() if src else None,
        target.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    _check(rc, f"mount {target}")


def _other_can_execute(path: str) -> bool:
    """Whether a uid with no groups can reach and execute ``path`` (every parent o+x)."""
    p = Path(path)
    try:
        if not p.stat().st_mode & stat.S_IXOTH:
            return False
        return all(parent.stat().st_mode & stat.S_IXOTH for parent in p.parents)
    except OSError:
        return False


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


def probe_isolation(python: str | None = None, mode: str = "auto", site: bool = False) -> Isolation:
    """Decide the isolation mode: ``auto`` (best available), ``namespaces`` or ``audit``.

    ``site=False`` runs programs with ``-S`` (standard library only): faster start-up and
    no third-party ``.pth`` hooks inside the sandbox.
    """
    exe, prefix = _python_prefix(python or sys.executable)
    if not exe.startswith(prefix.rstrip("/") + "/"):
        prefix = str(Path(exe).parent.parent)
    is_root = os.geteuid() == 0
    namespaces = False
    reason = ""
    if mode in ("auto", "namespaces"):
        namespaces, reason = _probe_namespaces()
        if mode == "namespaces" and not namespaces:
            raise RuntimeError(f"namespaces requested but unavailable: {reason}")
    drop_uid = is_root and (namespaces or _other_can_execute(exe))
    if is_root and not drop_uid:
        reason += "; interpreter not reachable by an unprivileged uid, running as root"
    if not is_root:
        reason += "; not root: no uid drop, RLIMIT_NPROC counts this user's processes"
    return Isolation(
        namespaces=namespaces,
        drop_uid=drop_uid,
        audit_hook=not namespaces,
        python=exe,
        python_prefix=prefix,
        reason=reason.strip("; "),
        site=site,
    )


def _probe_namespaces() -> tuple[bool, str]:
    """Try unshare + the tmpfs mounts in a throw-away child."""

    def attempt() -> None:
        _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWNET), "unshare")
        _mount(None, "/", None, MS_REC | MS_PRIVATE, None)
        _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")

    try:
        subprocess.run(["true"], preexec_fn=attempt, check=True, timeout=30)
    except (subprocess.SubprocessError, OSError) as exc:
        return False, f"namespaces unavailable ({exc})"
    return True, ""


def _build_preexec(
    iso: Isolation, limits: Limits, workdir: str, uid: int | None, program: bytes
) -> Any:
    """The function the child runs between fork and exec (still privileged)."""
    prefix = iso.python_prefix

    def preexec() -> None:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if iso.namespaces:
            _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWNET), "unshare")
            _mount(None, "/", None, MS_REC | MS_PRIVATE, None)
            # Open the interpreter inside the new namespace, before /tmp is covered.
            py_fd = os.open(prefix, os.O_PATH | os.O_DIRECTORY)
            tmp_flags = MS_NOSUID | MS_NODEV
            _mount("tmpfs", "/tmp", "tmpfs", tmp_flags, "size=1m,mode=755")
            os.mkdir(SANDBOX_WORK, 0o755)
            os.mkdir(SANDBOX_PYTHON, 0o755)
            # The working directory is its own size-capped tmpfs: disk use is bounded and
            # everything written vanishes with the namespace.
            owner = f",uid={uid},gid={uid}" if uid is not None else ""
            work_opts = f"size={limits.disk_mb}m,nr_inodes=4096,mode=700{owner}"
            _mount("tmpfs", SANDBOX_WORK, "tmpfs", tmp_flags, work_opts)
            main_py = f"{SANDBOX_WORK}/main.py"
            with open(main_py, "wb") as fh:
                fh.write(program)
            if uid is not None:
                os.chown(main_py, uid, uid)
            _mount(f"/proc/self/fd/{py_fd}", SANDBOX_PYTHON, None, MS_BIND | MS_REC, None)
            _mount(
                None,
                SANDBOX_PYTHON,
                None,
                MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
                None,
            )
            _mount(None, "/tmp", None, MS_REMOUNT | MS_RDONLY | tmp_flags, "size=1m,mode=755")
            os.close(py_fd)
            for d in WRITABLE_SYSTEM_DIRS[1:]:
                if os.path.isdir(d) and not os.path.islink(d):
                    _mount("tmpfs", d, "tmpfs", MS_RDONLY | tmp_flags, "size=4k,mode=755")
            os.chdir(SANDBOX_WORK)
        else:
            os.chdir(workdir)
        cpu = max(1, int(limits.cpu_s + 0.999))
        mem = int(limits.memory_mb) * 1024 * 1024
        for res, value in (
            (resource.RLIMIT_CPU, (cpu, cpu + 1)),
            (resource.RLIMIT_AS, (mem, mem)),
            (resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes)),
            (resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files)),
            (resource.RLIMIT_CORE, (0, 0)),
        ):
            resource.setrlimit(res, value)
        if uid is not None:
            # Counted per real uid, so only meaningful once we switch to the slot's own uid.
            nproc = (limits.max_processes, limits.max_processes)
            resource.setrlimit(resource.RLIMIT_NPROC, nproc)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)

    return preexec


def _uid_processes(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as fh:
                zombie = False
                for line in fh:
                    if line.startswith("State:"):
                        zombie = line.split()[1] in ("Z", "X")
                    elif line.startswith("Uid:"):
                        if not zombie and uid in {int(x) for x in line.split()[1:]}:
                            pids.append(int(entry))
                        break
        except OSError:
            continue
    return pids


def kill_uid(uid: int, rounds: int = 200) -> int:
    """SIGKILL every process of ``uid`` until none is left; returns how many were killed."""
    killed = 0
    for _ in range(rounds):
        pids = _uid_processes(uid)
        if not pids:
            return killed
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        time.sleep(0.005)
    return killed


def slot_uid_base(pid: int) -> int:
    """First throw-away uid of the executor process ``pid`` (slots add 0..workers-1)."""
    return UID_BASE + (pid % 10_000_000) * MAX_SLOTS


class _ExitProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """Signals the main process's exit at once (``Process.wait`` also waits for the pipes,
    which an escaped descendant could hold open)."""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exited = asyncio.Event()

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()


class Sandbox:
    """Creates working directories and runs programs in them, one slot per worker."""

    def __init__(self, iso: Isolation, workers: int, root: str | None = None) -> None:
        if not 1 <= workers <= MAX_SLOTS:
            raise ValueError(f"workers must be in 1..{MAX_SLOTS}")
        self.iso = iso
        self.workers = workers
        self.root = tempfile.mkdtemp(prefix="rlc-executor-", dir=root)
        os.chmod(self.root, 0o711)
        self._slots: asyncio.Queue[int] | None = None
        self.active = 0
        self.runs = 0
        self._harness = HARNESS_PATH.read_text(encoding="utf-8")
        self.uid_base = slot_uid_base(os.getpid())

    def _queue(self) -> asyncio.Queue[int]:
        if self._slots is None:
            self._slots = asyncio.Queue()
            for i in range(self.workers):
                self._slots.put_nowait(i)
        return self._slots

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    async def run(
        self, program: str, mode: str, limits: Limits, stdin: str | None = None
    ) -> RunOutcome:
        """Run ``program`` (the whole source) once; waits for a free worker slot."""
        slots = self._queue()
        slot = await slots.get()
        self.active += 1
        try:
            return await self._run_in_slot(slot, program, mode, limits, stdin)
        finally:
            self.active -= 1
            self.runs += 1
            slots.put_nowait(slot)

    async def _run_in_slot(
        self, slot: int, program: str, mode: str, limits: Limits, stdin: str | None
    ) -> RunOutcome:
        iso = self.iso
        uid = self.uid_base + slot if iso.drop_uid else None
        workdir = tempfile.mkdtemp(prefix=f"run{slot}-", dir=self.root)
        nonce = secrets.token_hex(16)
        try:
            source = program.encode("utf-8", "replace")
            Path(workdir, "main.py").write_bytes(source)
            if uid is not None:
                os.chown(workdir, uid, uid)
            os.chmod(workdir, 0o700)
            if iso.namespaces:
                rel = os.path.relpath(iso.python, iso.python_prefix)
                exe = f"{SANDBOX_PYTHON}/{rel}"
                home = SANDBOX_WORK
            else:
                exe, home = iso.python, workdir
            env = {
                "PATH": "/usr/local/bin:/usr/bin:/bin",
                "HOME": home,
                "TMPDIR": home,
                "LANG": "C.UTF-8",
            }
            argv = [
                exe,
                "-I",
                *([] if iso.site else ["-S"]),
                "-c",
                self._harness,
                "STATUS_FD",
                nonce,
                mode,
                "1" if iso.audit_hook else "0",
            ]
            return await self._spawn(argv, env, workdir, uid, limits, stdin, nonce, source)
        except BaseException:
            # The normal path sweeps the uid in `_kill`; an interrupted run must too.
            if uid is not None:
                kill_uid(uid)
            raise
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    async def _spawn(
        self,
        argv: list[str],
        env: dict[str, str],
        workdir: str,
        uid: int | None,
        limits: Limits,
        stdin: str | None,
        nonce: str,
        source: bytes,
    ) -> RunOutcome:
        status_r, status_w = os.pipe()
        os.set_blocking(status_r, False)
        try:
            return await self._spawn_with_pipe(
                argv, env, workdir, uid, limits, stdin, nonce, source, status_r, status_w
            )
        finally:
            os.close(status_r)

    async def _spawn_with_pipe(
        self,
        argv: list[str],
        env: dict[str, str],
        workdir: str,
        uid: int | None,
        limits: Limits,
        stdin: str | None,
        nonce: str,
        source: bytes,
        status_r: int,
        status_w: int,
    ) -> RunOutcome:
        argv = [str(status_w) if a == "STATUS_FD" else a for a in argv]
        start = time.monotonic()
        loop = asyncio.get_running_loop()
        try:
            transport, protocol = await loop.subprocess_exec(
                lambda: _ExitProtocol(limit=65536, loop=loop),
                *argv,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
                pass_fds=(status_w,),
                start_new_session=True,
                preexec_fn=_build_preexec(self.iso, limits, workdir, uid, source),
            )
            proc = asyncio.subprocess.Process(transport, protocol, loop)
        except (OSError, subprocess.SubprocessError) as exc:
            os.close(status_w)
            return RunOutcome("error", None, "", "", 0.0, detail=f"sandbox start failed: {exc}")
        os.close(status_w)
        overflow = asyncio.Event()

        async def feed() -> None:
            if stdin is None or proc.stdin is None:
                return
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                proc.stdin.write(stdin.encode("utf-8"))
                await proc.stdin.drain()
                proc.stdin.close()

        async def drain(stream: asyncio.StreamReader, hard: bool) -> bytes:
            # Keep reading past the cap (discarding) so the pipe reaches EOF once killed.
            buf = bytearray()
            while True:
                chunk = await stream.read(65536)
                if not chunk:
                    return bytes(buf)
                room = limits.output_bytes - len(buf)
                if room > 0:
                    buf += chunk[:room]
                if len(chunk) > room and hard:
                    overflow.set()

        stdout, stderr = proc.stdout, proc.stderr
        assert stdout is not None and stderr is not None

        async def finish() -> tuple[bytes, bytes]:
            _, out, err = await asyncio.gather(feed(), drain(stdout, True), drain(stderr, False))
            return out, err

        gather = asyncio.ensure_future(finish())
        waiter = asyncio.ensure_future(protocol.exited.wait())
        overflow_wait = asyncio.ensure_future(overflow.wait())
        try:
            done, _ = await asyncio.wait(
                {waiter, overflow_wait}, timeout=limits.wall_s, return_when=asyncio.FIRST_COMPLETED
            )
        except asyncio.CancelledError:  # the client went away: do not leave the run behind
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            for task in (gather, waiter, overflow_wait):
                task.cancel()
            transport.close()
            raise
        timed_out = not done
        overflow_wait.cancel()
        await self._kill(proc.pid, uid)
        try:
            out, err = await asyncio.wait_for(asyncio.shield(gather), timeout=5.0)
        except TimeoutError:
            # A descendant outside our reach kept the pipes open: stop listening to it.
            transport.close()
            gather.cancel()
            out, err = b"", b"<output not collected: a descendant kept the pipes open>"
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), timeout=5.0)
        wall = time.monotonic() - start
        try:
            marker = os.read(status_r, 4096).decode("utf-8", "replace")
        except (BlockingIOError, OSError):
            marker = ""
        return classify(
            proc.returncode,
            marker,
            nonce,
            out.decode("utf-8", "replace"),
            err.decode("utf-8", "replace"),
            wall,
            timed_out=timed_out,
            overflow=overflow.is_set(),
            limits=limits,
        )

    async def _kill(self, pid: int, uid: int | None) -> None:
        """Kill the session, then every process of the slot uid (also those that left it)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        if uid is not None:
            await asyncio.to_thread(kill_uid, uid)


def classify(
    returncode: int | None,
    marker: str,
    nonce: str,
    stdout: str,
    stderr: str,
    wall: float,
    *,
    timed_out: bool,
    overflow: bool,
    limits: Limits,
) -> RunOutcome:
    """Turn exit code, harness marker and flags into one of `STATUSES`."""
    status_word = ""
    for line in marker.splitlines():
        parts = line.split(" ", 1)
        if len(parts) == 2 and parts[0] == nonce:
            status_word = parts[1].strip()

    def outcome(status: str, detail: str) -> RunOutcome:
        return RunOutcome(status, returncode, stdout, stderr, round(wall, 4), detail)

    if overflow:
        return outcome("output_limit", f"stdout exceeded {limits.output_bytes} bytes")
    if timed_out:
        return outcome("timeout", f"wall time exceeded {limits.wall_s}s")
    if returncode is not None and returncode < 0:
        sig = -returncode
        if sig == signal.SIGXCPU:
            return outcome("timeout", f"cpu time exceeded {limits.cpu_s}s")
        if sig == signal.SIGXFSZ:
            return outcome("output_limit", f"file size exceeded {limits.file_bytes} bytes")
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        if "MemoryError" in stderr:
            return outcome("memory", f"out of memory (limit {limits.memory_mb} MiB)")
        return outcome("killed", f"killed by {name}")
    if status_word == "exc:MemoryError" or (not status_word and "MemoryError" in stderr):
        return outcome("memory", f"out of memory (limit {limits.memory_mb} MiB)")
    if status_word == "ok" and returncode == 0:
        return outcome("ok", "")
    if status_word == "exc:AssertionError":
        return outcome("failed", "assertion failed")
    if status_word.startswith("exc:"):
        return outcome("error", f"raised {status_word[4:]}")
    if status_word.startswith("exit:"):
        return outcome("failed", f"exited ({status_word[5:]}) before the tests finished")
    return outcome("failed", f"exited with code {returncode} before the harness finished")
