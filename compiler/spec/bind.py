"""Bind parsed documents to the typed spec models, mapping every error to its source span.

Layers (a recipe, then the spec with its overrides applied) are alias-normalized, merged
(tables merge, everything else replaces) and validated once with pydantic, so every error
in every layer is reported together. ``Bound.locate`` answers "which layer wrote this path,
and where" for provenance and for rule diagnostics.
"""

from __future__ import annotations

import copy
import types
import typing
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from compiler.diagnostics import Diagnostic, Span, did_you_mean
from compiler.parse.document import Document, Entry

DocPath = tuple[str | int, ...]


@dataclass
class Layer:
    """One source of values: a recipe file, or the spec (overrides are part of the spec doc)."""

    kind: str  # "recipe" | "spec"
    doc: Document
    recipe: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    remap: dict[DocPath, DocPath] = field(default_factory=dict)  # canonical -> as written
    aliases: dict[str, str] = field(default_factory=dict)  # canonical dotted -> alias dotted

    def doc_path(self, path: DocPath) -> DocPath:
        for cut in (2, 3):
            head = path[:cut]
            if head in self.remap:
                return self.remap[head] + path[cut:]
        return path

    def entry(self, path: DocPath) -> Entry | None:
        return self.doc.entry(self.doc_path(path))


@dataclass
class Bound:
    # the validated spec as JSON data (``Spec.model_dump(by_alias=True, mode="json")``);
    # None when binding failed
    spec: dict[str, Any] | None
    layers: list[Layer]
    merged: dict[str, Any]
    diagnostics: list[Diagnostic]

    def locate(self, path: DocPath) -> tuple[Layer, Entry] | None:
        """The topmost layer that wrote ``path`` (or a value containing it)."""
        for layer in reversed(self.layers):
            for cut in range(len(path), 0, -1):
                e = layer.entry(path[:cut])
                if e is not None:
                    return layer, e
        return None

    def writer(self, path: DocPath) -> tuple[Layer, Entry] | None:
        """The topmost layer that wrote exactly ``path``."""
        for layer in reversed(self.layers):
            e = layer.entry(path)
            if e is not None:
                return layer, e
        return None


def dotted(path: DocPath) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


# The modules the table's builder runs besides the spec models (its cache key).
ALIASES_READS = ("spec/bind.py", "diagnostics.py", "parse/__init__.py", "parse/document.py")


@cache
def aliases() -> dict[str, str]:
    """alias dotted path -> canonical dotted path (derived from the models once, cached)."""
    from compiler.derive.fastpath import spec_table

    table: dict[str, str] = spec_table("spec-aliases", ALIASES_READS, aliases_from_models)
    return table


def aliases_from_models() -> dict[str, str]:
    """alias dotted path -> canonical dotted path, from the models' ``aliases`` extras."""
    from compiler.spec import SECTIONS

    out: dict[str, str] = {}
    for section, model in SECTIONS.items():
        for name, info in model.model_fields.items():
            extra = info.json_schema_extra
            if isinstance(extra, dict):
                names = extra.get("aliases") or []
                for alias in names if isinstance(names, list) else []:
                    out[str(alias)] = f"{section}.{name}"
    return out


def _normalize(layer: Layer, diags: list[Diagnostic]) -> None:
    data = layer.doc.to_python()
    table = aliases()
    for section in list(data):
        body = data[section]
        if not isinstance(body, dict):
            continue
        for key in list(body):
            full = f"{section}.{key}"
            target = table.get(full)
            if target is None:
                continue
            tsec, tkey = target.split(".", 1)
            dest = data.setdefault(tsec, {})
            if not isinstance(dest, dict):
                continue
            if tkey in dest:
                diags.append(
                    Diagnostic(
                        "error",
                        "alias-conflict",
                        f"`{full}` is an alias of `{target}`, which is also set",
                        layer.doc.key_span((section, key)),
                        help=(f"keep only `{target}`",),
                    )
                )
                del body[key]
                continue
            dest[tkey] = body.pop(key)
            layer.remap[(tsec, tkey)] = (section, key)
            layer.aliases[target] = full
        if not body and section not in layer.doc.root.entries:
            del data[section]
    layer.data = data


def merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """Tables merge key by key; arrays and scalars from ``top`` replace."""
    out = copy.deepcopy(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# ---- pydantic error mapping -------------------------------------------------------------

_EXPECTED = {
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "bool_type": "a boolean (true or false, unquoted)",
    "string_type": "a string (quoted)",
    "list_type": "an array",
    "dict_type": "a table",
    "model_type": "a table",
    "model_attributes_type": "a table",
    "literal_error": None,
}


def _toml_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "table"
    return {"datetime": "datetime", "date": "date", "time": "time"}.get(
        type(value).__name__, "value"
    )


def _show(value: Any) -> str:
    """A value as TOML would spell it (short)."""
    import json

    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = value.isoformat() if hasattr(value, "isoformat") else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _data_path(merged: dict[str, Any], loc: tuple[Any, ...]) -> tuple[DocPath, bool]:
    """Map a pydantic ``loc`` to a document path; ``True`` when it names a mapping key."""
    node: Any = merged
    path: list[str | int] = []
    is_key = False
    for part in loc:
        if part == "[key]":
            is_key = True
            break
        if (
            isinstance(node, dict)
            and part in node
            or isinstance(node, list)
            and isinstance(part, int)
            and 0 <= part < len(node)
        ):
            path.append(part)
            node = node[part]
        elif isinstance(node, dict) and isinstance(part, str) and not path_has_tag(node, part):
            # a key that is absent (missing / unknown nested): keep it for the message
            path.append(part)
            node = None
        # else: a union tag or validator name; skip it
    return tuple(path), is_key


def path_has_tag(node: dict[str, Any], part: str) -> bool:
    """Discriminated-union tags appear in pydantic locs (``judges.x.managed.gpus``)."""
    return node.get("mode") == part


def _unwrap_models(annotation: Any) -> list[type]:
    from pydantic import BaseModel

    out: list[type] = []
    stack = [annotation]
    while stack:
        a = stack.pop()
        if isinstance(a, type) and issubclass(a, BaseModel):
            out.append(a)
            continue
        origin = typing.get_origin(a)
        args = typing.get_args(a)
        if origin is dict:
            stack.append(args[1] if len(args) == 2 else None)
        elif origin in (list, typing.Union, types.UnionType, typing.Annotated) or args:
            stack.extend(args if origin is not typing.Annotated else args[:1])
    return out


def _fields_at(path: DocPath) -> list[str]:
    """Field names (and alias names) valid at the table ``path``, for did-you-mean."""
    from compiler.spec import Spec

    models: list[type] = [Spec]
    for part in path:
        nxt: list[type] = []
        for m in models:
            for name, info in m.model_fields.items():  # type: ignore[attr-defined]
                if part in (name, info.alias):
                    nxt.extend(_unwrap_models(info.annotation))
                    break
        # a map key (judges.NAME) or a list index keeps the value models
        models = nxt or models
    names: list[str] = []
    for m in models:
        for name, info in m.model_fields.items():  # type: ignore[attr-defined]
            names.append(info.alias or name)
    if len(path) == 1:
        section = str(path[0])
        names.extend(a.split(".", 1)[1] for a in aliases() if a.startswith(section + "."))
    return names


def _missing_span(bound: Bound, path: DocPath) -> Span | None:
    for cut in range(len(path) - 1, 0, -1):
        found = bound.writer(path[:cut])
        if found is not None:
            return found[1].value.span
    spec = bound.layers[-1].doc
    return Span(spec.source, 1, 1, 1, 2)


# Schema errors reported for one spec: a pasted data file can yield tens of thousands,
# each with a did-you-mean search; the first hundred say what is wrong.
MAX_SCHEMA_ERRORS = 100


def map_errors(bound: Bound, exc: Any) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    errors = exc.errors(include_url=False)
    if len(errors) > MAX_SCHEMA_ERRORS:
        out.append(
            Diagnostic(
                "error",
                "too-many-errors",
                f"{len(errors) - MAX_SCHEMA_ERRORS} more schema errors are not shown",
                _missing_span(bound, ()),
                help=("fix the errors shown first; is this file a spec?",),
            )
        )
        errors = errors[:MAX_SCHEMA_ERRORS]
    for err in errors:
        kind = err["type"]
        path, is_key = _data_path(bound.merged, tuple(err["loc"]))
        name = dotted(path) or "<top level>"
        found = bound.writer(path)
        if kind == "missing":
            out.append(
                Diagnostic(
                    "error",
                    "missing-key",
                    f"missing required key `{name}`",
                    _missing_span(bound, path),
                )
            )
            continue
        if kind == "extra_forbidden":
            parent = path[:-1]
            where = f"[{dotted(parent)}]" if parent else "the top level"
            span = found[1].key_span if found else _missing_span(bound, path)
            out.append(
                Diagnostic(
                    "error",
                    "unknown-key",
                    f"unknown key `{path[-1]}` in {where}",
                    span,
                    help=did_you_mean(str(path[-1]), _fields_at(parent)),
                )
            )
            continue
        span = None
        if found is not None:
            span = found[1].key_span if is_key else found[1].value.span
        else:
            loc = bound.locate(path)
            span = loc[1].value.span if loc else _missing_span(bound, path)
        value = err.get("input")
        if is_key:
            msg = f"invalid name {path[-1]!r} in `{dotted(path[:-1])}`: {err['msg'].lower()}"
            out.append(Diagnostic("error", "invalid-name", msg, span))
            continue
        expected = _EXPECTED.get(kind, "")
        if kind == "literal_error":
            choices = str((err.get("ctx") or {}).get("expected", ""))
            help_ = did_you_mean(
                str(value), [c.strip(" '") for c in choices.replace(" or ", ",").split(",")]
            )
            out.append(
                Diagnostic(
                    "error",
                    "invalid-value",
                    f"`{name}` must be one of {choices}; got {_show(value)}",
                    span,
                    help=help_,
                )
            )
        elif expected:
            hint: tuple[str, ...] = ()
            if isinstance(value, str) and kind in ("int_type", "float_type", "bool_type"):
                hint = (f"write {value} without quotes",)
            out.append(
                Diagnostic(
                    "error",
                    "type-mismatch",
                    f"`{name}` must be {expected}, got {_toml_type(value)} {_show(value)}",
                    span,
                    help=hint,
                )
            )
        elif kind.startswith("union_tag"):
            tag = bound.writer((*path, "mode"))
            if tag is not None:
                span = tag[1].value.span
            out.append(
                Diagnostic(
                    "error",
                    "invalid-value",
                    f"`{name}`: {err['msg']}",
                    span,
                    help=('set mode = "managed" or mode = "external"',),
                )
            )
        else:
            msg = err["msg"]
            if msg.startswith("Value error, "):
                msg = msg[len("Value error, ") :]
            out.append(
                Diagnostic(
                    "error",
                    "invalid-value",
                    f"`{name}`: {msg[:1].lower()}{msg[1:]}; got {_show(value)}",
                    span,
                )
            )
    return out


def _env_checks(bound: Bound) -> list[Diagnostic]:
    """Per-name checks of launch.env / launch.secrets (credentials, reserved names)."""
    from contract.spec.constants import CREDENTIAL_NAMES, CREDENTIAL_SUFFIXES, RESERVED_ENV

    out: list[Diagnostic] = []
    launch = bound.merged.get("launch")
    if not isinstance(launch, dict):
        return out
    for table in ("env", "secrets"):
        names = launch.get(table)
        if not isinstance(names, dict):
            continue
        for key in names:
            found = bound.writer(("launch", table, key))
            span = found[1].key_span if found else None
            upper = str(key).upper()
            if upper in RESERVED_ENV:
                out.append(
                    Diagnostic(
                        "error",
                        "launch-env-reserved",
                        f"`launch.{table}.{key}` is owned by the launcher/runtime",
                        span,
                        help=("remove it; rlc sets it for every task",),
                    )
                )
            elif table == "env" and (
                upper.endswith(CREDENTIAL_SUFFIXES) or upper in CREDENTIAL_NAMES
            ):
                out.append(
                    Diagnostic(
                        "error",
                        "launch-env-credential",
                        f"`launch.env.{key}` looks like a credential; environment values are "
                        "stored in plain text in the manifest and the Beaker spec",
                        span,
                        help=(
                            f'store it in Beaker and write `secrets.{key} = "<secret name>"` instead',
                        ),
                    )
                )
    return out


def _position(d: Diagnostic) -> tuple[str, int, int]:
    if d.span is None:
        return ("", 0, 0)
    return (d.span.source, d.span.line, d.span.col)


def validate(merged: dict[str, Any], bound: Bound) -> list[Diagnostic]:
    """Set ``bound.spec`` to the validated spec as JSON data, or return the errors.

    The generated fast validator answers for well-formed specs without importing pydantic;
    anything it does not accept goes to the pydantic models, which decide and word the
    errors. Both give ``Spec.model_validate(merged).model_dump(by_alias=True, mode="json")``.
    """
    from compiler.derive.fastpath import spec_module

    fast = spec_module()
    data = fast.dump(merged) if fast is not None else None
    if data is not None:
        bound.spec = data
        return []
    from pydantic import ValidationError

    from compiler.spec import Spec

    try:
        bound.spec = Spec.model_validate(merged).model_dump(by_alias=True, mode="json")
    except ValidationError as exc:
        return map_errors(bound, exc)
    return []


def bind(layers: list[Layer]) -> Bound:
    """Normalize, merge and validate ``layers`` (lowest first). Never raises on user errors."""
    diags: list[Diagnostic] = []
    for layer in layers:
        _normalize(layer, diags)
    merged: dict[str, Any] = {}
    for layer in layers:
        data = layer.data
        if layer.kind == "recipe":
            data = {k: v for k, v in data.items() if k != "recipe"}
        merged = merge(merged, data)
    bound = Bound(None, layers, merged, diags)
    diags.extend(validate(merged, bound))
    diags.extend(_env_checks(bound))
    diags.sort(key=_position)
    if diags and any(d.is_error for d in diags):
        bound.spec = None
    return bound
