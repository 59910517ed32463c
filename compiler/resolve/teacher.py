"""Resolution of the on-policy distillation teacher: its derived settings and what its
checkpoint says at compile time (loadable? same tokenizer as the student? how large?).

Everything here is skipped unless ``training.algorithm = "opd"`` with a ``teacher.source``:
a GRPO manifest carries the two sections with their defaults and nothing derived.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

from compiler.resolve.builtin_shape import DIGIT_BUILTINS, builtin_info

# the facts a teacher contributes (also replayed by `rlc lint --rederive`)
TEACHER_FACTS = (
    "teacher_source_problem",
    "teacher_tokenizer_mismatch",
    "teacher_vocab_mismatch",
    "teacher_source_shape",
)


class _Deriver(Protocol):
    config: dict[str, Any]

    def derive(self, path: str, value: Any, formula: str, inputs: tuple[str, ...]) -> None: ...


def active(config: dict[str, Any]) -> bool:
    """The run distils from a teacher (placed, started and scored by the runtime)."""
    return config["training"]["algorithm"] == "opd" and bool(config["teacher"]["source"])


def derive_teacher(r: _Deriver) -> None:
    """Fill the teacher's unset settings from the student's (only for an OPD run)."""
    c = r.config
    if not active(c):
        return
    t, inf = c["teacher"], c["inference"]
    builtin = str(t["source"]).startswith("builtin:")
    r.derive(
        "teacher.format",
        "builtin" if builtin else "hf",
        "'builtin' if teacher.source starts with 'builtin:' else 'hf'",
        ("teacher.source",),
    )
    r.derive("teacher.engine", inf["engine"], "inference.engine", ("inference.engine",))
    gpu = c["trainer"]["gpus"] > 0
    r.derive("teacher.gpus", 1 if gpu else 0, "1 on a GPU run, 0 on a CPU run", ("trainer.gpus",))
    r.derive("teacher.dtype", c["model"]["dtype"], "model.dtype", ("model.dtype",))
    r.derive(
        "teacher.max_context_length",
        inf["max_context_length"] + 1,
        "inference.max_context_length + 1",
        ("inference.max_context_length",),
    )
    r.derive("teacher.mem_fraction_static", 0.8, "0.8 (dedicated GPUs)", ())
    r.derive("teacher.seed", inf["seed"] + 1, "inference.seed + 1", ("inference.seed",))


def teacher_facts(
    config: dict[str, Any],
    student_info: dict[str, Any],
    student_shape: dict[str, Any],
    replay: dict[str, Any] | None = None,
    *,
    written: str = "",
) -> dict[str, Any]:
    """``teacher_*`` facts: why the runtime cannot load the teacher, why its tokenizer is not
    the student's ("" when fine or not knowable here), and its shape (sizes the memory
    estimate reads). ``replay``: the facts of the compile (re-derivation elsewhere).
    ``written``: teacher.source as the spec wrote it (a missing ``owner/name`` is a Hub id,
    as for model.source)."""
    empty: dict[str, Any] = {k: "" for k in TEACHER_FACTS}
    empty["teacher_source_shape"] = {}
    if not active(config):
        return empty
    if replay is not None:
        return {k: replay.get(k, empty[k]) for k in TEACHER_FACTS}
    from compiler.spec import model_source

    t, m = config["teacher"], config["model"]
    source = str(t["source"])
    # the teacher scores the student's token ids: its own chat template is never rendered
    info = model_source.inspect(
        source,
        t["format"],
        t["hf_template"],
        written or source,
        fresh=False,
        needs_template=False,
    )
    shape = builtin_info(source) if source.startswith("builtin:") else dict(info.shape)
    tokenizers, vocabs = _mismatch(m, t, student_info or student_shape, shape)
    return {
        "teacher_source_problem": info.problem,
        "teacher_tokenizer_mismatch": tokenizers,
        "teacher_vocab_mismatch": vocabs,
        "teacher_source_shape": {
            k: int(v) for k, v in shape.items() if isinstance(v, int) and not isinstance(v, bool)
        },
    }


def _tokenizer(model: dict[str, Any]) -> str:
    """What names a checkpoint's tokenizer at compile time ("" when not knowable)."""
    from compiler.spec.model_source import tokenizer_model

    source = str(model["source"])
    if source.startswith("builtin:"):
        base = source.removeprefix("builtin:").partition("?")[0]
        return "builtin digit tokenizer" if base in DIGIT_BUILTINS else "builtin text tokenizer"
    where = model.get("hf_template") if model.get("format") == "olmo_core" else source
    if not where or not os.path.isdir(str(where)):
        return ""
    digest = tokenizer_model(str(where))
    return f"tokenizer.json {digest[:12]}" if digest else ""


def _mismatch(
    student: dict[str, Any],
    teacher: dict[str, Any],
    student_shape: dict[str, Any],
    teacher_shape: dict[str, Any],
) -> tuple[str, str]:
    """(the tokenizers differ, the vocabulary sizes differ where the tokenizers could not
    be compared): each "" when not so."""
    sv, tv = student_shape.get("vocab"), teacher_shape.get("vocab")
    st, tt = _tokenizer(student), _tokenizer(teacher)
    comparable = bool(st and tt) and st.split(" ")[0] == tt.split(" ")[0]
    if comparable:
        return ("" if st == tt else f"the student uses the {st}, the teacher the {tt}"), ""
    if sv and tv and int(sv) != int(tv):
        return "", f"the student's vocabulary has {sv} entries, the teacher's {tv}"
    return "", ""
