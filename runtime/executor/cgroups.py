"""Whole-tree limits for one sandboxed run: a cgroup that its first process joins.

rlimits bound each process; a run's processes together (children, threads, memfd and tmpfs
pages) are bounded only by a cgroup. `probe` finds one this service may create groups in:

* cgroup v2 with the ``memory`` and ``pids`` controllers delegated to the service's own
  cgroup (its ``cgroup.subtree_control`` can enable them; the service first moves itself
  into a leaf of its own, as the kernel's delegation rules ask);
* else cgroup v1 ``memory`` and ``pids`` hierarchies the service may write (root on a
  legacy or hybrid host).

Each run gets one group (`RunGroup`): ``memory.max`` (v1: ``memory.limit_in_bytes`` and the
same for memory+swap), no swap, ``pids.max``. The service's ``preexec_fn`` moves the run's
first process into it before ``execve``, so everything the program starts is inside. Where
no cgroup is available the sandbox falls back to per-process limits that add up to the
budget (`runtime.executor.sandbox.memory_plan`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

CONTROLLERS = ("memory", "pids")


@dataclass(frozen=True)
class CgroupBase:
    """Where this executor creates its runs' groups: one directory per hierarchy."""

    version: int
    dirs: tuple[str, ...]  # v2: one directory; v1: the memory one, then the pids one

    def describe(self) -> str:
        return f"cgroup v{self.version}"


def _own_cgroups(proc_cgroup: str = "/proc/self/cgroup") -> dict[str, str]:
    """Controller (``""`` for v2) -> this process's path in that hierarchy."""
    out: dict[str, str] = {}
    for line in Path(proc_cgroup).read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            out[name] = path
    return out


def _mounts(mountinfo: str = "/proc/self/mountinfo") -> dict[str, tuple[str, str]]:
    """Controller (``""`` for v2) -> (mount point, root of the hierarchy it shows)."""
    out: dict[str, tuple[str, str]] = {}
    for line in Path(mountinfo).read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        fstype, options = tail[0], tail[2].split(",")
        if fstype == "cgroup2":
            out.setdefault("", (fields[4], fields[3]))
        elif fstype == "cgroup":
            for name in CONTROLLERS:
                if name in options:
                    out.setdefault(name, (fields[4], fields[3]))
    return out


def _dir(mounts: dict[str, tuple[str, str]], own: dict[str, str], key: str) -> str | None:
    if key not in mounts or key not in own:
        return None
    point, root = mounts[key]
    rel = os.path.relpath(own[key], root) if own[key].startswith(root) else None
    if rel is None or rel.startswith(".."):
        return None
    return os.path.normpath(os.path.join(point, rel))


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as fh:
        fh.write(text)


def _sweep_stale(parent: str) -> None:
    """Remove groups left by executors that are gone (killed before they cleaned up)."""
    for entry in Path(parent).glob("rlc-executor-*"):
        pid = entry.name.split("-")[2]  # rlc-executor-PID or rlc-executor-PID-service
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            remove_base(CgroupBase(0, (str(entry),)))


def _probe_v2(mounts: dict[str, tuple[str, str]], own: dict[str, str], name: str) -> str:
    """The v2 base directory for this executor ('' if v2 cannot be used)."""
    here = _dir(mounts, own, "")
    if here is None:
        raise OSError("no cgroup v2 hierarchy")
    available = Path(here, "cgroup.controllers").read_text().split()
    missing = [c for c in CONTROLLERS if c not in available]
    if missing:
        raise OSError(f"cgroup v2 lacks {', '.join(missing)} here")
    enabled = Path(here, "cgroup.subtree_control").read_text().split()
    if not all(c in enabled for c in CONTROLLERS):
        # Processes may not live in a group that hands controllers down: move this service
        # into a leaf of its own first (cgroup v2's "no internal processes" rule).
        leaf = os.path.join(here, f"{name}-service")
        os.makedirs(leaf, exist_ok=True)
        _write(os.path.join(leaf, "cgroup.procs"), "0")
        _write(os.path.join(here, "cgroup.subtree_control"), "+memory +pids")
    _sweep_stale(here)
    base = os.path.join(here, name)
    os.makedirs(base, exist_ok=True)
    _write(os.path.join(base, "cgroup.subtree_control"), "+memory +pids")
    return base


def _probe_v1(mounts: dict[str, tuple[str, str]], own: dict[str, str], name: str) -> list[str]:
    dirs = []
    for controller in CONTROLLERS:
        here = _dir(mounts, own, controller)
        if here is None:
            raise OSError(f"no cgroup v1 {controller} hierarchy")
        _sweep_stale(here)
        base = os.path.join(here, name)
        os.makedirs(base, exist_ok=True)
        dirs.append(base)
    return dirs


def probe(name: str | None = None) -> tuple[CgroupBase | None, str]:
    """A base this executor may create run groups in, or None and why not."""
    name = name or f"rlc-executor-{os.getpid()}"
    try:
        own, mounts = _own_cgroups(), _mounts()
    except OSError as exc:
        return None, f"cgroups unreadable: {exc}"
    reasons = []
    try:
        return _checked(CgroupBase(2, (_probe_v2(mounts, own, name),))), ""
    except OSError as exc:
        reasons.append(f"v2: {exc.strerror or exc}")
    try:
        return _checked(CgroupBase(1, tuple(_probe_v1(mounts, own, name)))), ""
    except OSError as exc:
        reasons.append(f"v1: {exc.strerror or exc}")
    return None, "no writable cgroup with memory and pids (" + "; ".join(reasons) + ")"


def _checked(base: CgroupBase) -> CgroupBase:
    """Create, limit and remove one group, so a base that cannot work is never used."""
    group = RunGroup.create(base, "probe", memory_bytes=64 << 20, pids=4)
    group.remove()
    return base


def remove_base(base: CgroupBase) -> None:
    """Remove this executor's groups (runs first; a group with processes left stays)."""
    for d in base.dirs:
        for child in Path(d).glob("*/"):
            RunGroup(base, (str(child),)).remove()
        with contextlib.suppress(OSError):
            os.rmdir(d)


@dataclass(frozen=True)
class RunGroup:
    """One run's cgroup (one directory per hierarchy)."""

    base: CgroupBase
    dirs: tuple[str, ...]

    @classmethod
    def create(cls, base: CgroupBase, name: str, memory_bytes: int, pids: int) -> RunGroup:
        dirs = tuple(os.path.join(d, name) for d in base.dirs)
        for d in dirs:
            os.makedirs(d, exist_ok=True)
        group = cls(base, dirs)
        try:
            if base.version == 2:
                _write(os.path.join(dirs[0], "memory.max"), str(memory_bytes))
                swap = os.path.join(dirs[0], "memory.swap.max")
                if os.path.exists(swap):
                    _write(swap, "0")
                _write(os.path.join(dirs[0], "pids.max"), str(pids))
            else:
                memory, pid_dir = dirs
                _write(os.path.join(memory, "memory.limit_in_bytes"), str(memory_bytes))
                memsw = os.path.join(memory, "memory.memsw.limit_in_bytes")
                if os.path.exists(memsw):
                    _write(memsw, str(memory_bytes))
                _write(os.path.join(pid_dir, "pids.max"), str(pids))
        except OSError:
            group.remove()
            raise
        return group

    def procs_files(self) -> list[str]:
        """The files a process writes ``0`` to, to join the group."""
        return [os.path.join(d, "cgroup.procs") for d in self.dirs]

    def join(self) -> None:
        """Move the calling process into the group (runs in the child before execve)."""
        for path in self.procs_files():
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of the group for memory."""
        name = "memory.events" if self.base.version == 2 else "memory.oom_control"
        try:
            text = Path(self.dirs[0], name).read_text()
        except OSError:
            return False
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value) > 0
        return False

    def pids(self) -> list[int]:
        out: list[int] = []
        for path in self.procs_files():
            with contextlib.suppress(OSError):
                out += [int(x) for x in Path(path).read_text().split()]
        return sorted(set(out))

    def kill(self, timeout_s: float = 5.0) -> bool:
        """SIGKILL every process of the group; True once it is empty."""
        kill_file = os.path.join(self.dirs[0], "cgroup.kill")
        deadline = time.monotonic() + timeout_s
        while True:
            pids = self.pids()
            if not pids:
                return True
            if time.monotonic() > deadline:
                return False
            if self.base.version == 2 and os.path.exists(kill_file):
                with contextlib.suppress(OSError):
                    _write(kill_file, "1")
            else:
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)

    def remove(self) -> bool:
        """Kill what is left and remove the group's directories; False if some remain."""
        empty = self.kill()
        ok = empty
        for d in self.dirs:
            try:
                os.rmdir(d)
            except FileNotFoundError:
                pass
            except OSError:
                ok = False
        return ok
