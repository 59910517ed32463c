"""The GSM8K verifier and loader on the real test split (1,319 problems)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.data.tasks import load_task
from runtime.rewards.base import get_verifier
from runtime.rewards.gsm8k import gold_answer

DATA = Path(__file__).resolve().parents[2] / "runtime" / "data" / "datasets" / "gsm8k"
pytestmark = pytest.mark.skipif(
    not (DATA / "test.jsonl").exists(), reason=f"GSM8K not found at {DATA}"
)


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return [json.loads(line) for line in (DATA / "test.jsonl").read_text().splitlines()]


def test_every_gold_scores_one_and_gold_plus_one_scores_zero(rows: list[dict]) -> None:
    v = get_verifier("gsm8k")
    assert len(rows) == 1319
    for r in rows:
        gold = gold_answer(r["answer"])
        wrong = str(int(gold) + 1)
        # the reference solution itself, and three answer styles of a model
        assert v.score(r["answer"], gold, {}).score == 1.0, r["answer"]
        assert v.score(f"Let me think.\nThe answer is {int(gold):,}.", gold, {}).score == 1.0
        assert v.score(f"so we get $\\boxed{{{gold}}}$", r["answer"], {}).score == 1.0
        assert v.score(f"3 steps, 2 numbers, final {gold}", gold, {}).score == 1.0
        assert v.score(f"The answer is {wrong}.", gold, {}).score == 0.0
        assert v.score(r["answer"].rsplit("####", 1)[0] + f"#### {wrong}", gold, {}).score == 0.0


def test_loader_counts_and_targets() -> None:
    d = load_task({"task": "gsm8k", "path": str(DATA), "eval_count": 1319}, 17)
    assert len(d.train) == 7473 and len(d.eval) == 1319
    assert d.eval[0].target == gold_answer(
        json.loads((DATA / "test.jsonl").read_text().splitlines()[0])["answer"]
    )
    negative = [p for p in d.eval if p.target.startswith("-")]
    assert len(negative) == 2
