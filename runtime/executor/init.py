"""The sandbox's first process (``python -I -S -c <this source> CONFIG_JSON``; stdlib only).

It builds the sandbox in its own process, so the service never forks into privileged
set-up code, then forks the program as PID 1 of a fresh PID namespace and waits for it:

1. ``userns``: a new user namespace that maps one uid (1000 inside) to the service's own
   uid (a root service first becomes the slot's throw-away uid: RLIMIT_NPROC never applies
   to root's processes), so nothing below has more power than that uid; ``namespaces``
   (root): none needed.
2. New mount, network (unless the request allows network), IPC, UTS and PID namespaces.
3. The whole mount tree is made read-only (``mount_setattr``, recursive); ``/tmp`` becomes an
   empty read-only tmpfs holding the working directory (its own size-capped tmpfs, the only
   writable place) and a read-only bind of the interpreter's prefix; ``/var/tmp``,
   ``/dev/shm`` and ``/run`` (the host's UNIX sockets) are hidden behind empty read-only
   tmpfs mounts.
4. In the child (PID 1): a private ``/proc``, rlimits, the slot's throw-away uid (root
   mode), ``no_new_privs``, a Landlock domain (reads only in system directories, writes only
   in the working directory, no TCP, no signals or abstract sockets outside the domain), the
   service's seccomp filter (no ptrace, mount, namespaces, bpf, keyrings, io_uring, ...).
   It then forks the program (PID 2, ``execve`` of its interpreter), reaps orphans, and
   passes the program's wait status back over a close-on-exec pipe.

When PID 1 exits the kernel kills every other process of the namespace, so nothing the
program started outlives the run. ``none`` (opt-in only) applies just the rlimits.
"""

import contextlib
import ctypes
import json
import os
import resource
import signal
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
ST_FLAGS = {1: MS_RDONLY, 2: MS_NOSUID, 4: MS_NODEV, 8: MS_NOEXEC}
SYS_MOUNT_SETATTR = 442
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 1
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2
INNER_UID = 1000
WORK = "/tmp/work"
PYTHON_MOUNT = "/tmp/.rlc-python"
# Writable or socket-holding places of the host, each behind an empty read-only tmpfs.
HIDDEN_DIRS = ("/var/tmp", "/dev/shm", "/run")
READ_DIRS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/tmp")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _check(rc, what):
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return rc


def _mount(src, target, fstype, flags, data):
    rc = _libc.mount(
        src.encode() if src else None,
        target.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    _check(rc, f"mount {target}")


def _write(path, text):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _setattr(path, attr_set, attr_clr):
    attr = _MountAttr(attr_set, attr_clr, 0, 0)
    size = ctypes.c_size_t(ctypes.sizeof(attr))
    return _libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, path, AT_RECURSIVE, ctypes.byref(attr), size)


def _readonly_tree():
    """Make every mount read-only in this namespace; False where the kernel lacks it.

    /proc stays writable for the user-namespace maps written next; the program gets a
    fresh proc mount of its own PID namespace on top of it."""
    if _setattr(b"/", MOUNT_ATTR_RDONLY, 0) != 0:
        return False
    _setattr(b"/proc", 0, MOUNT_ATTR_RDONLY)
    return True


def _unshare(flags):
    _check(_libc.unshare(flags), "unshare")


def _map_self():
    """Map this process's uid and gid to `INNER_UID` in its new user namespace."""
    outer_uid, outer_gid = os.getuid(), os.getgid()
    _unshare(CLONE_NEWUSER | CLONE_NEWNS)
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{INNER_UID} {outer_uid} 1")
    _write("/proc/self/gid_map", f"{INNER_UID} {outer_gid} 1")


def _enter_sandbox(cfg, program):
    """Enter the namespaces and build the mounts; returns whether the root is read-only."""
    flags = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID
    if not cfg["network"]:
        flags |= CLONE_NEWNET
    uid = cfg["uid"]
    if not cfg["userns"]:
        _unshare(flags)
        return _build_mounts(cfg, program, uid)
    if uid is None:  # unprivileged: the user namespace first, then everything inside it
        _map_self()
        _unshare(flags)
        return _build_mounts(cfg, program, INNER_UID)
    # Root: mounts as root, then become the slot's uid (RLIMIT_NPROC never applies to root's
    # processes) and enter a user namespace that maps only that uid; the mounts stay locked.
    _unshare(CLONE_NEWNS)
    readonly = _build_mounts(cfg, program, uid)
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # a uid change locks /proc/self/*_map
    _map_self()
    _unshare(flags)
    return readonly


def _build_mounts(cfg, program, uid):
    _mount(None, "/", None, MS_REC | MS_PRIVATE, None)
    # Opened inside this mount namespace (a bind source must belong to it).
    py_fd = os.open(cfg["prefix"], os.O_PATH | os.O_DIRECTORY)
    prefix_flags = 0
    for bit, flag in ST_FLAGS.items():
        if os.statvfs(py_fd).f_flag & bit:
            prefix_flags |= flag
    readonly = _readonly_tree()
    tmp_flags = MS_NOSUID | MS_NODEV
    _mount("tmpfs", "/tmp", "tmpfs", tmp_flags, "size=1m,mode=755")
    os.mkdir(WORK, 0o755)
    os.mkdir(PYTHON_MOUNT, 0o755)
    owner = f",uid={uid},gid={uid}" if uid is not None else ""
    work_opts = f"size={cfg['disk_mb']}m,nr_inodes=4096,mode=700{owner}"
    _mount("tmpfs", WORK, "tmpfs", tmp_flags, work_opts)
    for name, data in program.items():
        path = f"{WORK}/{name}"
        with open(path, "wb") as fh:
            fh.write(data)
        if uid is not None:
            os.chown(path, uid, uid)
    _mount(f"/proc/self/fd/{py_fd}", PYTHON_MOUNT, None, MS_BIND | MS_REC, None)
    bind_ro = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | prefix_flags
    _mount(None, PYTHON_MOUNT, None, bind_ro, None)
    _mount(None, "/tmp", None, MS_REMOUNT | MS_RDONLY | tmp_flags, "size=1m,mode=755")
    os.close(py_fd)
    for d in HIDDEN_DIRS:
        if os.path.isdir(d) and not os.path.islink(d):
            _mount("tmpfs", d, "tmpfs", MS_RDONLY | tmp_flags, "size=4k,mode=755")
    return readonly


# Landlock (https://docs.kernel.org/userspace-api/landlock.html), by ABI version.
LL_EXECUTE, LL_WRITE_FILE, LL_READ_FILE, LL_READ_DIR = 1, 2, 4, 8
LL_READ = LL_EXECUTE | LL_READ_FILE | LL_READ_DIR
LL_ABI_FS = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
LL_DEV_IOCTL = 1 << 15


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _landlock(abi, network, read_dirs):
    """Restrict this process: read/execute in ``read_dirs``, everything in the work dir."""
    fs_all = LL_ABI_FS[max(k for k in LL_ABI_FS if k <= abi)]
    attr = _RulesetAttr(fs_all, 0, 0)
    size = 8
    if abi >= 4:
        size = 16
        attr.handled_access_net = 0 if network else 3  # bind and connect TCP: no rule allows
    if abi >= 6:
        size = 24
        attr.scoped = 3  # abstract unix sockets and signals stay inside the domain
    fd = _check(
        _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0),
        "landlock_create_ruleset",
    )
    dev = LL_READ_FILE | LL_WRITE_FILE | LL_READ_DIR | (LL_DEV_IOCTL if abi >= 5 else 0)
    rules = [(d, LL_READ) for d in read_dirs] + [("/dev", dev), ("/proc", LL_READ), (WORK, fs_all)]
    for path, access in rules:
        if not os.path.exists(path):
            continue
        pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        try:
            rule = _PathBeneath(access & fs_all, pfd)
            _check(
                _libc.syscall(SYS_LANDLOCK_ADD_RULE, fd, 1, ctypes.byref(rule), 0),
                f"landlock_add_rule {path}",
            )
        finally:
            os.close(pfd)
    _check(_libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, fd, 0), "landlock_restrict_self")
    os.close(fd)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _seccomp(bpf):
    buf = ctypes.create_string_buffer(bpf, len(bpf))
    prog = _SockFprog(len(bpf) // 8, ctypes.cast(buf, ctypes.c_void_p))
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0), "seccomp")


def _child(cfg, sandboxed, bpf, status_w):
    """PID 1 of the run: finish the sandbox, start the program as PID 2 and reap."""
    limits = cfg["limits"]
    if sandboxed:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
        os.chdir(WORK)
    else:
        os.chdir(cfg["workdir"])
    cpu = max(1, int(limits["cpu_s"] + 0.999))
    mem = int(cfg["address_space_mb"]) * 1024 * 1024
    for res, value in (
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_AS, (mem, mem)),
        (resource.RLIMIT_FSIZE, (limits["file_bytes"], limits["file_bytes"])),
        (resource.RLIMIT_NOFILE, (limits["open_files"], limits["open_files"])),
        (resource.RLIMIT_CORE, (0, 0)),
        (resource.RLIMIT_NPROC, (limits["max_processes"], limits["max_processes"])),
    ):
        resource.setrlimit(res, value)
    uid = cfg["uid"]
    if cfg["userns"]:
        os.setgid(INNER_UID)
        os.setuid(INNER_UID)
    elif uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    if cfg["landlock"]:
        read_dirs = READ_DIRS if sandboxed else (*READ_DIRS, cfg["prefix"])
        _landlock(cfg["landlock"], cfg["network"], read_dirs)
    if bpf:
        _seccomp(bpf)
    argv = cfg["argv"]
    # The program must not be PID 1: the kernel ignores fatal default signals sent to a
    # namespace's init (SIGXCPU from RLIMIT_CPU among them).
    program = os.fork() if sandboxed else 0
    if program == 0:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        os.execve(argv[0], argv, cfg["env"])
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)
    while True:  # reap orphans until the program itself exits
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(111)
        except InterruptedError:
            continue
        if pid == program:
            break
    os.write(status_w, f"{status}\n".encode())
    os._exit(0)


def _relay(pid, status_r):
    """Wait for PID 1 and leave the way the program did."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, f: os.kill(pid, signal.SIGKILL))
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except ChildProcessError:
            os._exit(111)
        except InterruptedError:
            continue
    reported = os.read(status_r, 64).decode().strip()
    if reported.isdigit():
        status = int(reported)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _main():
    cfg = json.loads(sys.argv[1])
    sandboxed = cfg["kind"] in ("namespaces", "userns")
    try:
        program = {}  # the run's files (main.py; the judge's test.py and context.py)
        for entry in os.scandir(cfg["workdir"]):
            if entry.is_file(follow_symlinks=False):
                with open(entry.path, "rb") as fh:
                    program[entry.name] = fh.read()
        bpf = b""
        if cfg["seccomp"]:
            with open(cfg["seccomp"], "rb") as fh:
                bpf = fh.read()
        if sandboxed and not _enter_sandbox(cfg, program) and not cfg["landlock"]:
            raise OSError("neither mount_setattr nor Landlock: the root cannot be made read-only")
        status_r, status_w = os.pipe()  # close-on-exec: the program never holds it
        pid = os.fork() if sandboxed else 0
    except OSError as exc:
        os.write(2, f"rlc-sandbox: set-up failed: {exc}\n".encode())
        os._exit(125)
    if pid == 0:
        try:
            os.close(status_r)
            _child(cfg, sandboxed, bpf, status_w)
        except BaseException as exc:
            os.write(2, f"rlc-sandbox: set-up failed: {exc}\n".encode())
        os._exit(125)
    for fd in cfg["pass_fds"]:
        with contextlib.suppress(OSError):
            os.close(fd)
    os.close(status_w)
    _relay(pid, status_r)


if __name__ == "__main__":
    _main()
