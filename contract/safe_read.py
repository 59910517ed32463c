"""Read a user-supplied path only if it is a regular file of bounded size.

`Path.read_bytes()` on a FIFO blocks forever and on a link to ``/dev/zero`` reads until
memory runs out; a pull request that commits such a ``manifest.json`` would stop
``rlc lint`` in CI. Opening with ``O_NONBLOCK`` never waits for a FIFO's writer, ``fstat`` on
the opened descriptor decides (no race with a swapped path), and the read stops one byte past
the bound. Refusals are `OSError`s with a ``strerror``, so every caller's existing
"cannot read X: <reason>" path reports them.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

SPEC_LIMIT = 4 * 1024 * 1024  # the parser refuses more than 256 KiB itself, with a position
MANIFEST_LIMIT = 64 * 1024 * 1024
SIGNATURE_LIMIT = 4096
JSON_LIMIT = 64 * 1024 * 1024  # a model's config.json and similar small metadata


class NotReadable(OSError):
    """The path is not a regular file, or is larger than the caller's bound."""


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a named pipe (FIFO)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of ``path``; raises `NotReadable` (an OSError) for anything but a regular
    file of at most ``limit`` bytes, and OSError as ``open`` does."""
    fd = os.open(Path(path), os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotReadable(errno.EINVAL, f"it is {_kind(st.st_mode)}, not a regular file")
        if st.st_size > limit:
            raise NotReadable(errno.EFBIG, f"it is larger than {limit} bytes")
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:  # grew while being read
                raise NotReadable(errno.EFBIG, f"it is larger than {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_regular_text(path: str | os.PathLike[str], limit: int) -> str:
    """`read_regular` decoded as UTF-8 (UnicodeDecodeError as ``read_text`` raises it)."""
    return read_regular(path, limit).decode("utf-8")
