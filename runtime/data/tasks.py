"""Task loaders: turn a ``[data] tasks`` entry into train and eval `Prompt` lists.

A loader is deterministic given the entry and the seed: file tasks keep file order (or a
seeded split when one file serves both splits); generated tasks draw from a seeded RNG.
Loaders never truncate or drop prompts silently: counts larger than the data are errors.
"""

from __future__ import annotations

import gzip
import json
import os
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.spec.data import DataSection
from contract.tasks import TASK_NAMES, TaskName
from runtime.data.records import Prompt
from runtime.data.wrappers import resolve_wrapper, wrap

TASKS: tuple[str, ...] = TASK_NAMES  # declared once, in the contract


class DataError(ValueError):
    """A data set that cannot be loaded as the spec says (missing file, bad rows, counts)."""


@dataclass(frozen=True)
class TaskData:
    """The prompts one entry contributes, and the files they were read from."""

    task: str
    train: list[Prompt]
    eval: list[Prompt]
    files: list[Path]


# The default data of the file tasks, shipped inside the package (datasets/README.md says
# where each comes from and under which license).
SHIPPED_DATA = Path(__file__).resolve().parent / "datasets"


def data_roots() -> list[Path]:
    """Where task data sets are looked up when an entry has no ``path``: ``RLC_DATA_ROOT``
    first, then the data shipped with rlc."""
    roots: list[Path] = []
    env = os.environ.get("RLC_DATA_ROOT")
    if env:
        roots.append(Path(env))
    roots.append(SHIPPED_DATA)
    return roots


_DEFAULT_DIRS = {"gsm8k": "gsm8k", "math": "math500", "ifeval": "ifeval", "code": "humaneval"}


def _default_path(task: str) -> Path:
    sub = _DEFAULT_DIRS[task]
    for root in data_roots():
        cand = root / sub
        if cand.exists():
            return cand.resolve()
    raise DataError(
        f"task {task!r} has no path and no default data set was found "
        f"(looked for {sub}/ under {', '.join(str(r) for r in data_roots())}; set data.tasks.path "
        "or RLC_DATA_ROOT)"
    )


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Rows of a .jsonl or .jsonl.gz file (blank lines skipped)."""
    opener: Callable[..., Any] = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{n}: not valid JSON: {exc.msg}") from None
            if not isinstance(row, dict):
                raise DataError(f"{path}:{n}: each line must be a JSON object")
            yield row


def _require(row: Mapping[str, Any], keys: tuple[str, ...], where: str) -> None:
    missing = [k for k in keys if k not in row]
    if missing:
        raise DataError(f"{where}: missing field(s) {', '.join(missing)}")


def _split_files(path: Path, names: dict[str, tuple[str, ...]]) -> dict[str, Path | None]:
    """For a directory, find the train/eval files by conventional names."""
    if path.is_file():
        return {"single": path}
    if not path.is_dir():
        raise DataError(f"data path {path} does not exist")
    out: dict[str, Path | None] = {}
    for split, candidates in names.items():
        out[split] = next((path / c for c in candidates if (path / c).is_file()), None)
    if not any(out.values()):
        raise DataError(
            f"no data file found in {path} (looked for {sorted({c for cs in names.values() for c in cs})})"
        )
    return out


def _take(rows: list[Any], count: int | None, what: str) -> list[Any]:
    if count is None:
        return rows
    if count < 0:
        raise DataError(f"{what}: count must be >= 0, got {count}")
    if count > len(rows):
        raise DataError(f"{what}: asked for {count} prompts but the data has {len(rows)}")
    return rows[:count]


def _partition(
    rows: list[Any], seed: int, train_count: int | None, eval_count: int | None, what: str
) -> tuple[list[Any], list[Any]]:
    """One file for both splits: a seeded permutation, eval first, train from the rest.

    With neither count given, the whole file is the training pool and eval is empty.
    """
    if eval_count is None or eval_count == 0:
        return _take(list(rows), train_count, what), []
    order = list(range(len(rows)))
    random.Random(f"split:{seed}:{what}").shuffle(order)
    if eval_count > len(rows):
        raise DataError(f"{what}: eval_count {eval_count} exceeds the {len(rows)} rows")
    ev = [rows[i] for i in sorted(order[:eval_count])]
    rest = [rows[i] for i in sorted(order[eval_count:])]
    return _take(rest, train_count, what + " (train)"), ev


def _split_rows(
    path: Path,
    names: dict[str, tuple[str, ...]],
    seed: int,
    entry: Mapping[str, Any],
    what: str,
) -> tuple[
    list[tuple[str, int, dict[str, Any]]], list[tuple[str, int, dict[str, Any]]], list[Path]
]:
    """Rows for train and eval as (split-name, line index, row)."""
    files = _split_files(path, names)
    tc, ec = entry.get("train_count"), entry.get("eval_count")
    if "single" in files:
        f = files["single"]
        assert f is not None
        rows = [(f.stem.split(".")[0], i, r) for i, r in enumerate(read_jsonl(f))]
        tr, ev = _partition(rows, seed, tc, ec, what)
        return tr, ev, [f]
    tr_rows: list[tuple[str, int, dict[str, Any]]] = []
    ev_rows: list[tuple[str, int, dict[str, Any]]] = []
    used: list[Path] = []
    if files.get("train"):
        ft = files["train"]
        assert ft is not None
        tr_rows = _take(
            [("train", i, r) for i, r in enumerate(read_jsonl(ft))], tc, what + " train"
        )
        used.append(ft)
    if files.get("eval"):
        fe = files["eval"]
        assert fe is not None
        all_ev = [("test", i, r) for i, r in enumerate(read_jsonl(fe))]
        if not files.get("train"):
            tr_rows, ev_rows = _partition(all_ev, seed, tc, ec, what)
        else:
            ev_rows = _take(all_ev, ec if ec is not None else 0, what + " eval")
        used.append(fe)
    elif ec:
        raise DataError(f"{what}: eval_count {ec} but {path} has no test file")
    return tr_rows, ev_rows, used


def _message(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def _mk(
    task: str,
    pid: str,
    question: str,
    wrapper: str,
    target: Any,
    verifier: str,
    meta: dict[str, Any],
    *,
    stdio: bool = False,
) -> Prompt:
    text, raw = wrap(question, wrapper, stdio=stdio)
    meta = dict(meta)
    if raw:
        meta["raw"] = True
    meta["prompt_wrapper"] = wrapper
    return Prompt(pid, task, _message(text), target, verifier, meta)


# --- file tasks ---------------------------------------------------------------------------


def load_gsm8k(entry: Mapping[str, Any], seed: int) -> TaskData:
    path = Path(entry.get("path") or _default_path("gsm8k"))
    wrapper = resolve_wrapper(entry.get("prompt_wrapper"), "gsm8k")
    tr, ev, files = _split_rows(
        path, {"train": ("train.jsonl",), "eval": ("test.jsonl",)}, seed, entry, "gsm8k"
    )

    def conv(rows: list[tuple[str, int, dict[str, Any]]]) -> list[Prompt]:
        out = []
        for split, i, r in rows:
            _require(r, ("question", "answer"), f"gsm8k {split} row {i}")
            gold = str(r["answer"]).split("####")[-1].strip().replace(",", "")
            out.append(
                _mk(
                    "gsm8k",
                    f"gsm8k:{split}:{i}",
                    r["question"],
                    wrapper,
                    gold,
                    "gsm8k",
                    {"split": split, "index": i},
                )
            )
        return out

    return TaskData("gsm8k", conv(tr), conv(ev), files)


def load_math(entry: Mapping[str, Any], seed: int) -> TaskData:
    path = Path(entry.get("path") or _default_path("math"))
    wrapper = resolve_wrapper(entry.get("prompt_wrapper"), "math")
    tr, ev, files = _split_rows(
        path, {"train": ("train.jsonl",), "eval": ("test.jsonl",)}, seed, entry, "math"
    )

    def conv(rows: list[tuple[str, int, dict[str, Any]]]) -> list[Prompt]:
        out = []
        for split, i, r in rows:
            _require(r, ("problem", "answer"), f"math {split} row {i}")
            uid = str(r.get("unique_id") or f"{split}/{i}")
            meta: dict[str, Any] = {k: r[k] for k in ("subject", "level", "unique_id") if k in r}
            meta.update(split=split, index=i)
            out.append(
                _mk("math", f"math:{uid}", r["problem"], wrapper, str(r["answer"]), "math", meta)
            )
        return out

    return TaskData("math", conv(tr), conv(ev), files)


def load_ifeval(entry: Mapping[str, Any], seed: int) -> TaskData:
    path = Path(entry.get("path") or _default_path("ifeval"))
    wrapper = resolve_wrapper(entry.get("prompt_wrapper"), "ifeval")
    tr, ev, files = _split_rows(
        path,
        {"train": ("train.jsonl",), "eval": ("input_data.jsonl", "test.jsonl")},
        seed,
        entry,
        "ifeval",
    )

    def conv(rows: list[tuple[str, int, dict[str, Any]]]) -> list[Prompt]:
        out = []
        for split, i, r in rows:
            where = f"ifeval row {i}"
            _require(r, ("key", "prompt", "instruction_id_list", "kwargs"), where)
            if len(r["instruction_id_list"]) != len(r["kwargs"]):
                raise DataError(f"{where}: instruction_id_list and kwargs differ in length")
            target = {
                "instruction_id_list": list(r["instruction_id_list"]),
                "kwargs": list(r["kwargs"]),
            }
            out.append(
                _mk(
                    "ifeval",
                    f"ifeval:{r['key']}",
                    r["prompt"],
                    wrapper,
                    target,
                    "ifeval",
                    {"key": r["key"], "split": split},
                )
            )
        return out

    return TaskData("ifeval", conv(tr), conv(ev), files)


def load_code(entry: Mapping[str, Any], seed: int) -> TaskData:
    """HumanEval-style (prompt/test/entry_point) or stdio-style (prompt, tests[{input,output}])."""
    path = Path(entry.get("path") or _default_path("code"))
    wrapper = resolve_wrapper(entry.get("prompt_wrapper"), "code")
    names = {
        "train": ("train.jsonl", "train.jsonl.gz"),
        "eval": ("HumanEval.jsonl.gz", "test.jsonl", "test.jsonl.gz"),
    }
    tr, ev, files = _split_rows(path, names, seed, entry, "code")

    def conv(rows: list[tuple[str, int, dict[str, Any]]]) -> list[Prompt]:
        out = []
        for split, i, r in rows:
            where = f"code {split} row {i}"
            _require(r, ("prompt",), where)
            tid = str(r.get("task_id") or f"{split}/{i}")
            if "tests" in r:
                tests = r["tests"]
                if not isinstance(tests, list) or not all(
                    isinstance(t, dict) and "input" in t and "output" in t for t in tests
                ):
                    raise DataError(f"{where}: tests must be a list of {{input, output}} objects")
                target: dict[str, Any] = {"kind": "stdio", "tests": tests}
                stdio = True
            else:
                _require(r, ("test", "entry_point"), where)
                target = {
                    "kind": "function",
                    "prompt": r["prompt"],
                    "test": r["test"],
                    "entry_point": r["entry_point"],
                }
                stdio = False
            out.append(
                _mk(
                    "code",
                    f"code:{tid}",
                    r["prompt"],
                    wrapper,
                    target,
                    "code",
                    {"task_id": tid, "split": split},
                    stdio=stdio,
                )
            )
        return out

    return TaskData("code", conv(tr), conv(ev), files)


# --- generated tasks ----------------------------------------------------------------------


def _gen_counts(entry: Mapping[str, Any], default_train: int) -> tuple[int, int]:
    """Counts for generated tasks: train defaults per task, eval defaults to none."""
    tc = entry.get("train_count")
    ec = entry.get("eval_count")
    tc = default_train if tc is None else int(tc)
    ec = 0 if ec is None else int(ec)
    if tc < 0 or ec < 0:
        raise DataError("train_count and eval_count must be >= 0")
    return tc, ec


def _builtin_one_token(answer: str) -> bool:
    """The builtin tokenizer has single tokens for 0..18 (every sum of two digits)."""
    return answer.isdigit() and int(answer) <= 18


def arithmetic_problems(
    allow_subtraction: bool = False, one_token: Callable[[str], bool] | None = None
) -> list[tuple[str, str]]:
    """All single-digit problems ``a+b=`` (and ``a-b=``) whose answer is one token.

    ``one_token`` defaults to the builtin tokenizer's rule (0..18 are single tokens; a
    negative answer is two tokens, so subtraction keeps ``a >= b``). Pass a predicate built
    from another tokenizer to filter for it instead.
    """
    ok = one_token or _builtin_one_token
    out = []
    for a in range(10):
        for b in range(10):
            if ok(str(a + b)):
                out.append((f"{a}+{b}=", str(a + b)))
            if allow_subtraction and ok(str(a - b)):
                out.append((f"{a}-{b}=", str(a - b)))
    return out


def load_arithmetic(
    entry: Mapping[str, Any], seed: int, one_token: Callable[[str], bool] | None = None
) -> TaskData:
    """Seeded draws (with replacement) from the one-token single-digit problems."""
    problems = arithmetic_problems(bool(entry.get("allow_subtraction", False)), one_token)
    tc, ec = _gen_counts(entry, len(problems))
    wrapper = resolve_wrapper(entry.get("prompt_wrapper"), "arithmetic")

    def draw(split: str, n: int) -> list[Prompt]:
        rng = random.Random(f"arithmetic:{seed}:{split}")
        picks = (
            list(problems)
            if split == "train" and n == len(problems)
            else [problems[rng.randrange(len(problems))] for _ in range(n)]
        )
        out = []
        for i, (q, a) in enumerate(picks):
            p = _mk(
                "arithmetic",
                f"arithmetic:{split}:{i}",
                q,
                wrapper,
                a,
                "arithmetic",
                {"split": split},
            )
            p.metadata["raw"] = True
            out.append(p)
        return out

    return TaskData("arithmetic", draw("train", tc), draw("eval", ec), [])


def _two_operand_task(
    entry: Mapping[str, Any],
    seed: int,
    task: str,
    symbol: str,
    rng_tag: str,
    apply: Callable[[int, int], int],
) -> TaskData:
    """Seeded ``a<symbol>b=`` problems with ``digits = [n, m]`` digit operands (default
    [2, 2]), 1000 training prompts unless ``train_count`` says otherwise."""
    digits = entry.get("digits") or (2, 2)
    if len(digits) != 2 or not all(isinstance(d, int) and 1 <= d <= 18 for d in digits):
        raise DataError(f"{task} digits must be two integers 1..18, got {digits!r}")
    n, m = digits
    tc, ec = _gen_counts(entry, 1000)
    wrapper = resolve_wrapper(entry.get("prompt_wrapper"), task)

    def num(rng: random.Random, d: int) -> int:
        return rng.randrange(10 ** (d - 1) if d > 1 else 0, 10**d)

    def draw(split: str, count: int) -> list[Prompt]:
        rng = random.Random(f"{task}:{seed}:{split}:{n}{rng_tag}{m}")
        out = []
        for i in range(count):
            a, b = num(rng, n), num(rng, m)
            p = _mk(
                task,
                f"{task}:{split}:{i}",
                f"{a}{symbol}{b}=",
                wrapper,
                str(apply(a, b)),
                task,
                {"split": split, "digits": [n, m]},
            )
            p.metadata["raw"] = True
            out.append(p)
        return out

    return TaskData(task, draw("train", tc), draw("eval", ec), [])


def load_multiplication(entry: Mapping[str, Any], seed: int) -> TaskData:
    """n-digit x m-digit products (``digits = [n, m]``, default [2, 2])."""
    return _two_operand_task(entry, seed, "multiplication", "*", "x", lambda a, b: a * b)


def load_addition(entry: Mapping[str, Any], seed: int) -> TaskData:
    """n-digit + m-digit sums (``digits = [n, m]``, default [2, 2]): too long for a tiny
    model to add in its head, one calculator call away (the ``addition`` verifier scores
    the whole multi-turn trajectory)."""
    return _two_operand_task(entry, seed, "addition", "+", "+", lambda a, b: a + b)


LOADERS: dict[TaskName, Callable[[Mapping[str, Any], int], TaskData]] = {
    "gsm8k": load_gsm8k,
    "math": load_math,
    "ifeval": load_ifeval,
    "code": load_code,
    "multiplication": load_multiplication,
    "arithmetic": load_arithmetic,
    "addition": load_addition,
}


class TaskEntryView(Mapping[str, Any]):
    """A ``[data] tasks`` entry as the loaders take it (a mapping), each value read from
    the section when a loader asks for it, so a run reads only the settings its task uses."""

    def __init__(self, entry: Any, data: DataSection) -> None:
        self._entry = entry
        self._data = data

    def __getitem__(self, key: str) -> Any:
        if key == "prompt_wrapper":
            return self._entry.prompt_wrapper or self._data.prompt_wrapper
        if key not in type(self._entry).model_fields:
            raise KeyError(key)
        return getattr(self._entry, key)

    def __iter__(self) -> Iterator[str]:
        return iter(type(self._entry).model_fields)

    def __len__(self) -> int:
        return len(type(self._entry).model_fields)

    def record(self) -> dict[str, Any]:
        """The whole entry as plain values, for the prepared data's own manifest (which
        keeps every setting the data was prepared with)."""
        return {**self._entry.model_dump(), "prompt_wrapper": self["prompt_wrapper"]}


def task_entries(data: DataSection) -> list[TaskEntryView]:
    """The ``[data] tasks`` entries as the loaders take them, each with its prompt wrapper
    (the compiler fills it from ``data.prompt_wrapper``; a hand-built section may not)."""
    return [TaskEntryView(t, data) for t in data.tasks or []]


def load_task(entry: Mapping[str, Any], seed: int) -> TaskData:
    """Load one ``[data] tasks`` entry."""
    task = entry.get("task")
    if task not in LOADERS:
        raise DataError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    return LOADERS[task](entry, seed)


def load_tasks(
    entries: Sequence[Mapping[str, Any]], seed: int
) -> tuple[list[Prompt], list[Prompt], list[TaskData]]:
    """All entries; prompts carry ``metadata["pool"]`` (entry name) and ``["weight"]``.

    Ids stay unique when one task appears twice (the second pool's ids get ``#<n>``).
    """
    train: list[Prompt] = []
    ev: list[Prompt] = []
    parts: list[TaskData] = []
    seen: dict[str, int] = {}
    for entry in entries:
        data = load_task(entry, seed)
        task = data.task
        k = seen.get(task, 0)
        seen[task] = k + 1
        pool = task if k == 0 else f"{task}#{k}"
        weight = float(entry.get("weight", 1.0) if entry.get("weight") is not None else 1.0)
        if weight <= 0:
            raise DataError(f"task {pool}: weight must be > 0, got {weight}")
        for src, dst in ((data.train, train), (data.eval, ev)):
            for p in src:
                p.metadata["pool"] = pool
                p.metadata["weight"] = weight
                dst.append(
                    p
                    if k == 0
                    else Prompt(f"{p.id}#{k}", p.task, p.messages, p.target, p.verifier, p.metadata)
                )
        parts.append(data)
    return train, ev, parts
