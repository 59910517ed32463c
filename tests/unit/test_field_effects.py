"""Every spec field has an effect or a diagnostic: perturb it, compile, compare what runs.

For each field of the schema, the quickstart spec is compiled with the field set to another
valid value; the effective view (``rlc plan --effective``: the typed settings every
component receives and every process's argv/env) must change, or a diagnostic must point
at the perturbed value (a warning that says why it has no effect there). A field that can
do neither here is listed in ``EXEMPT`` with the reason.
"""

from __future__ import annotations

import os
import sys
import types
import typing
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from test_consumers import _models

from compiler.pipeline import CompileResult, compile_spec
from compiler.spec import Spec
from compiler.spec.consumers import CONSUMERS
from contract.run import ContractError
from runtime.effective import effective

ROOT = Path(__file__).resolve().parents[2]
# the quickstart first; fields whose other values need GPUs, MoE or async use the next
BASES = (
    "specs/examples/quickstart.toml",
    "specs/examples/gpu-dense.toml",
    "specs/examples/moe-async.toml",
)
PERTURBED = "override 1"  # diagnostics at the perturbation point at this source


def _leaves(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, FieldInfo]]:
    """(dotted path, field) of every scalar field; list entries as ``[]``, map values ``*``."""
    for name, f in model.model_fields.items():
        key = prefix + (f.alias or name)
        ann = f.annotation
        present = [a for a in typing.get_args(ann) if a is not type(None)]
        if typing.get_origin(ann) in (typing.Union, types.UnionType) and len(present) == 1:
            ann = present[0]
        origin, args = typing.get_origin(ann), typing.get_args(ann)
        if origin is list and args and _models(args[0]):
            for sub in _models(args[0]):
                yield from _leaves(sub, key + ".[].")
        elif origin is dict and args and _models(args[1]):
            for sub in _models(args[1]):
                yield from _leaves(sub, key + ".*.")
        elif subs := _models(f.annotation):
            for sub in subs:
                yield from _leaves(sub, key + ".")
        else:
            yield key, f


@cache
def fields() -> dict[str, FieldInfo]:
    return dict(_leaves(Spec, ""))


def _compile(base: str, *overrides: str) -> CompileResult:
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return compile_spec(base, list(overrides))
    finally:
        os.chdir(cwd)


@cache
def _base(base: str) -> tuple[dict[str, Any], dict[str, Any]]:
    result = _compile(base)
    assert not result.errors
    manifest = result.manifest()
    return manifest["config"], _observed(effective(manifest, "{manifest}"))


def _runtime_read(key: str) -> bool:
    """The consumer registry names a runtime reader of ``key`` or of a field under it
    (tests/unit/test_consumers.py checks each reader mentions the field)."""
    return any(
        use.startswith("runtime:")
        for path, uses in CONSUMERS.items()
        if path == key or path.startswith(key + ".")
        for use in uses
    )


def _observed(view: dict[str, Any]) -> dict[str, Any]:
    """The view as this check compares it: the typed settings are the whole contract (every
    section a component receives), so only the fields a runtime reader reads count there;
    the rest shows through the plan, the processes' command lines or not at all."""
    settings = {}
    for section, value in view["settings"].items():
        if section in ("plan", "paths", "judge_bindings", "teacher"):
            settings[section] = value
        elif isinstance(value, dict):
            settings[section] = {k: v for k, v in value.items() if _runtime_read(f"{section}.{k}")}
        elif _runtime_read(section):
            settings[section] = value
    return {**view, "settings": settings}


def _lookup(config: dict[str, Any], path: str) -> Any:
    node: Any = config
    for part in path.split("."):
        if isinstance(node, list):
            node = node[int(part)] if node else None
        elif isinstance(node, dict):
            node = node.get(part)
        else:
            return None
    return node


def _bounds(f: FieldInfo) -> tuple[float | None, float | None]:
    lo = hi = None
    for m in f.metadata:
        lo = getattr(m, "ge", lo) if getattr(m, "ge", None) is not None else lo
        if getattr(m, "gt", None) is not None:
            lo = m.gt
        hi = getattr(m, "le", hi) if getattr(m, "le", None) is not None else hi
        if getattr(m, "lt", None) is not None:
            hi = m.lt
    return lo, hi


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


def candidates(f: FieldInfo, current: Any) -> list[Any]:
    """Other valid-looking values of the field's type, nearest first."""
    ann = f.annotation
    args = [a for a in typing.get_args(ann) if a is not type(None)]
    kinds = args if typing.get_origin(ann) in (typing.Union, types.UnionType) else [ann]
    lo, hi = _bounds(f)
    out: list[Any] = []
    for kind in kinds:
        if typing.get_origin(kind) is typing.Literal:
            out += [c for c in typing.get_args(kind) if c != current]
        elif kind is bool:
            out.append(not current if isinstance(current, bool) else True)
        elif kind is int:
            base = current if isinstance(current, int) and not isinstance(current, bool) else None
            picks = [1, 2, 8, 64] if base is None else [base + 1, base - 1, base * 2, base + 64]
            out += [int(v) for v in (*picks, lo, hi) if v is not None]
        elif kind is float:
            base = float(current) if isinstance(current, int | float) else None
            picks = [0.5, 0.1, 1.0] if base is None else [base * 2, base / 2, base + 0.1, 0.5, 1e-4]
            out += [float(v) for v in (*picks, lo, hi) if v is not None]
        elif kind is str:
            out += ["other", "2h", "http://127.0.0.1:9/v1", "runs/elsewhere", "builtin:tiny"]
        elif typing.get_origin(kind) is list:
            out += [[], ["--enable-metrics"]]
    seen: list[Any] = []
    for v in out:
        ok = (lo is None or v >= lo) and (hi is None or v <= hi) if _number(v) else True
        if ok and v != current and v not in seen:
            seen.append(v)
    return seen


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


# TOML values for fields whose type the generic candidates do not cover (tables)
TABLE_VALUES: dict[str, tuple[str, ...]] = {
    "native.sglang": ("{enable_metrics = true}",),
    "native.olmo_core": ('{dp_config = {name = "fsdp"}}', "{compile_model = true}"),
    "launch.env": ('{RLC_EXAMPLE = "1"}',),
    "launch.secrets": ('{HF_TOKEN = "hf-token-secret"}',),
}


def effect_of(path: str) -> str:
    """ "effect", "diagnostic" (a warning at the value, or every other value refused at it),
    or why neither was seen (over the bases, in order)."""
    if ".*." in path:
        return "no entry in the base specs"
    override_path = path.replace(".[].", ".0.")
    refused = False
    for base in BASES:
        config, view = _base(base)
        tried = 0
        values = TABLE_VALUES.get(path) or tuple(
            _toml(v) for v in candidates(fields()[path], _lookup(config, override_path))
        )
        for value in values:
            result = _compile(base, f"{override_path}={value}")
            at_value = [d for d in result.diagnostics if d.span and d.span.source == PERTURBED]
            if result.errors:
                refused = refused or any(d.severity == "error" for d in at_value)
                continue
            tried += 1
            if at_value:
                return "diagnostic"
            try:
                seen = _observed(effective(result.manifest(), "{manifest}"))
            except ContractError:  # a derived value outside the spec's bounds: the runtime
                return "effect"  # refuses the manifest before anything starts
            if seen != view:
                return "effect"
        if tried:
            return "no effect"
    return "diagnostic" if refused else "no valid other value"


# Fields whose effect this check cannot see, each with the reason (and where it is tested).
_BEAKER = (
    "a Beaker job setting: its effect is the job spec `rlc compile` writes (beaker/*.yaml: "
    "tests/golden snapshots, tests/unit/test_emit_beaker.py), not a setting of the run's processes"
)
_JUDGES = (
    "an entry of a judge/rubric table, which no base spec has: judge bindings are typed "
    "settings (RunConfig.judge_bindings) shown by tests/unit/test_judge_wiring.py and "
    "tests/unit/test_managed_judges.py"
)
EXEMPT: dict[str, str] = {
    "description": "free text for people, kept in the manifest; nothing is meant to run differently",
    "schema_version": "has exactly one valid value (1)",
    "evaluation.tasks.[].generation": "an [[evaluation.tasks]] entry exists only with "
    "background evaluation, which needs a Beaker image; its settings reach EvalTaskConfig "
    "(tests/unit/test_evaluate.py)",
    "evaluation.tasks.[].scoring": "an [[evaluation.tasks]] entry exists only with "
    "background evaluation, which needs a Beaker image; its settings reach EvalTaskConfig "
    "(tests/unit/test_evaluate.py)",
    "training.save_checkpoints": "every base spec sets checkpoint.interval, which "
    "save_checkpoints = false refuses (rule save-interval-without-saving); the value itself "
    "is TrainingConfig.save_checkpoints",
    **{
        f"launch.{k}": _BEAKER
        for k in (
            "auto_resume",
            "budget",
            "cluster",
            "env",
            "gpus_per_replica",
            "image",
            "max_retries",
            "min_runtime",
            "priority",
            "secrets",
            "timeout",
        )
    },  # fmt: skip
    **{
        p: _JUDGES
        for p in (
            "judges.*.chat_template",
            "judges.*.context_extension",
            "judges.*.endpoint",
            "judges.*.gpus",
            "judges.*.max_concurrent_calls",
            "judges.*.max_context_length",
            "judges.*.mode",
            "judges.*.model",
            "judges.*.prepared_dir",
            "judges.*.revision",
            "judges.*.timeout",
            "judging.bindings.*.judge",
            "judging.bindings.*.rubric",
            "rubrics.*.max_response_tokens",
            "rubrics.*.profile",
            "rubrics.*.temperature",
        )
    },  # fmt: skip
}


@pytest.mark.parametrize("path", sorted(fields()))
def test_field_has_an_effect_or_a_diagnostic(path: str) -> None:
    outcome = effect_of(path)
    if path in EXEMPT:
        assert outcome not in ("effect", "diagnostic"), f"{path}: no longer needs its exemption"
        return
    assert outcome in ("effect", "diagnostic"), f"{path}: {outcome}"


def test_every_exemption_names_a_field_and_a_reason() -> None:
    assert set(EXEMPT) <= set(fields())
    assert all(len(reason.split()) >= 5 for reason in EXEMPT.values())


if __name__ == "__main__":  # print the outcome of every field
    sys.path.insert(0, str(ROOT))
    for p in sorted(fields()):
        print(f"{effect_of(p):22} {p}")
