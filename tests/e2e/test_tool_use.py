"""Multi-turn tool use must LEARN: `rlc run` on the tool-use example, shortened.

A random-init builtin:tiny-tools model, an embedded engine behind the real sglang-router,
the real calculator tool and the CPU trainer: each sample is an episode whose first turn
ends at a closing tag, whose tool result is appended to the same sequence and whose second
turn continues it. Two-digit sums are beyond what the model learns to add in these few
collections; calling the calculator and stopping after its result is learnable, so the
share of samples that use the tool and the reward both rise. Seeded end to end: the
thresholds hold on every run, with a margin.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from rt_helpers import ROOT, env, records

pytestmark = pytest.mark.slow

SPEC = ROOT / "specs" / "examples" / "tool-use.toml"
SHORT = ("training.num_rollouts=12", "inference.prompts_per_collection=16")


def test_tool_use_and_reward_rise(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("sglang_router")
    root = tmp_path / "run"
    argv = [sys.executable, "-m", "rlc_cli.main", "run", str(SPEC), "--no-progress"]
    for s in (*SHORT, f'output.root="{root}"', "output.rollout_sample_rate=0.05"):
        argv += ["--set", s]
    proc = subprocess.run(argv, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    recs = records(root)
    assert len(recs) == 12
    head, tail = recs[:2], recs[-3:]

    def mean(rows: list[dict[str, object]], key: str) -> float:
        return sum(float(r[key]) for r in rows) / len(rows)  # type: ignore[arg-type]

    # at random init few samples run the tool and almost none is rewarded
    assert mean(head, "tools/used_fraction") <= 0.8
    assert mean(head, "reward/mean") <= 0.15
    # by the end nearly every sample calls the calculator and stops after its result
    assert mean(tail, "tools/used_fraction") >= 0.95
    assert mean(tail, "reward/mean") >= 0.8
    assert mean(tail, "tools/turns_mean") >= 1.9
    # tool output has no engine logprob and no loss: the mismatch covers policy tokens only
    assert all(r["mismatch/logprob_abs_mean"] is not None for r in recs)
    assert max(float(r["mismatch/logprob_abs_mean"]) for r in recs) < 1e-3
    # the inspected rollouts show whole trajectories: the call, the result, the answer
    rows = [
        json.loads(line)
        for f in sorted((root / "rollouts").glob("*.jsonl"))
        for line in f.read_text().splitlines()
    ]
    late = [r for r in rows if r["collection"] >= 9 and r["reward"] == 1.0]
    assert late, "no rewarded trajectory sampled from the last collections"
    assert all(r["text"].startswith("</calculator><output>") for r in late)
    assert all(r["turns"] == 2 and r["tool_calls"] == 1 for r in late)
