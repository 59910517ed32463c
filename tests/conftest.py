"""Every test session gets its own empty cache directory (derived artifacts, compile cache),
so no test depends on, or writes to, a cache in the user's home."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

_DIR: str | None = None


def pytest_configure(config: object) -> None:
    global _DIR
    _DIR = tempfile.mkdtemp(prefix="rlc-test-cache-")
    os.environ["RLC_CACHE_DIR"] = _DIR


def pytest_unconfigure(config: object) -> None:
    if _DIR is not None:
        shutil.rmtree(_DIR, ignore_errors=True)


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """Tiny matmuls: one intra-op thread is fastest on shared CI cores (a module opts in
    with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``)."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
