"""The one-line cause of a child process's failure, read from its log.

A child that dies at start-up (engine, router, executor, judge, trainer rank) leaves a Python
traceback or an error line in its log. The user needs that cause first and the log's path,
not the traceback; `describe_exit` builds the line every supervisor reports.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

# The last line of a Python traceback: "ValueError: ..." or "pkg.mod.ModelLoadError: ...".
_EXCEPTION = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Failure|Interrupt|Warning)\b(?::.*)?$"
)
# Other programs (argparse, the Rust router, shells) say so in words.
_ERROR_WORD = re.compile(r"\b(error|fatal|panicked|failed|cannot|not found)\b", re.IGNORECASE)
_MAX_CHARS = 300
_READ_BYTES = 64 * 1024


def _shorten(line: str) -> str:
    line = " ".join(line.split())
    return line if len(line) <= _MAX_CHARS else line[: _MAX_CHARS - 3] + "..."


def cause_from_text(text: str) -> str:
    """The line that says why: a traceback's exception line, else the last error line."""
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    for line in reversed(lines):
        if not line[0].isspace() and _EXCEPTION.match(line) and "Warning" not in line.split(":")[0]:
            return _shorten(line)
    for line in reversed(lines):
        if _ERROR_WORD.search(line):
            return _shorten(line)
    return _shorten(lines[-1]) if lines else "no output"


def cause_from_log(path: Path | None) -> str:
    """`cause_from_text` over the end of a log file ("no log" when there is none)."""
    if path is None:
        return "no log"
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - _READ_BYTES))
            text = fh.read().decode(errors="replace")
    except OSError:
        return "no log"
    return cause_from_text(text)


def shown_path(path: Path) -> str:
    """``path`` relative to the working directory when it is below it (shorter to read)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except (OSError, ValueError):
        return str(path)


def exit_status(returncode: int | None) -> str:
    """ "exit code 1" or "killed by SIGKILL"."""
    if returncode is not None and returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def describe_exit(name: str, returncode: int | None, log_path: Path | None) -> str:
    """``engine:0 exited (exit code 1): ModelLoadError: ...; full log: runs/x/logs/engine-0.log``."""
    where = f"; full log: {shown_path(log_path)}" if log_path is not None else ""
    return f"{name} exited ({exit_status(returncode)}): {cause_from_log(log_path)}{where}"
