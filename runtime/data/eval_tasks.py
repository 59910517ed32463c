"""Held-out evaluation prompts: olmo-eval task names, ``[data] eval`` sets, held-out splits.

Background evaluation names its tasks as olmo-eval does (``gsm8k``, ``minerva_math_500``,
``ifeval``, ``codex_humaneval``, optionally with a ``::suffix`` such as ``::tulu``). The
ones whose data rlc ships (``runtime/data/datasets``, or ``RLC_DATA_ROOT``) map onto our loaders and
verifiers; any other name is refused with the list of known ones, never skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from contract.spec.data import DataSection
from runtime.data.records import Prompt
from runtime.data.tasks import (
    DataError,
    _default_path,
    load_task,
    load_tasks,
    read_jsonl,
    task_entries,
)

# olmo-eval name (before any "::suffix") -> our task
EVAL_TASK_ALIASES: dict[str, str] = {
    "gsm8k": "gsm8k",
    "minerva_math_500": "math",
    "math500": "math",
    "math_500": "math",
    "ifeval": "ifeval",
    "humaneval": "code",
    "codex_humaneval": "code",
}

# the held-out file of each task's default data directory
_EVAL_FILES: dict[str, tuple[str, ...]] = {
    "gsm8k": ("test.jsonl",),
    "math": ("test.jsonl",),
    "ifeval": ("input_data.jsonl", "test.jsonl"),
    "code": ("HumanEval.jsonl.gz", "test.jsonl", "test.jsonl.gz"),
}


def known_eval_tasks() -> list[str]:
    return sorted(EVAL_TASK_ALIASES)


def eval_task_kind(name: str) -> str:
    """Our task for an olmo-eval task name (raises `DataError` for an unknown one)."""
    base = name.split("::", 1)[0].strip().lower()
    if base not in EVAL_TASK_ALIASES:
        raise DataError(
            f"unknown evaluation task {name!r}; rlc evaluates {', '.join(known_eval_tasks())} "
            "(optionally with a ::suffix)"
        )
    return EVAL_TASK_ALIASES[base]


def _eval_file(kind: str) -> Path:
    root = _default_path(kind)
    if root.is_file():
        return root
    for cand in _EVAL_FILES[kind]:
        if (root / cand).is_file():
            return root / cand
    raise DataError(f"no held-out file for {kind} in {root} (looked for {_EVAL_FILES[kind]})")


def load_eval_task(name: str, seed: int, limit: int | None = None) -> list[Prompt]:
    """Every held-out prompt of an olmo-eval task (file order), or the first ``limit``."""
    kind = eval_task_kind(name)
    path = _eval_file(kind)
    rows = sum(1 for _ in read_jsonl(path))
    count = rows if limit is None else min(int(limit), rows)
    if count < 1:
        raise DataError(f"evaluation task {name!r}: {path} holds no prompts")
    data = load_task({"task": kind, "path": str(path), "eval_count": rows}, seed)
    out = []
    for p in data.eval[:count]:
        p.metadata["pool"] = name
        out.append(p)
    return out


def load_eval_set(name: str, path: str | Path) -> list[Prompt]:
    """A ``[data] eval`` set: a JSONL of prepared prompts (`Prompt` records)."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"data.eval {name!r}: {p} does not exist")
    out = []
    for i, row in enumerate(read_jsonl(p), 1):
        missing = [k for k in ("id", "messages", "verifier") if k not in row]
        if missing:
            raise DataError(f"{p}:{i}: eval prompt lacks {', '.join(missing)}")
        row.setdefault("task", name)
        try:
            prompt = Prompt.from_json(row)
        except (TypeError, ValueError, KeyError) as exc:
            raise DataError(f"{p}:{i}: not a prompt record: {exc}") from None
        prompt.metadata["pool"] = name
        out.append(prompt)
    if not out:
        raise DataError(f"data.eval {name!r}: {p} holds no prompts")
    return out


def held_out_prompts(data: DataSection) -> list[Prompt]:
    """The shared-evaluation pool: each task's held-out split plus the ``[data] eval`` sets."""
    entries = task_entries(data)
    out: list[Prompt] = []
    if entries and any(e.get("eval_count") for e in entries):
        _train, ev, _parts = load_tasks(entries, data.seed)
        out.extend(ev)
    for es in data.eval:
        out.extend(load_eval_set(es.name, es.path))
    return out


def pools(prompts: Sequence[Prompt]) -> list[str]:
    """Pool names in first-seen order (one metrics block each)."""
    seen: dict[str, None] = {}
    for p in prompts:
        seen.setdefault(str(p.metadata.get("pool", p.task)), None)
    return list(seen)
