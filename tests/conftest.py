"""Every test session gets its own empty cache directory (derived artifacts, compile cache),
so no test depends on, or writes to, a cache in the user's home."""

from __future__ import annotations

import os
import shutil
import tempfile

_DIR: str | None = None


def pytest_configure(config: object) -> None:
    global _DIR
    _DIR = tempfile.mkdtemp(prefix="rlc-test-cache-")
    os.environ["RLC_CACHE_DIR"] = _DIR


def pytest_unconfigure(config: object) -> None:
    if _DIR is not None:
        shutil.rmtree(_DIR, ignore_errors=True)
