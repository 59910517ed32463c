"""Task loaders, prompt wrappers and length budgets (small synthetic files + generated tasks)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from runtime.data.records import Prompt
from runtime.data.render import PromptTooLong, check_prompt_lengths, render_ids
from runtime.data.tasks import DataError, arithmetic_problems, load_task, load_tasks
from runtime.data.wrappers import BOXED_SUFFIX, UnknownWrapper, resolve_wrapper, wrap


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_gsm8k_directory_splits_and_gold(tmp_path: Path) -> None:
    _jsonl(
        tmp_path / "train.jsonl",
        [{"question": f"q{i}", "answer": f"x\n#### {i},000"} for i in range(5)],
    )
    _jsonl(tmp_path / "test.jsonl", [{"question": "t", "answer": "#### -3"}])
    d = load_task({"task": "gsm8k", "path": str(tmp_path), "train_count": 3, "eval_count": 1}, 17)
    assert [p.id for p in d.train] == ["gsm8k:train:0", "gsm8k:train:1", "gsm8k:train:2"]
    assert d.train[2].target == "2000" and d.eval[0].target == "-3"
    assert d.train[0].verifier == "gsm8k"
    assert d.train[0].messages == [{"role": "user", "content": "q0" + BOXED_SUFFIX}]  # auto wrapper
    with pytest.raises(DataError, match="asked for 9 prompts but the data has 5"):
        load_task({"task": "gsm8k", "path": str(tmp_path), "train_count": 9}, 17)


def test_single_file_seeded_disjoint_split(tmp_path: Path) -> None:
    f = _jsonl(
        tmp_path / "m.jsonl",
        [{"problem": f"p{i}", "answer": str(i), "unique_id": f"u{i}"} for i in range(20)],
    )
    entry = {
        "task": "math",
        "path": str(f),
        "train_count": 10,
        "eval_count": 5,
        "prompt_wrapper": "none",
    }
    a = load_task(entry, 1)
    b = load_task(entry, 1)
    c = load_task(entry, 2)
    assert [p.id for p in a.eval] == [p.id for p in b.eval]
    assert [p.id for p in a.eval] != [p.id for p in c.eval]
    assert not {p.id for p in a.eval} & {p.id for p in a.train}
    assert len(a.train) == 10 and a.train[0].messages[0]["content"].startswith("p")


def test_bad_rows_are_reported_with_position(tmp_path: Path) -> None:
    f = tmp_path / "g.jsonl"
    f.write_text('{"question": "q", "answer": "#### 1"}\nnot json\n')
    with pytest.raises(DataError, match=r"g.jsonl:2: not valid JSON"):
        load_task({"task": "gsm8k", "path": str(f)}, 0)
    _jsonl(f, [{"question": "q"}])
    with pytest.raises(DataError, match="missing field"):
        load_task({"task": "gsm8k", "path": str(f)}, 0)
    with pytest.raises(DataError, match="does not exist"):
        load_task({"task": "gsm8k", "path": str(tmp_path / "nope")}, 0)
    with pytest.raises(DataError, match="unknown task"):
        load_task({"task": "poetry"}, 0)


def test_ifeval_and_code_targets(tmp_path: Path) -> None:
    f = _jsonl(
        tmp_path / "input_data.jsonl",
        [
            {
                "key": 7,
                "prompt": "Say hi",
                "instruction_id_list": ["punctuation:no_comma"],
                "kwargs": [{}],
            }
        ],
    )
    d = load_task({"task": "ifeval", "path": str(f)}, 0)
    assert d.train[0].id == "ifeval:7"
    assert d.train[0].target == {"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}
    he = tmp_path / "he.jsonl.gz"
    with gzip.open(he, "wt") as fh:
        fh.write(
            json.dumps(
                {
                    "task_id": "H/0",
                    "prompt": "def f():\n",
                    "test": "def check(c): pass",
                    "entry_point": "f",
                }
            )
            + "\n"
        )
    d = load_task({"task": "code", "path": str(he)}, 0)
    assert d.train[0].target == {
        "kind": "function",
        "prompt": "def f():\n",
        "test": "def check(c): pass",
        "entry_point": "f",
    }
    stdio = _jsonl(
        tmp_path / "s.jsonl", [{"prompt": "echo", "tests": [{"input": "1\n", "output": "1\n"}]}]
    )
    d = load_task({"task": "code", "path": str(stdio)}, 0)
    assert d.train[0].target == {"kind": "stdio", "tests": [{"input": "1\n", "output": "1\n"}]}
    assert "standard input" in d.train[0].messages[0]["content"]


def test_generated_tasks_are_deterministic_and_one_token() -> None:
    probs = arithmetic_problems()
    assert len(probs) == 100 and all(len(a) <= 2 and int(a) <= 18 for _, a in probs)
    sub = arithmetic_problems(allow_subtraction=True)
    assert all(not a.startswith("-") for _, a in sub) and len(sub) == 155
    a = load_task({"task": "arithmetic", "train_count": 40, "eval_count": 8}, 5)
    b = load_task({"task": "arithmetic", "train_count": 40, "eval_count": 8}, 5)
    assert [p.text for p in a.train] == [p.text for p in b.train]
    p = a.train[0]
    assert p.metadata["raw"] and p.verifier == "arithmetic"
    q, t = p.text.rstrip("="), p.target
    x, y = q.split("+")
    assert int(x) + int(y) == int(t)
    m = load_task(
        {"task": "multiplication", "digits": [3, 2], "train_count": 5, "eval_count": 2}, 5
    )
    for p in m.train:
        x, y = p.text.rstrip("=").split("*")
        assert len(x) == 3 and len(y) == 2 and int(x) * int(y) == int(p.target)
    with pytest.raises(DataError):
        load_task({"task": "multiplication", "digits": [0, 2]}, 1)


def test_builtin_tokenizer_makes_arithmetic_answers_one_token() -> None:
    # load the tokenizer module by path: the runtime.models package imports torch (slow)
    import importlib.util

    pytest.importorskip("tokenizers")
    path = Path(__file__).resolve().parents[2] / "runtime" / "models" / "tokenizer.py"
    if not path.exists():
        pytest.skip("builtin tokenizer not present")
    spec = importlib.util.spec_from_file_location("_rlc_builtin_tokenizer", path)
    assert spec is not None and spec.loader is not None
    tok_mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tok_mod)
    tok = tok_mod.build_builtin_tokenizer()
    for _, answer in arithmetic_problems(allow_subtraction=True):
        assert len(tok.encode(answer)) == 1, answer


def test_load_tasks_pools_weights_and_unique_ids() -> None:
    train, ev, parts = load_tasks(
        [
            {"task": "arithmetic", "train_count": 4},
            {"task": "arithmetic", "train_count": 3, "weight": 2},
        ],
        1,
    )
    assert len(train) == 7 and len({p.id for p in train}) == 7
    assert {p.metadata["pool"] for p in train} == {"arithmetic", "arithmetic#1"}
    assert train[-1].metadata["weight"] == 2.0
    with pytest.raises(DataError, match="weight"):
        load_tasks([{"task": "arithmetic", "weight": 0}], 1)


def test_wrappers() -> None:
    assert resolve_wrapper("auto", "math") == "boxed"
    assert resolve_wrapper(None, "ifeval") == "none"
    assert resolve_wrapper("open_instruct_rlzero_answer", "gsm8k") == "open_instruct_rlzero_answer"
    text, raw = wrap("What is 2+2?", "rlzero")
    assert raw and text.endswith("Assistant:") and "What is 2+2?" in text
    assert "\\boxed{ANSWER}" in wrap("q", "open_instruct_rlzero_answer")[0]
    with pytest.raises(UnknownWrapper, match="choose one of"):
        resolve_wrapper("fancy", "math")


class CharTokenizer:
    """One id per character; a chat template that adds a fixed 10-character frame."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        return "<u>" + "".join(m["content"] for m in messages) + "</u><a>"


def _p(pid: str, text: str, raw: bool = False) -> Prompt:
    return Prompt(
        pid,
        "t",
        [{"role": "user", "content": text}],
        None,
        "arithmetic",
        {"raw": raw} if raw else {},
    )


def test_render_and_length_budget() -> None:
    tok = CharTokenizer()
    assert len(render_ids(_p("a", "abc"), tok)) == 13
    assert len(render_ids(_p("a", "abc", raw=True), tok)) == 3
    prompts = [_p("short", "x"), _p("long1", "y" * 20), _p("long2", "z" * 30)]
    kept, report = check_prompt_lengths(prompts, tok, 15, "drop")
    assert [p.id for p in kept] == ["short"]
    assert report.over_count == 2 and report.over_ids == ["long1", "long2"]
    assert (
        report.max_length == 40 and "2 of 3 prompts exceed max_prompt_length=15" in report.summary()
    )
    with pytest.raises(PromptTooLong, match="long1, long2"):
        check_prompt_lengths(prompts, tok, 15, "error")
    kept, report = check_prompt_lengths(prompts, tok, 100, "error")
    assert len(kept) == 3 and report.over_count == 0
