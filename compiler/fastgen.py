"""Generate fast, pydantic-free validators from our pydantic models (and ``--check`` them).

Why: importing pydantic and building the spec and Beaker validators costs ~0.3 s per cold
``rlc compile``, while the models' checks are plain type, range, pattern and shape tests.
This module reads a model's pydantic-core schema (the ground truth pydantic itself runs)
and writes straight-line Python for it:

* ``compiler/spec/_fast.py``: ``dump(data)`` returns exactly
  ``Spec.model_validate(data).model_dump(by_alias=True, mode="json")``, plus the alias
  table and field tree that bind/resolve read, and the schema digest.
* ``compiler/emit/_beaker_fast.py``: ``accepts(data)`` for Beaker's ``ExperimentSpec``;
  the models' own check functions (``compiler/emit/beaker_checks.py``) are called as is.

The generated code is deliberately *stricter* than pydantic: anything unusual (a name key
where an alias is expected, a non-ASCII string under a pattern, a value pydantic would
coerce) is rejected, and the caller falls back to pydantic, which then either accepts or
reports positioned errors. So a fast accept always means a pydantic accept with the same
data (tests/unit/test_fastgen.py checks both paths on every example, recipe and rule test
spec); errors always come from pydantic. Each generated file records the sha256 of the
model sources it came from and is ignored at run time when they changed.

    python -m compiler.fastgen          # rewrite the generated modules
    python -m compiler.fastgen --check  # exit 1 when one is stale
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from compiler.fastpath import beaker_sources, sources_digest, spec_sources

HERE = Path(__file__).resolve().parent
SPEC_OUT = HERE / "spec" / "_fast.py"
BEAKER_OUT = HERE / "emit" / "_beaker_fast.py"
# Modules whose functions generated code may call (they must not import pydantic).
CHECK_MODULES = ("compiler.emit.beaker_checks",)

_MODEL_KEYS = {"type", "cls", "config", "custom_init", "root_model", "schema", "ref", "metadata"}
_NODE_KEYS: dict[str, set[str]] = {
    "int": {"ge", "le", "gt", "lt"},
    "float": {"ge", "le", "gt", "lt"},
    "str": {"min_length", "max_length", "pattern"},
    "bool": set(),
    "any": set(),
    "literal": {"expected"},
    "nullable": {"schema"},
    "list": {"items_schema", "min_length", "max_length"},
    "dict": {"keys_schema", "values_schema"},
    "default": {"schema", "default", "validate_default"},
    "union": {"choices"},
    "tagged-union": {"choices", "discriminator", "strict", "from_attributes"},
    "function-after": {"function", "schema", "ref"},
}


class _Gen:
    """Emit one Python function per core-schema node (models deduplicated by ``ref``)."""

    def __init__(self, mode: str):
        self.mode = mode  # "dump": return JSON data; "check": accept/reject only
        self.lines: list[str] = []
        self.consts: list[str] = []
        self.const_names: dict[str, str] = {}
        self.imports: set[str] = set()
        self.by_ref: dict[str, str] = {}
        self.by_body: dict[tuple[str, ...], str] = {}  # identical leaf checks share one
        self.n = 0

    def name(self) -> str:
        self.n += 1
        return f"_v{self.n}"

    def const(self, value_src: str) -> str:
        if value_src not in self.const_names:
            self.consts.append(f"_C{len(self.consts) + 1} = {value_src}")
            self.const_names[value_src] = f"_C{len(self.consts)}"
        return self.const_names[value_src]

    def fn(self, name: str, body: list[str]) -> None:
        self.lines.append(f"def {name}(x):")
        self.lines.extend("    " + b for b in body)
        self.lines.append("")
        self.lines.append("")

    # -- nodes --------------------------------------------------------------------------
    def node(self, s: dict[str, Any], strict: bool) -> str:
        kind = s["type"]
        if kind == "model":
            return self.model(s)
        extra = set(s) - _NODE_KEYS.get(kind, set()) - {"type", "metadata", "ref"}
        if kind not in _NODE_KEYS or extra:
            raise ValueError(f"fastgen: unsupported core schema {kind!r} {sorted(extra)}")
        ref = s.get("ref")
        if ref and ref in self.by_ref:
            return self.by_ref[ref]
        body = getattr(self, "n_" + kind.replace("-", "_"))(s, strict)
        name = self.by_body.get(tuple(body))
        if name is None:
            name = self.by_body[tuple(body)] = self.name()
            self.fn(name, body)
        if ref:
            self.by_ref[ref] = name
        return name

    def _bounds(self, s: dict[str, Any], var: str) -> list[str]:
        out = []
        for key, op in (("ge", "<"), ("gt", "<="), ("le", ">"), ("lt", ">=")):
            if key in s:
                out.append(f"if {var} {op} {s[key]!r}: raise _Reject")
        return out

    def n_int(self, s: dict[str, Any], strict: bool) -> list[str]:
        return ["if type(x) is not int: raise _Reject", *self._bounds(s, "x"), "return x"]

    def n_float(self, s: dict[str, Any], strict: bool) -> list[str]:
        # strict floats take ints too (and dump them as floats); non-finite values and
        # ints a float cannot hold exactly go to pydantic
        return [
            "if type(x) is int:",
            "    if not -_EXACT <= x <= _EXACT: raise _Reject",
            "    x = float(x)",
            "elif type(x) is not float or not _isfinite(x): raise _Reject",
            *self._bounds(s, "x"),
            "return x",
        ]

    def n_str(self, s: dict[str, Any], strict: bool) -> list[str]:
        body = ["if type(x) is not str: raise _Reject"]
        if "min_length" in s:
            body.append(f"if len(x) < {s['min_length']}: raise _Reject")
        if "max_length" in s:
            body.append(f"if len(x) > {s['max_length']}: raise _Reject")
        if "pattern" in s:
            # pydantic matches with Rust's regex crate; on printable ASCII text Python's re
            # agrees with it for our patterns (\s, $ and . differ only on other characters)
            pat = self.const(f"_re.compile({s['pattern']!r})")
            body.append(f"if not _printable(x) or {pat}.search(x) is None: raise _Reject")
        body.append("return x")
        return body

    def n_bool(self, s: dict[str, Any], strict: bool) -> list[str]:
        return ["if type(x) is not bool: raise _Reject", "return x"]

    def n_any(self, s: dict[str, Any], strict: bool) -> list[str]:
        return ["return _plain(x)"]

    def n_literal(self, s: dict[str, Any], strict: bool) -> list[str]:
        expected = s["expected"]
        if not all(type(e) in (str, int, bool) for e in expected):
            raise ValueError(f"fastgen: unsupported literal {expected!r}")
        table = self.const(repr({(type(e).__name__, e): e for e in expected}))
        return [
            f"y = {table}.get((type(x).__name__, x), _MISSING) if _hashable(x) else _MISSING",
            "if y is _MISSING: raise _Reject",
            "return y",
        ]

    def n_nullable(self, s: dict[str, Any], strict: bool) -> list[str]:
        inner = self.node(s["schema"], strict)
        return ["if x is None: return None", f"return {inner}(x)"]

    def n_list(self, s: dict[str, Any], strict: bool) -> list[str]:
        item = self.node(s["items_schema"], strict) if "items_schema" in s else "_plain"
        body = ["if type(x) is not list: raise _Reject"]
        if "min_length" in s:
            body.append(f"if len(x) < {s['min_length']}: raise _Reject")
        if "max_length" in s:
            body.append(f"if len(x) > {s['max_length']}: raise _Reject")
        body.append(f"return [{item}(i) for i in x]")
        return body

    def n_dict(self, s: dict[str, Any], strict: bool) -> list[str]:
        key = self.node(s["keys_schema"], strict) if "keys_schema" in s else "_str_key"
        val = self.node(s["values_schema"], strict) if "values_schema" in s else "_plain"
        return [
            "if type(x) is not dict: raise _Reject",
            f"return {{{key}(k): {val}(v) for k, v in x.items()}}",
        ]

    def n_union(self, s: dict[str, Any], strict: bool) -> list[str]:
        if self.mode == "dump":
            raise ValueError("fastgen: plain unions are supported in check mode only")
        body = []
        for choice in s["choices"]:
            if isinstance(choice, tuple):
                choice = choice[0]
            fn = self.node(choice, strict)
            body += ["try:", f"    return {fn}(x)", "except _Reject:", "    pass"]
        return [*body, "raise _Reject"]

    def n_tagged_union(self, s: dict[str, Any], strict: bool) -> list[str]:
        tag = s["discriminator"]
        if not isinstance(tag, str) or not all(isinstance(k, str) for k in s["choices"]):
            raise ValueError("fastgen: tagged unions need a string discriminator")
        table = {k: self.node(v, strict) for k, v in s["choices"].items()}
        const = self.const("{" + ", ".join(f"{k!r}: {v}" for k, v in table.items()) + "}")
        return [
            "if type(x) is not dict: raise _Reject",
            f"t = x.get({tag!r})",
            f"if type(t) is not str or t not in {const}: raise _Reject",
            f"return {const}[t](x)",
        ]

    def n_function_after(self, s: dict[str, Any], strict: bool) -> list[str]:
        if self.mode == "dump":
            raise ValueError("fastgen: validator functions are supported in check mode only")
        inner = self.node(s["schema"], strict)
        f = s["function"]
        if f.get("type") != "no-info":
            raise ValueError("fastgen: only no-info after-validators are supported")
        func = getattr(f["function"], "__func__", f["function"])
        if func.__module__ not in CHECK_MODULES:
            raise ValueError(
                f"fastgen: validator {func.__qualname__} must live in one of {CHECK_MODULES}"
            )
        alias = f"_f_{func.__name__}"
        self.imports.add(f"from {func.__module__} import {func.__name__} as {alias}")
        return [
            f"y = {inner}(x)",
            "try:",
            f"    return {alias}(y)",
            "except Exception:  # noqa: BLE001 - pydantic decides (and words the error)",
            "    raise _Reject from None",
        ]

    def n_default(self, s: dict[str, Any], strict: bool) -> list[str]:
        raise AssertionError("defaults are handled by their model field")

    def model(self, s: dict[str, Any]) -> str:
        extra = set(s) - _MODEL_KEYS
        if extra or s.get("custom_init") or s.get("root_model"):
            raise ValueError(f"fastgen: unsupported model schema {sorted(extra)}")
        ref = s.get("ref") or f"{s['cls'].__qualname__}@{id(s)}"
        if ref in self.by_ref:
            return self.by_ref[ref]
        name = self.name()
        self.by_ref[ref] = name
        config = s.get("config", {})
        if config.get("extra_fields_behavior") != "forbid":
            raise ValueError(f"fastgen: {ref}: only extra='forbid' models are supported")
        strict = bool(config.get("strict"))
        if self.mode == "dump" and (not strict or config.get("allow_inf_nan", True)):
            raise ValueError(f"fastgen: {ref}: dump mode needs strict, allow_inf_nan=False models")
        fields = s["schema"]
        if fields["type"] != "model-fields" or fields.get("computed_fields"):
            raise ValueError(f"fastgen: {ref}: unsupported model fields")
        keys = []
        body = ["if type(x) is not dict: raise _Reject"]
        out_items: list[tuple[str, str]] = []
        for fname, f in fields["fields"].items():
            if set(f) - {"type", "schema", "validation_alias", "serialization_alias", "metadata"}:
                raise ValueError(f"fastgen: {ref}.{fname}: unsupported field options")
            key = f.get("validation_alias", fname)
            if not isinstance(key, str):
                raise ValueError(f"fastgen: {ref}.{fname}: only string aliases are supported")
            out_key = f.get("serialization_alias", fname) if self.mode == "dump" else fname
            keys.append(key)
            var = f"a{len(out_items)}"
            fs = f["schema"]
            if fs["type"] == "default":
                inner = self.node(fs["schema"], strict)
                missing = self.default_expr(fs, inner)
            else:
                inner = self.node(fs, strict)
                missing = None
            body.append(f"{var} = x.get({key!r}, _MISSING)")
            if missing is None:
                body.append(f"if {var} is _MISSING: raise _Reject")
                body.append(f"{var} = {inner}({var})")
            else:
                body.append(f"{var} = {missing} if {var} is _MISSING else {inner}({var})")
            out_items.append((out_key, var))
        known = self.const(f"frozenset({sorted(keys)!r})")
        body.insert(1, f"if not {known}.issuperset(x): raise _Reject")
        if self.mode == "dump":
            body.append("return {" + ", ".join(f"{k!r}: {v}" for k, v in out_items) + "}")
        else:
            body.append("return _NS(" + ", ".join(f"{k}={v}" for k, v in out_items) + ")")
        self.fn(name, body)
        return name

    def default_expr(self, fs: dict[str, Any], inner: str) -> str:
        from pydantic_core import SchemaSerializer

        default = fs["default"]
        if fs.get("validate_default"):
            return f"{inner}({_literal(default)})"
        if self.mode == "check":
            return _literal(default)
        dumped = SchemaSerializer(fs["schema"]).to_python(default, mode="json")
        return _literal(dumped)


def _literal(value: Any) -> str:
    """Python source that rebuilds ``value`` (fresh objects on every evaluation)."""
    text = repr(value)
    if eval(text) != value:  # noqa: S307 - our own repr of plain data
        raise ValueError(f"fastgen: default {value!r} is not plain data")
    return text


_PRELUDE = (
    "from compiler.fast_runtime import (  # shared helpers, see compiler/fast_runtime.py\n"
    "    _EXACT, _MISSING, _NS, _Reject, _hashable, _isfinite, _plain, _printable, _re,\n"
    "    _str_key,\n"
    ")\n"
)


def _module(header: str, gen: _Gen, root: str, extra: str, api: str) -> str:
    lines = [
        f'"""{header}"""',
        "# Generated by `python -m compiler.fastgen`; do not edit.",
        "# ruff: noqa",
        "# mypy: ignore-errors",
        "",
        *sorted(gen.imports),
        _PRELUDE.rstrip(),
        "",
        "",
        *gen.lines,
        "# (module constants are read at call time, so they may follow the functions)",
        *gen.consts,
        f"_ROOT = {root}",
        extra.rstrip(),
        "",
        api.rstrip(),
        "",
    ]
    return "\n".join(lines)


def generate_spec() -> str:
    from compiler.bind import aliases_from_models
    from compiler.manifest import digest_of, spec_json_schema
    from compiler.resolve import model_field_trees
    from compiler.spec import Spec

    Spec.model_rebuild()
    gen = _Gen("dump")
    root = gen.node(dict(Spec.__pydantic_core_schema__), True)
    tree = model_field_trees()
    import pydantic

    extra = "\n".join(
        [
            f"SOURCES = {sources_digest(spec_sources())!r}",
            f"PYDANTIC = {pydantic.VERSION!r}",
            f"SCHEMA_DIGEST = {digest_of(spec_json_schema())!r}",
            f"ALIASES = {aliases_from_models()!r}",
            f"FIELD_TREE = {tree!r}",
        ]
    )
    api = '''
def dump(data):
    """``Spec.model_validate(data).model_dump(by_alias=True, mode="json")``, or None when
    the fast path does not accept ``data`` (then pydantic decides)."""
    try:
        return _ROOT(data)
    except (_Reject, RecursionError):
        return None
'''
    return _module(
        "Fast validator of the spec models (compiler/spec), generated from their pydantic schema.",
        gen,
        root,
        extra,
        api,
    )


def generate_beaker() -> str:
    from compiler.emit.beaker_model import ExperimentSpec

    ExperimentSpec.model_rebuild()
    gen = _Gen("check")
    root = gen.node(dict(ExperimentSpec.__pydantic_core_schema__), False)
    import pydantic

    extra = "\n".join(
        [
            f"SOURCES = {sources_digest(beaker_sources())!r}",
            f"PYDANTIC = {pydantic.VERSION!r}",
        ]
    )
    api = '''
def accepts(data):
    """True when ``ExperimentSpec.model_validate(data)`` certainly succeeds; False means
    "ask pydantic" (which then reports the errors, if any)."""
    try:
        _ROOT(data)
    except (_Reject, RecursionError):
        return False
    return True
'''
    return _module(
        "Fast acceptance check of our Beaker spec v2 model, generated from its pydantic schema.",
        gen,
        root,
        extra,
        api,
    )


def _beaker_templates() -> list[Path]:
    from compiler.resources import templates_dir

    return sorted((templates_dir() / "beaker").glob("*.j2"))


def _template_module(path: Path) -> str:
    return path.name.replace(".", "_")


def generate_template(path: Path) -> Callable[[], str]:
    """A Beaker template compiled by jinja2 into an importable module (as jinja2's own
    ``compile_templates`` writes them for its ``ModuleLoader``)."""

    def make() -> str:
        import jinja2

        from compiler.emit.beaker import _env

        code = _env().compile(
            path.read_text(encoding="utf-8"), path.name, path.name, raw=True, defer_init=True
        )
        return "\n".join(
            [
                f'"""templates/beaker/{path.name} precompiled by jinja2 {jinja2.__version__}."""',
                "# Generated by `python -m compiler.fastgen`; do not edit.",
                "# ruff: noqa",
                "# mypy: ignore-errors",
                code,
            ]
        )

    return make


def generate_template_index() -> str:
    import hashlib

    import jinja2

    table = {
        p.name: (_template_module(p), hashlib.sha256(p.read_bytes()).hexdigest())
        for p in _beaker_templates()
    }
    return "\n".join(
        [
            '"""Precompiled Beaker templates: name -> (module, sha256 of the template source).',
            "",
            "``compiler.emit.beaker`` uses a module only while its template's bytes and the",
            'jinja2 version match; otherwise it compiles the template itself."""',
            "# Generated by `python -m compiler.fastgen`; do not edit.",
            "",
            f"JINJA = {jinja2.__version__!r}",
            f"TEMPLATES = {table!r}",
            "",
        ]
    )


def _targets() -> dict[Path, Callable[[], str]]:
    out: dict[Path, Callable[[], str]] = {SPEC_OUT: generate_spec, BEAKER_OUT: generate_beaker}
    jinja_dir = HERE / "emit" / "_jinja"
    out[jinja_dir / "__init__.py"] = generate_template_index
    for path in _beaker_templates():
        out[jinja_dir / f"{_template_module(path)}.py"] = generate_template(path)
    return out


def _formatted(text: str) -> str:
    """The text as `ruff format` writes it, so the committed file passes the format check."""
    import subprocess

    ruff = Path(sys.executable).parent / "ruff"
    cmd = [str(ruff) if ruff.exists() else "ruff", "format", "--stdin-filename", "x.py", "-"]
    done = subprocess.run(cmd, input=text, capture_output=True, text=True, check=True)
    return done.stdout


def stale() -> list[Path]:
    return [
        p for p, make in _targets().items() if not p.exists() or p.read_text() != _formatted(make())
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m compiler.fastgen")
    ap.add_argument("--check", action="store_true", help="exit 1 when a file is stale")
    args = ap.parse_args(argv)
    if args.check:
        old = stale()
        for p in old:
            print(f"stale: {p.relative_to(HERE.parent)} (run `python -m compiler.fastgen`)")
        return 1 if old else 0
    for path, make in _targets().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        text = _formatted(make())
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
