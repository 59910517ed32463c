"""A fast yes/no JSON Schema check, generated as Python source, in front of fastjsonschema.

`rlc lint` validates every manifest against schemas/manifest.schema.json. fastjsonschema's
generated code is correct but slow on our manifests (a sets-and-exceptions loop per
provenance entry, an exception per `anyOf` branch tried): ~40% of a lint. This module
compiles the subset of JSON Schema that rlc's generated schemas use into one predicate
that only says "valid" or "cannot tell"; lint asks fastjsonschema (which also writes the
error message) whenever the answer is not "valid".

The predicate is built to be *at least as strict* as fastjsonschema, never more lenient,
so a True from it is a valid manifest and a False costs only the slow path:

* types are exact (`type(v) is int`; fastjsonschema also takes 1.0 for an integer and a
  tuple for an array); a bool meeting a numeric keyword is refused;
* a `$` ending a `pattern` becomes `\\Z` (fastjsonschema does so too, except in
  `patternProperties`, where "x\\n" would pass); any other `$` is unsupported;
* a missing property that has a `default` gives False: fastjsonschema fills defaults into
  the data it validates, and the rules then see them, so such a document must go to it;
* `enum`/`const` compare type and value (Python's `1 == True` does not count);
* `oneOf` passes when one branch passes here and every other is surely refuted (not an
  object, or a required key missing); `anyOf` branches must have disjoint
  types, so fastjsonschema cannot fill defaults in a branch it then abandons;
* a keyword outside the supported set raises `Unsupported` when the predicate is built,
  and lint then uses fastjsonschema alone.

`tests/unit/test_lint_schema_check.py` compares the two on mutated manifests.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

# Keywords that never affect validity (docs, editor hints, our own annotations). "default"
# is handled at the parent's `properties`.
_ANNOTATIONS = frozenset(
    {
        "$schema",
        "$id",
        "$comment",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "aliases",
        "derived",
        "note",
        "discriminator",  # an OpenAPI hint; fastjsonschema ignores it as well
    }
)
_LEAF = frozenset(
    {
        "type",
        "enum",
        "const",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "pattern",
    }
)
_STRUCT = frozenset(
    {
        "properties",
        "required",
        "additionalProperties",
        "patternProperties",
        "items",
        "minItems",
        "maxItems",
        "anyOf",
        "oneOf",
        "$ref",
        "$defs",
    }
)
_TYPE_TESTS = {
    "string": "type({v}) is str",
    "integer": "type({v}) is int",
    "number": "(type({v}) is int or type({v}) is float)",
    "boolean": "({v} is True or {v} is False)",
    "null": "{v} is None",
    "object": "type({v}) is dict",
    "array": "type({v}) is list",
}
_NUMERIC = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}
_SCALARS = (str, int, float, bool, type(None))
_SCALARS_SOURCE = "(str, int, float, bool, type(None))"


class Unsupported(ValueError):
    """The schema uses something this module does not compile."""


def _regex(pattern: str) -> str:
    """Source compiling ``pattern`` with a final ``$`` as ``\\Z`` (no match before a newline)."""
    body = (
        pattern[:-1] + "\\Z" if pattern.endswith("$") and not pattern.endswith("\\$") else pattern
    )
    if "$" in body:
        raise Unsupported(f"pattern {pattern!r}")
    re.compile(body)
    return f"re.compile({body!r})"


def _supported(schema: Any) -> None:
    if not isinstance(schema, dict):
        raise Unsupported(f"schema {schema!r}")
    unknown = set(schema) - _ANNOTATIONS - _LEAF - _STRUCT
    if unknown:
        raise Unsupported(f"keywords {sorted(unknown)}")


def _number(value: Any) -> str:
    if type(value) not in (int, float):
        raise Unsupported(f"bound {value!r}")
    return repr(value)


class _Gen:
    def __init__(self, root: dict[str, Any]):
        self.root = root
        self.base = str(root.get("$id", ""))
        self.lines: list[str] = []
        self.env: dict[str, str] = {}
        self.refs: dict[str, str] = {}
        self.count = 0

    def const(self, source: str) -> str:
        """A module-level constant holding the value of the Python expression ``source``."""
        name = f"_k{len(self.env)}"
        self.env[name] = source
        return name

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def ref(self, ref: str) -> str:
        """The function for a `$ref` into this schema's `$defs` (built once)."""
        local = ref[len(self.base) :] if self.base and ref.startswith(self.base) else ref
        if not local.startswith("#/$defs/") or "/" in local[len("#/$defs/") :]:
            raise Unsupported(f"$ref {ref!r}")
        if local not in self.refs:
            name = self.fresh("_def")
            self.refs[local] = name
            self.function(self.target(ref), name)
        return self.refs[local]

    def target(self, ref: str) -> dict[str, Any]:
        local = ref[len(self.base) :] if self.base and ref.startswith(self.base) else ref
        found = self.root.get("$defs", {}).get(local[len("#/$defs/") :])
        if not local.startswith("#/$defs/") or not isinstance(found, dict):
            raise Unsupported(f"$ref {ref!r}")
        return found

    def check(self, schema: Any, v: str) -> str:
        """A boolean expression: `v` meets `schema`."""
        if schema is True or schema == {}:
            return "True"
        if schema is False:
            return "False"
        _supported(schema)
        inline = self.record(schema, v)
        if inline is not None:
            return inline
        if set(schema) - _ANNOTATIONS == {"anyOf"} and schema["anyOf"]:
            # `X or null` and friends: an expression, not a function per field
            return "(" + " or ".join(self.check(b, v) for b in self.any_of(schema)) + ")"
        if set(schema) & _STRUCT:
            return f"{self.function(schema, self.fresh('_s'))}({v})"
        return self.leaf(schema, v)

    def record(self, schema: dict[str, Any], v: str) -> str | None:
        """An inline expression for a small object schema (`type: object`, `required`, and
        leaf `properties` without defaults), such as a provenance entry: one check per item
        of a large map should not cost a function call."""
        if schema.get("type") != "object" or set(schema) - _ANNOTATIONS - {
            "type",
            "required",
            "properties",
        }:
            return None
        props: dict[str, Any] = schema.get("properties", {})
        if len(props) > 4 or any(
            not isinstance(sub, dict) or "default" in sub or set(sub) & _STRUCT
            for sub in props.values()
        ):
            return None
        parts = [f"type({v}) is dict"]
        parts += [f"{json.dumps(k)} in {v}" for k in schema.get("required", [])]
        for key, sub in props.items():
            lit = json.dumps(key)
            test = self.leaf(sub, f"{v}[{lit}]")
            if test != "True":
                parts.append(f"({lit} not in {v} or {test})")
        return "(" + " and ".join(parts) + ")"

    def leaf(self, schema: dict[str, Any], v: str) -> str:
        parts: list[str] = []
        kind = schema.get("type")
        if kind is not None:
            if not isinstance(kind, str) or kind not in _TYPE_TESTS:
                raise Unsupported(f"type {kind!r}")
            parts.append(_TYPE_TESTS[kind].format(v=v))
        for key in ("enum", "const"):
            if key in schema:
                options = schema[key] if key == "enum" else [schema[key]]
                if not isinstance(options, list) or not all(
                    isinstance(o, _SCALARS) for o in options
                ):
                    raise Unsupported(f"{key} {options!r}")
                if options and all(type(o) is str for o in options):
                    names = self.const(f"frozenset({sorted(options)!r})")
                    parts.append(f"(type({v}) is str and {v} in {names})")
                    continue
                pairs = ", ".join(f"({type(o).__name__}, {o!r})" for o in options)
                allowed = self.const(f"frozenset({{{pairs}}})" if options else "frozenset()")
                if kind is None:
                    parts.append(f"type({v}) in _SCALARS")
                parts.append(f"(type({v}), {v}) in {allowed}")
        numeric = [(k, op) for k, op in _NUMERIC.items() if k in schema]
        if numeric and kind in (None, "integer", "number"):
            tests = " and ".join(f"{v} {op} {_number(schema[k])}" for k, op in numeric)
            if kind is None:  # applies to numbers only; a bool here is refused (strict)
                tests = (
                    f"({v} is not True and {v} is not False"
                    f" and (not (type({v}) is int or type({v}) is float) or ({tests})))"
                )
            parts.append(tests)
        strings = []
        if "minLength" in schema:
            strings.append(f"len({v}) >= {int(schema['minLength'])}")
        if "maxLength" in schema:
            strings.append(f"len({v}) <= {int(schema['maxLength'])}")
        if "pattern" in schema:
            strings.append(f"{self.const(_regex(schema['pattern']))}.search({v}) is not None")
        if strings and kind in (None, "string"):
            tests = " and ".join(strings)
            parts.append(tests if kind == "string" else f"(type({v}) is not str or ({tests}))")
        return "(" + " and ".join(parts) + ")" if parts else "True"

    def any_of(self, schema: dict[str, Any]) -> list[Any]:
        """`anyOf` branches, which must declare disjoint types. fastjsonschema tries them in
        order and may fill defaults inside one that then fails; with disjoint types a value
        can only get as far as filling in the branch of its own type."""
        branches: list[Any] = schema["anyOf"]
        kinds = []
        for branch in branches:
            target = branch
            if isinstance(branch, dict) and set(branch) - _ANNOTATIONS == {"$ref"}:
                target = self.target(branch["$ref"])
            kind = target.get("type") if isinstance(target, dict) else None
            if not isinstance(kind, str):
                raise Unsupported("anyOf branch without a type")
            kinds.append("number" if kind == "integer" else kind)
        if len(set(kinds)) != len(kinds):
            raise Unsupported("anyOf branches of one type")
        return branches

    def refute(self, schema: Any, v: str) -> str:
        """An expression true only when `v` surely fails `schema` in fastjsonschema, and
        fails it before any default is filled in: not an object, or a required key
        missing (fastjsonschema checks both before it visits the properties)."""
        _supported(schema)
        if set(schema) - _ANNOTATIONS == {"$ref"}:
            return self.refute(self.target(schema["$ref"]), v)
        required = schema.get("required", [])
        if schema.get("type") != "object" or not required:
            raise Unsupported("oneOf branch without a refutation")
        tests = " or ".join(f"{json.dumps(k)} not in {v}" for k in required)
        return f"(not isinstance({v}, dict) or {tests})"

    def function(self, schema: dict[str, Any], name: str) -> str:
        """Emit `def name(v)` returning whether `v` meets `schema`; return `name`."""
        _supported(schema)
        body: list[str] = []
        if "$ref" in schema:
            body.append(f"if not {self.ref(schema['$ref'])}(v): return False")
        leaf = self.leaf(schema, "v")
        if leaf != "True":
            body.append(f"if not ({leaf}): return False")
        for key in ("anyOf", "oneOf"):
            if key in schema:
                branches = [
                    self.check(s, "v")
                    for s in (self.any_of(schema) if key == "anyOf" else schema[key])
                ]
                if key == "anyOf":
                    body.append(f"if not ({' or '.join(branches) or 'False'}): return False")
                else:
                    # Exactly one branch passes here, and every other one must fail in
                    # fastjsonschema too: a branch this stricter check refuses may still
                    # pass there, so each other branch needs a sure refutation.
                    refutes = [self.refute(b, "v") for b in schema[key]]
                    body.append(f"_p = ({', '.join(f'bool({b})' for b in branches)},)")
                    body.append("if sum(_p) != 1: return False")
                    for i, refute in enumerate(refutes):
                        body.append(f"if not _p[{i}] and not ({refute}): return False")
        body.extend(self.object_part(schema))
        body.extend(self.array_part(schema))
        self.lines.append(f"def {name}(v):")
        self.lines.extend("    " + line for line in body)
        self.lines.append("    return True")
        self.lines.append("")
        return name

    def object_part(self, schema: dict[str, Any]) -> list[str]:
        keys = ("properties", "required", "additionalProperties", "patternProperties")
        if not any(k in schema for k in keys):
            return []
        out: list[str] = []
        for key in schema.get("required", []):
            out.append(f"    if {json.dumps(key)} not in v: return False")
        props: dict[str, Any] = schema.get("properties", {})
        for key, sub in props.items():
            lit = json.dumps(key)
            test = self.check(sub, "x")
            has_default = isinstance(sub, dict) and "default" in sub
            out.append(f"    x = v.get({lit}, _MISSING)")
            if has_default:
                out.append("    if x is _MISSING: return False")
                if test != "True":
                    out.append(f"    if not ({test}): return False")
            elif test != "True":
                out.append(f"    if x is not _MISSING and not ({test}): return False")
        patterns = schema.get("patternProperties", {})
        extra = schema.get("additionalProperties", True)
        if not props and not patterns and extra is not True:
            # a map (`additionalProperties` only), e.g. provenance: check the values
            out.append("    for x in v.values():")
            out.append(f"        if not ({self.check(extra, 'x')}): return False")
        elif patterns or extra is not True:
            known = self.const(f"frozenset({sorted(props)!r})")
            out.append("    for k, x in v.items():")
            # every matching pattern applies, also to named properties; a key is
            # "additional" when it is neither named nor matched by a pattern
            out.append("        named = k in " + known)
            for pattern, sub in patterns.items():
                out.append(f"        if {self.const(_regex(pattern))}.search(k) is not None:")
                out.append("            named = True")
                test = self.check(sub, "x")
                if test != "True":
                    out.append(f"            if not ({test}): return False")
            if extra is not True:
                out.append(f"        if not named and not ({self.check(extra, 'x')}): return False")
        return ["if type(v) is dict:", *out] if out else []

    def array_part(self, schema: dict[str, Any]) -> list[str]:
        keys = ("items", "minItems", "maxItems")
        if not any(k in schema for k in keys):
            return []
        out: list[str] = []
        if "minItems" in schema:
            out.append(f"    if len(v) < {int(schema['minItems'])}: return False")
        if "maxItems" in schema:
            out.append(f"    if len(v) > {int(schema['maxItems'])}: return False")
        if "items" in schema:
            if not isinstance(schema["items"], dict):
                raise Unsupported("items as a list")
            test = self.check(schema["items"], "x")
            if test != "True":
                out.append("    for x in v:")
                out.append(f"        if not ({test}): return False")
        return ["if type(v) is list:", *out] if out else []


def build_source(schema: dict[str, Any]) -> str:
    """A self-contained Python module defining ``valid(v)`` for ``schema``.

    Raises `Unsupported` when the schema uses keywords outside the compiled subset.
    """
    gen = _Gen(schema)
    gen.function(schema, "valid")
    head = [
        "# generated by compiler.manifest.schema_check; do not edit",
        "import re",
        "",
        "_MISSING = object()",
        "NoneType = type(None)",
        f"_SCALARS = {_SCALARS_SOURCE}",
        *(f"{name} = {source}" for name, source in gen.env.items()),
        "",
    ]
    return "\n".join(head + gen.lines) + "\n"


def build(schema: dict[str, Any]) -> Callable[[Any], bool]:
    """The predicate for ``schema``: True means valid; False means "ask a full validator"."""
    namespace: dict[str, Any] = {}
    exec(compile(build_source(schema), "<rlc schema check>", "exec"), namespace)  # noqa: S102
    fn: Callable[[Any], bool] = namespace["valid"]
    return fn
