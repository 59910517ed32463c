"""The IFEval verifier against Google's reference checker verdicts on GPT-4 responses.

Prompt by prompt and instruction by instruction, strict and loose, on the 539 prompts whose
reference verdict is deterministic (see shared/data/ifeval-reference/README.md).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from runtime.data.tasks import load_task
from runtime.rewards.base import get_verifier
from runtime.rewards.ifeval import CHECKERS, check_all

CHECKOUT = Path(__file__).resolve().parents[2]
# the reference checker's verdicts are test data only, kept beside the checkout
REF = CHECKOUT / ".." / "shared" / "data" / "ifeval-reference"
SHIPPED = CHECKOUT / "runtime" / "data" / "datasets"
pytestmark = pytest.mark.skipif(
    not REF.exists(), reason=f"IFEval reference data not found at {REF}"
)


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def joined() -> list[tuple[dict, str, dict]]:
    inputs = _jsonl(REF / "input_data_gpt4_20231107_145030.jsonl")
    responses = {
        r["prompt"]: r["response"]
        for r in _jsonl(REF / "input_response_data_gpt4_20231107_145030.jsonl")
    }
    ref = {r["key"]: r for r in _jsonl(REF / "reference_by_key.jsonl")}
    return [(row, responses[row["prompt"]], ref[row["key"]]) for row in inputs]


@pytest.mark.parametrize("mode", ["strict", "loose"])
def test_agreement_with_the_reference_checker(joined: list, mode: str) -> None:
    per_id: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    disagreements = []
    prompts_pass = instr_pass = instr_total = prompts = 0
    for row, response, ref in joined:
        if not ref["deterministic"]:
            continue
        prompts += 1
        got = check_all(row["instruction_id_list"], row["kwargs"], response, mode)
        want = ref[f"{mode}_follow_instruction_list"]
        prompts_pass += all(got)
        instr_pass += sum(got)
        instr_total += len(got)
        for iid, g, w in zip(row["instruction_id_list"], got, want, strict=True):
            per_id[iid][0] += 1
            per_id[iid][1] += g == w
            if g != w:
                disagreements.append((row["key"], iid, g, w))
    print(mode, {k: f"{v[1]}/{v[0]}" for k, v in sorted(per_id.items())})
    assert set(per_id) == set(CHECKERS)
    assert disagreements == []
    expected = {"strict": (415, 694), "loose": (429, 710)}[mode]
    assert (prompts, instr_total) == (539, 830)
    assert (prompts_pass, instr_pass) == expected


def test_random_rows_of_the_reference_pass_with_a_literal_count(joined: list) -> None:
    for row, response, ref in joined:
        if ref["deterministic"]:
            continue
        assert row["key"] in (1122, 1129)
        i = row["instruction_id_list"].index("keywords:letter_frequency")
        assert check_all(row["instruction_id_list"], row["kwargs"], response, "strict")[i]


def test_current_prompts_through_the_loader_and_verifier(joined: list) -> None:
    data = load_task({"task": "ifeval", "path": str(SHIPPED / "ifeval" / "input_data.jsonl")}, 17)
    assert len(data.train) == 541
    by_key = {row["key"]: (response, ref) for row, response, ref in joined}
    v = get_verifier("ifeval", {"aggregate": "all"})
    agree = 0
    for p in data.train:
        response, ref = by_key[p.metadata["key"]]
        r = v.score(response, p.target, {})
        assert r.ok
        agree += (r.score == 1.0) == ref["strict_follow_all_instructions"] or not ref[
            "deterministic"
        ]
    assert agree == 541
