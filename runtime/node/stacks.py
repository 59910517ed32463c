"""``kill -USR1 <pid>`` prints every thread's Python stack of a runtime process (the run, a
trainer rank, an embedded engine) to its stderr and lets it go on: a run that waits longer
than it should says where, with no debugger on the machine."""

from __future__ import annotations

import faulthandler
import signal
import sys


def dump_stacks_on_sigusr1() -> None:
    """Register the dump (faulthandler's, so it works while the main thread is blocked in
    native code such as a collective)."""
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
