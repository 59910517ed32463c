"""AOTAutograd's cache keeps OLMo-core's block graphs, whose RoPE and norms run inside
``torch.autocast(enabled=False)`` regions: a second process compiling the same block over
the same cache directory reads the traced, partitioned graph back instead of tracing it
again."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("olmo_core")

from runtime import compile_settings  # noqa: E402

# one compiled block of the tiny builtin, forward and backward; prints the cache lookups
COMPILE_A_BLOCK = """
import json, torch
from runtime import compile_settings
from runtime.models import load_model
block = load_model("builtin:tiny", seed=1).model.blocks["0"]
x = torch.randn(1, 16, block.attention.w_q.in_features, requires_grad=True)
compile_settings.prepare_compile(8)
torch.compile(block)(x).sum().backward()
print(json.dumps(compile_settings.aot_cache_counts()))
"""


def _lookups(tmp_path, **env: str) -> dict[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", COMPILE_A_BLOCK],
        env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_second_process_reads_a_block_with_autocast_regions_back(tmp_path):
    first = _lookups(tmp_path)
    assert first["miss"] >= 1 and first["bypass"] == 0, first
    second = _lookups(tmp_path)
    assert second == {"hit": first["miss"], "miss": 0, "bypass": 0}, second


def test_turned_off_the_block_is_traced_without_the_cache(tmp_path):
    off = _lookups(tmp_path, **{compile_settings.CACHE_AUTOCAST_ENV: "0"})
    assert off["bypass"] >= 1 and off["hit"] == 0, off
