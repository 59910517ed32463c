"""The in-sandbox harness, passed to ``python -I -c`` (it is never imported by the server).

argv: STATUS_FD NONCE MODE GUARD. It runs ``main.py`` from the working directory as
``__main__`` and only then writes ``NONCE ok`` (or ``NONCE exc:Type`` / ``NONCE exit:N``) to
the status pipe, so a program that exits early (``sys.exit(0)``, ``os._exit(0)``) before
its tests ran is not counted as passing. GUARD=1 installs the audit-hook fallback used when
the host offers no namespaces. This is a harness, not a security boundary by itself: code
that deliberately inspects its own process can find the nonce.
"""

import contextlib
import os
import sys


def _install_guard(root):
    """Best-effort audit hook: no sockets, no new processes, no ctypes, writes only in root."""
    blocked = (
        "socket.",
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "subprocess.Popen",
        "ctypes.",
        "os.kill",
        "os.killpg",
        "signal.pthread_kill",
    )
    path_events = {
        "os.remove",
        "os.rmdir",
        "os.mkdir",
        "os.rename",
        "os.symlink",
        "os.link",
        "os.chmod",
        "os.chown",
        "os.truncate",
        "os.utime",
        "shutil.rmtree",
        "shutil.copyfile",
        "shutil.move",
    }
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
    realpath = os.path.realpath
    prefix = realpath(root).rstrip("/") + "/"

    def inside(path):
        try:
            path = os.fsdecode(path)
        except TypeError:
            return False
        return (realpath(path) + "/").startswith(prefix)

    own_proc = (f"/proc/{os.getpid()}/", "/proc/self/", "/proc/thread-self/")

    def hook(event, args):
        if event.startswith(blocked):
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "open":
            path, mode, flags = args
            if isinstance(path, str | bytes):
                text = os.fsdecode(path)
                # Other processes' /proc entries (their environ holds the service's secrets).
                if text.startswith("/proc/") and not text.startswith(own_proc):
                    part = text.split("/")[2]
                    if part.isdigit():
                        raise PermissionError(f"sandbox: reading {text!r} is not allowed")
            writing = (mode and any(c in mode for c in "wax+")) or (flags or 0) & write_flags
            if writing and isinstance(path, str | bytes) and not inside(path):
                raise PermissionError(f"sandbox: writing {path!r} is not allowed")
        elif event in path_events and args:
            for arg in args[:2]:
                if isinstance(arg, str | bytes) and not inside(arg):
                    raise PermissionError(f"sandbox: {event} on {arg!r} is not allowed")

    sys.addaudithook(hook)


def _main():
    fd = int(sys.argv[1])
    nonce = sys.argv[2]
    mode = sys.argv[3]
    guard = sys.argv[4] == "1"
    sys.argv[:] = ["main.py"]
    with open("main.py", encoding="utf-8") as fh:
        source = fh.read()
    if guard:
        _install_guard(os.getcwd())
    sys.path.insert(0, os.getcwd())
    scope = {"__name__": "__main__", "__file__": "main.py", "__builtins__": __builtins__}
    try:
        exec(compile(source, "main.py", "exec"), scope)
        status = "ok"
    except SystemExit as exc:
        code = exc.code
        status = "ok" if mode == "stdio" and code in (None, 0) else f"exit:{code}"
    except BaseException as exc:
        import traceback

        traceback.print_exc()
        status = f"exc:{type(exc).__name__}"
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os.write(fd, f"{nonce} {status}\n".encode())
    os._exit(0 if status == "ok" else 1)


if __name__ == "__main__":
    _main()
