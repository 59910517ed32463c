"""The consumption registry that `rlc explain` shows covers every spec field, and every
consumer it names exists and mentions the field. This keeps the explanation navigable; it
is not the contract that a field takes effect: tests/unit/test_field_effects.py perturbs
every field and checks what runs (or the diagnostic at it)."""

from __future__ import annotations

import importlib
import inspect
import re
import types
import typing
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from compiler.spec import Spec
from compiler.spec.consumers import CONSUMERS

RULES = Path(__file__).resolve().parents[2] / "schemas" / "rules"
KINDS = ("runtime", "cli", "argv", "beaker", "template", "compile", "rule", "owner")


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The section models an annotation holds (through Optional, unions and Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _models(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [m for a in typing.get_args(annotation) for m in _models(a)]
    return []


def _walk(model: type[BaseModel], prefix: str) -> Iterator[str]:
    for name, f in model.model_fields.items():
        key = prefix + (f.alias or name)
        ann = f.annotation
        if typing.get_origin(ann) in (typing.Union, types.UnionType):
            present = [a for a in typing.get_args(ann) if a is not type(None)]
            ann = present[0] if len(present) == 1 else ann
        origin, args = typing.get_origin(ann), typing.get_args(ann)
        if origin is list and args and _models(args[0]):
            yield key
            for sub in _models(args[0]):
                yield from _walk(sub, key + ".[].")
        elif origin is dict and args and _models(args[1]):
            yield key
            for sub in _models(args[1]):
                yield from _walk(sub, key + ".*.")
        elif subs := _models(f.annotation):
            for sub in subs:
                yield from _walk(sub, key + ".")
        else:
            yield key


@cache
def spec_fields() -> frozenset[str]:
    return frozenset(_walk(Spec, ""))


def test_walk_sees_nested_and_variant_fields() -> None:
    fields = spec_fields()
    for expected in (
        "data.tasks.[].task",
        "judges.*.endpoint",
        "judges.*.prepared_dir",
        "rewards.length_penalty.coef",
        "launch.coordination.startup_timeout",
    ):
        assert expected in fields


def test_every_field_has_a_consumer() -> None:
    missing = sorted(spec_fields() - set(CONSUMERS))
    assert not missing, f"spec fields with no consumer in compiler/spec/consumers.py: {missing}"


def test_no_entry_for_a_field_that_does_not_exist() -> None:
    stale = sorted(set(CONSUMERS) - spec_fields())
    assert not stale, f"registry entries for unknown fields: {stale}"


def _entries() -> list[tuple[str, str, str]]:
    out = []
    for path, uses in sorted(CONSUMERS.items()):
        assert uses, f"{path}: empty entry"
        for use in uses:
            kind, _, rest = use.partition(":")
            out.append((path, kind, rest))
    return out


@cache
def _rule_ids() -> dict[str, str]:
    """Rule id -> its text, from the rule files (``rule ID`` starts a block)."""
    out: dict[str, str] = {}
    for f in sorted(RULES.glob("*.rules")):
        for block in re.split(r"(?m)^(?=rule )", f.read_text()):
            if block.startswith("rule "):
                out[block.split()[1]] = block
    return out


@pytest.mark.parametrize(("path", "kind", "target"), _entries())
def test_consumer_is_real(path: str, kind: str, target: str) -> None:
    assert kind in KINDS, f"{path}: unknown use kind {kind!r}"
    leaf = [p for p in path.split(".") if p not in ("[]", "*")][-1]
    if kind in ("compile", "owner"):
        assert len(target.split()) >= 4, f"{path}: a {kind} entry needs a reason"
        return
    if kind == "rule":
        rules = _rule_ids()
        assert target in rules, f"{path}: rule {target!r} is not defined"
        assert leaf in rules[target], f"rule {target} does not mention {path}"
        return
    if kind == "template":
        text = (RULES.parents[1] / target).read_text()
        assert re.search(rf"\b{re.escape(leaf)}\b", text), f"{path}: {target} lacks {leaf!r}"
        return
    module, _, qualname = target.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if isinstance(obj, property):
        obj = obj.fget
    source = inspect.getsource(obj)
    assert re.search(rf"\b{re.escape(leaf)}\b", source), f"{path}: {target} does not read {leaf!r}"


_SECTIONS = (
    "model|data|output|launch|training|trainer|inference|optimizer|async|checkpoint|rewards|"
    "judges|rubrics|judging|evaluation|tracking|compiler_cache|runtime|native"
)


def test_rule_texts_name_only_fields_that_exist() -> None:
    """Messages and help lines point users at real fields (a renamed field is caught)."""
    fields = spec_fields()
    prefixes = {".".join(f.split(".")[:i]) for f in fields for i in range(1, f.count(".") + 2)}
    bad = []
    for rule_id, text in sorted(_rule_ids().items()):
        for line in text.splitlines():
            line = line.strip()
            if not line.startswith(("error ", "warning ", "help ")):
                continue
            for ref in re.findall(
                rf"(?<![\w.{{])(?:{_SECTIONS})\.[a-z_][a-z0-9_.]*[a-z0-9_]", line
            ):
                parts = [p for p in ref.split(".") if p]
                candidates = {
                    ".".join(parts),
                    ".".join(p if i != 1 else "*" for i, p in enumerate(parts)),
                    ".".join(parts[:1] + ["[]"] + parts[1:]),
                }
                if not candidates & prefixes:
                    bad.append(f"{rule_id}: {ref}")
    assert not bad, f"rule texts name fields that do not exist: {bad}"
