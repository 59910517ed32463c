"""Every spec field has an effect or a diagnostic: perturb it, compile, compare what runs.

For each field of the schema, the quickstart spec is compiled with the field set to another
valid value; the effective view (``rlc plan --effective``: the typed settings every
component receives and every process's argv/env) must change, or a diagnostic must point
at the perturbed value (a warning that says why it has no effect there). A field that can
do neither here is listed in ``EXEMPT`` with the reason.

The typed settings are the whole resolved spec, so a perturbed value always changes them;
a setting counts only if a real run READ it: the quickstart runs once per test run with
``RLC_RECORD_READS`` (tests/unit/recorded_reads.py), which records every spec field any of
its processes reads. Of the 245 fields, 170 have a runtime reader in the consumer
registry; 44 of those are read only where no CPU run goes (async rollouts, distillation,
Beaker evaluation, judges, other tasks' loaders, ahead-of-time preparation) and
count on the registry's word: each is listed in ``NOT_RECORDED`` with its reason.
`test_every_runtime_reader_the_quickstart_reaches_was_seen_reading` fails on a claimed
reader the recorded run never saw read.
"""

from __future__ import annotations

import os
import sys
import types
import typing
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import recorded_reads
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
    return manifest["config"], effective(manifest, "{manifest}")


# the spec fields the recorded quickstart run read (see `_recording` and `_reads`)
READS: set[str] = set()
_RECORDED: list[Callable[[], dict[str, set[str]]]] = []


@pytest.fixture(scope="session", autouse=True)
def _recording(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Start the recorded quickstart; it runs while fields whose effect shows outside the
    typed settings (plan, command lines, components) are checked without it."""
    _RECORDED.append(recorded_reads.start(tmp_path_factory))


def _reads() -> set[str]:
    """The recorded reads, once the recorded run has finished."""
    while _RECORDED:
        READS.update(_RECORDED.pop()()["read"])
    return READS


def _runtime_claimed(key: str) -> bool:
    """The consumer registry names a runtime reader of ``key``."""
    return any(use.startswith("runtime:") for use in CONSUMERS.get(key, ()))


def _counted(key: str) -> bool:
    """A setting counts as an effect when a recorded run read it, or, for the fields no
    CPU run reaches (`NOT_RECORDED`, each with its reason), when the registry claims a
    runtime reader of it."""
    return key in _reads() or (key in NOT_RECORDED and _runtime_claimed(key))


_DROP = object()


def _kept(value: Any, path: str) -> Any:
    """``value`` (the settings at spec path ``path``) with only the fields that count."""
    if path in fields():
        return value if _counted(path) else _DROP
    if isinstance(value, dict):
        entries = any(f.startswith(path + ".*.") for f in fields())
        kept = {
            k: _kept(v, path + ".*" if entries else (f"{path}.{k}" if path else k))
            for k, v in value.items()
        }
        return {k: v for k, v in kept.items() if v is not _DROP}
    if isinstance(value, list):
        return [_kept(v, path + ".[]") for v in value]
    return value if _counted(path) else _DROP


def _observed(view: dict[str, Any]) -> dict[str, Any]:
    """The view as this check compares it: the typed settings are the whole contract (every
    section a component receives), so only the fields a recorded run READ count there; the
    rest shows through the plan, the processes' command lines, the components' own derived
    settings or not at all."""
    settings = {}
    for section, value in view["settings"].items():
        if section in ("plan", "paths", "judge_bindings", "teacher"):
            settings[section] = value
        else:
            kept = _kept(value, section)
            if kept is not _DROP:
                settings[section] = kept
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


def _outside_settings(view: dict[str, Any]) -> dict[str, Any]:
    """What the view shows besides the spec sections: the processes, the components'
    derived settings, and the plan, paths and joins of the typed settings."""
    joined = ("plan", "paths", "judge_bindings", "teacher")
    return {**view, "settings": {k: view["settings"].get(k) for k in joined}}


def effect_of(path: str) -> str:
    """ "effect", "diagnostic" (a warning at the value, or every other value refused at it),
    or why neither was seen (over the bases, in order). An effect outside the typed
    settings is looked for first: it needs no recorded reads."""
    if ".*." in path:
        return "no entry in the base specs"
    variants: dict[tuple[str, str], Variant] = {}  # each variant compiled once
    outcome = _scan(path, _outside_settings, variants)
    if outcome in ("effect", "diagnostic"):
        return outcome
    return _scan(path, _observed, variants)


def _scan(
    path: str,
    seen_as: Callable[[dict[str, Any]], dict[str, Any]],
    variants: dict[tuple[str, str], Variant],
) -> str:
    override_path = path.replace(".[].", ".0.")
    refused = False
    for base in BASES:
        config, full = _base(base)
        view = seen_as(full)
        tried = 0
        values = TABLE_VALUES.get(path) or tuple(
            _toml(v) for v in candidates(fields()[path], _lookup(config, override_path))
        )
        for value in values:
            key = (base, f"{override_path}={value}")
            if key not in variants:
                variants[key] = Variant(_compile(*key))
            variant = variants[key]
            result = variant.result
            at_value = [d for d in result.diagnostics if d.span and d.span.source == PERTURBED]
            if result.errors:
                refused = refused or any(d.severity == "error" for d in at_value)
                continue
            tried += 1
            if at_value:
                return "diagnostic"
            try:
                seen = seen_as(variant.view())
            except ContractError:  # a derived value outside the spec's bounds: the runtime
                return "effect"  # refuses the manifest before anything starts
            if seen != view:
                return "effect"
        if tried:
            return "no effect"
    return "diagnostic" if refused else "no valid other value"


class Variant:
    """One perturbed compile and its effective view, built once (may raise ContractError)."""

    def __init__(self, result: CompileResult) -> None:
        self.result = result
        self._view: dict[str, Any] | None = None

    def view(self) -> dict[str, Any]:
        if self._view is None:
            self._view = effective(self.result.manifest(), "{manifest}")
        return self._view


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
            "judges.*.engine",
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


# Fields whose runtime readers the recorded CPU quickstart never reaches: they count as an
# effect on the consumer registry's word alone (a claim, not an observation), so each says
# why no recorded run can read it and where it is exercised instead.
_ASYNC = "read only with async.enabled; the recorded quickstart is synchronous (tests/e2e/test_runtime_refresh.py runs async)"
_DISTILL = (
    "read only by training.algorithm = 'opd', which needs a teacher server (tests/e2e/test_opd.py)"
)
_BACKGROUND = (
    "background evaluation submits Beaker jobs, which no CPU run does (tests/unit/test_evaluate.py)"
)
_PREPARE = "read when data is prepared ahead of the run (rlc prepare), which a builtin task skips (tests/unit/test_data_manifest.py)"
_OTHER_TASK = "read only by the task or verifier it names; the quickstart's task is arithmetic"
_JUDGE_READ = (
    "read by judge-scored rewards, which need a judge server and a judge table no CPU base spec has"
)
NOT_RECORDED: dict[str, str] = {
    **{f"async.{k}": _ASYNC for k in ("max_policy_lag", "off_policy_correction", "producer_budget", "publication_mode", "unused_sample_handler")},
    **{f"distillation.{k}": _DISTILL for k in ("coef", "loss", "reward_weight")},
    **{f"teacher.{k}": _DISTILL for k in ("max_running_requests", "source")},
    **{f"evaluation.{k}": _BACKGROUND for k in ("initial", "interval", "server_args", "submit_timeout", "workspace", "tasks.[].generation", "tasks.[].interval", "tasks.[].scoring", "tasks.[].task")},
    "name": _BACKGROUND,
    "model.format": "read by the preparation step that converts an HF checkpoint; a builtin model needs none (tests/unit/test_model_source.py)",
    "output.root": _PREPARE,
    "inference.max_prompt_length": _PREPARE,
    "data.reward_config": _PREPARE,
    "data.eval.[].name": "read by [[data.eval]] sets, which the quickstart has none of (tests/unit/test_eval_tasks.py)",
    "data.eval.[].path": "read by [[data.eval]] sets, which the quickstart has none of (tests/unit/test_eval_tasks.py)",
    "data.prompt_wrapper": "the compiler copies it into every data.tasks entry; read only for a hand-built section",
    **{f"data.tasks.[].{k}": _OTHER_TASK for k in ("digits", "path")},
    **{f"rewards.{k}": _OTHER_TASK for k in ("ifeval.aggregate", "ifeval.strict", "math.equivalence", "math.timeout_s")},
    **{p: _JUDGE_READ for p in ("judges.*.chat_template", "judges.*.endpoint", "judges.*.max_concurrent_calls", "judges.*.mode", "judges.*.model", "judges.*.timeout", "judging.bindings.*.judge", "judging.bindings.*.rubric", "rubrics.*.max_response_tokens", "rubrics.*.profile", "rubrics.*.temperature")},
}  # fmt: skip


def test_every_runtime_reader_the_quickstart_reaches_was_seen_reading() -> None:
    """A field the registry says the runtime reads was read by the recorded quickstart,
    unless it is listed in `NOT_RECORDED` with why no CPU run reaches its reader."""
    claimed = {path for path in fields() if _runtime_claimed(path)}
    unseen = sorted(claimed - _reads() - set(NOT_RECORDED))
    assert not unseen, f"claimed runtime readers never read these in the recorded run: {unseen}"
    stale = sorted(set(NOT_RECORDED) & _reads())
    assert not stale, f"recorded as read, so no longer NOT_RECORDED: {stale}"
    assert set(NOT_RECORDED) <= claimed, "NOT_RECORDED lists a field without a runtime reader"
    assert all(len(reason.split()) >= 5 for reason in NOT_RECORDED.values())
    counts = f"Of the {len(fields())} fields, {len(claimed)} have a runtime reader"
    assert counts in " ".join((__doc__ or "").split()), "update the counts in the docstring"
    assert f"; {len(NOT_RECORDED)} of those" in (__doc__ or "")


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


if __name__ == "__main__":  # print the outcome of every field; argv[1]: a recorded reads dir
    sys.path.insert(0, str(ROOT))
    from runtime.record_reads import load

    READS.update(load(sys.argv[1])["read"] if len(sys.argv) > 1 else ())
    for p in sorted(fields()):
        print(f"{effect_of(p):22} {p}")
