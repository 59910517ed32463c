"""The field catalog: every spec field with its type, default, doc, aliases and derivation.

Built from the pydantic models in `compiler.spec`, so docs, `rlc explain FIELD` and the
JSON Schema can never disagree with what the binder accepts. Map sections (``judges.NAME``,
``rubrics.NAME``, ``judging.bindings.VERIFIER``) appear with an upper-case placeholder.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, replace
from functools import cache
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined


@dataclass(frozen=True)
class FieldDoc:
    path: str
    section: str
    type: str
    required: bool
    default: Any
    description: str
    note: str | None
    aliases: tuple[str, ...]
    derived: str | None
    choices: tuple[Any, ...]
    constraints: tuple[str, ...]


_CONSTRAINT_NAMES = {
    "ge": ">=",
    "gt": ">",
    "le": "<=",
    "lt": "<",
    "min_length": "min length",
    "max_length": "max length",
    "pattern": "matches",
}


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is typing.Annotated:
        return _type_name(get_args(tp)[0])
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp)).replace("'", '"')
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in get_args(tp))
    if origin is list:
        (inner,) = get_args(tp) or (Any,)
        return f"array of {_type_name(inner)}"
    if origin is dict:
        args = get_args(tp) or (str, Any)
        return f"table of {_type_name(args[1])}"
    if tp is type(None):
        return "unset"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return "table"
    names = {str: "string", int: "integer", float: "float", bool: "boolean"}
    if tp in names:
        return names[tp]
    return getattr(tp, "__name__", str(tp))


def _choices(tp: Any) -> tuple[Any, ...]:
    origin = get_origin(tp)
    if origin is typing.Annotated:
        return _choices(get_args(tp)[0])
    if origin is Literal:
        return tuple(get_args(tp))
    if origin in (typing.Union, types.UnionType):
        out: list[Any] = []
        for a in get_args(tp):
            out.extend(_choices(a))
        return tuple(out)
    return ()


def _constraints(info: FieldInfo) -> tuple[str, ...]:
    out = []
    for meta in info.metadata:
        for attr, label in _CONSTRAINT_NAMES.items():
            value = getattr(meta, attr, None)
            if value is not None:
                out.append(f"{label} {value}")
    return tuple(out)


def _models(tp: Any, container: type | None = None) -> list[type[BaseModel]]:
    """Models in an annotation: directly (``container=None``), as ``dict`` values, or as
    ``list`` items; through ``Annotated`` and unions."""
    origin = get_origin(tp)
    if origin is typing.Annotated:
        return _models(get_args(tp)[0], container)
    if origin in (typing.Union, types.UnionType):
        return [m for a in get_args(tp) for m in _models(a, container)]
    if container is None:
        return [tp] if isinstance(tp, type) and issubclass(tp, BaseModel) else []
    if origin is container and get_args(tp):
        return _models(get_args(tp)[-1])
    return []


def _submodels(tp: Any) -> list[type[BaseModel]]:
    return _models(tp)


def _map_value_models(tp: Any) -> list[type[BaseModel]]:
    return _models(tp, dict)


def _list_models(tp: Any) -> list[type[BaseModel]]:
    return _models(tp, list)


_PLACEHOLDERS = {"judges": "NAME", "rubrics": "NAME", "judging.bindings": "VERIFIER"}


def _default(info: FieldInfo) -> Any:
    if info.default is not PydanticUndefined:
        value = info.default
        if isinstance(value, BaseModel):
            return value.model_dump(mode="json", by_alias=True)
        if isinstance(value, list):
            return [v.model_dump(mode="json") if isinstance(v, BaseModel) else v for v in value]
        return value
    if info.default_factory is not None:
        return info.default_factory()  # type: ignore[call-arg]
    return None


def _joined(a: str, b: str, sep: str) -> str:
    return a if b in a.split(sep) else f"{a}{sep}{b}"


def _put(out: dict[str, FieldDoc], doc: FieldDoc) -> None:
    """Record ``doc``; a path that several members of a union share (``judges.NAME.mode``
    is "managed" in one, "external" in the other) gets one row naming every variant."""
    old = out.get(doc.path)
    if old is None:
        out[doc.path] = doc
        return
    out[doc.path] = replace(
        old,
        type=_joined(old.type, doc.type, " | "),
        required=old.required and doc.required,
        default=old.default if old.default == doc.default else None,
        description=_joined(old.description, doc.description, "; "),
        choices=old.choices + tuple(c for c in doc.choices if c not in old.choices),
        constraints=old.constraints + tuple(c for c in doc.constraints if c not in old.constraints),
    )


def _walk(model: type[BaseModel], prefix: str, section: str, out: dict[str, FieldDoc]) -> None:
    for name, info in model.model_fields.items():
        key = info.alias or name
        path = f"{prefix}.{key}" if prefix else key
        sect = section or key
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        subs = _submodels(info.annotation)
        maps = _map_value_models(info.annotation)
        required = info.is_required()
        doc = FieldDoc(
            path=path,
            section=sect,
            type=_type_name(info.annotation),
            required=required,
            default=None if required else _default(info),
            description=info.description or "",
            note=extra.get("note"),  # type: ignore[arg-type]
            aliases=tuple(extra.get("aliases", ()) or ()),  # type: ignore[arg-type]
            derived=extra.get("derived"),  # type: ignore[arg-type]
            choices=_choices(info.annotation),
            constraints=_constraints(info),
        )
        if subs and len(subs) == 1:
            _put(out, doc)
            _walk(subs[0], path, sect, out)
        elif subs:
            _put(out, doc)
            for sub in subs:
                _walk(sub, path, sect, out)
        elif maps:
            _put(out, doc)
            placeholder = _PLACEHOLDERS.get(path, "KEY")
            for sub in maps:
                _walk(sub, f"{path}.{placeholder}", sect, out)
        elif _list_models(info.annotation):
            _put(out, doc)
            for sub in _list_models(info.annotation):
                _walk(sub, f"{path}[]", sect, out)
        else:
            _put(out, doc)


@cache
def catalog() -> dict[str, FieldDoc]:
    """Every documented path, in model order (top level first, then each section)."""
    from compiler.spec import Spec

    out: dict[str, FieldDoc] = {}
    _walk(Spec, "", "", out)
    return out


def section_of(path: str) -> str:
    return path.split(".", 1)[0]


def lookup(path: str) -> FieldDoc | None:
    """A field by its path; map keys (``judges.rm.gpus``) match their placeholder rows."""
    cat = catalog()
    if path in cat:
        return cat[path]
    parts = path.split(".")
    for i in range(len(parts)):
        for placeholder in ("NAME", "VERIFIER", "KEY"):
            trial = ".".join([*parts[:i], placeholder, *parts[i + 1 :]])
            if trial in cat:
                return cat[trial]
    return None


def alias_targets() -> dict[str, str]:
    """alias path -> canonical path."""
    out: dict[str, str] = {}
    for doc in catalog().values():
        for alias in doc.aliases:
            out[alias] = doc.path
    return out
