"""Differential property tests: our TOML parser against tomllib on generated documents.

Documents are generated as python values and written out in randomly chosen TOML styles
(header tables, dotted keys, inline tables, arrays of tables; bare/quoted keys; every
string flavour; decimal/hex/octal/binary integers; all date-time kinds), so the same data
takes many textual forms. A second test mutates valid documents one character at a time
and checks both parsers accept or reject alike.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import tomllib
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler.diagnostics import DiagnosticError
from compiler.parse import parse_document

SETTINGS = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
BARE = re.compile(r"[A-Za-z0-9_-]+")
INT64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",)) | st.sampled_from("\"'\\\n\t\x00\x7f"),
    max_size=12,
)
OFFSETS = st.integers(-23 * 60 - 59, 23 * 60 + 59).map(
    lambda m: dt.timezone(dt.timedelta(minutes=m))
)
SCALARS = st.one_of(
    st.booleans(),
    INT64,
    st.floats(allow_nan=True, allow_infinity=True),
    TEXT,
    st.datetimes(timezones=st.none() | OFFSETS | st.just(dt.UTC)),
    st.dates(),
    st.times(),
)
KEYS = st.text(st.sampled_from("abcXYZ019_-"), min_size=1, max_size=6) | TEXT
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=16,
)
DOCUMENTS = st.dictionaries(KEYS, VALUES, max_size=6)


def same(a: Any, b: Any) -> bool:
    """Equality with NaN == NaN, exact types, and equal UTC offsets."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dt.datetime):
        return a == b and a.utcoffset() == b.utcoffset()
    return bool(a == b)


class Writer:
    """Writes python data as TOML, drawing every stylistic choice from hypothesis."""

    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw
        self.lines: list[str] = []

    def pick(self, *options: str) -> str:
        return self.draw(st.sampled_from(options))

    # -- strings and keys ---------------------------------------------------------------
    @staticmethod
    def escape(s: str, multiline: bool = False) -> str:
        out = []
        for ch in s:
            if ch == "\\":
                out.append("\\\\")
            elif ch == '"':
                out.append('\\"')
            elif ch == "\n" and multiline:
                out.append("\n")
            elif ch in "\b\t\n\f\r":
                out.append({"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}[ch])
            elif ord(ch) < 0x20 or ord(ch) == 0x7F:
                out.append(f"\\u{ord(ch):04x}")
            else:
                out.append(ch)
        return "".join(out)

    def string(self, s: str) -> str:
        clean = not any(ord(c) < 0x20 and c != "\t" or ord(c) == 0x7F for c in s)
        styles = ["basic", "ml-basic"]
        if clean and "'" not in s:
            styles.append("literal")
        if "'" not in s and not any(
            (ord(c) < 0x20 and c not in "\t\n") or ord(c) == 0x7F for c in s
        ):
            styles.append("ml-literal")
        style = self.pick(*styles)
        if style == "basic":
            return '"' + self.escape(s) + '"'
        if style == "literal":
            return "'" + s + "'"
        lead = "\n" if s.startswith("\n") or self.draw(st.booleans()) else ""
        if style == "ml-basic":
            return '"""' + lead + self.escape(s, multiline=True) + '"""'
        return "'''" + lead + s + "'''"

    def key(self, k: str) -> str:
        if BARE.fullmatch(k) and self.draw(st.booleans()):
            return k
        if (
            "'" not in k
            and "\n" not in k
            and self.string_is_literal_safe(k)
            and self.draw(st.booleans())
        ):
            return "'" + k + "'"
        return '"' + self.escape(k) + '"'

    @staticmethod
    def string_is_literal_safe(s: str) -> bool:
        return not any((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F for c in s)

    # -- values -------------------------------------------------------------------------
    def integer(self, n: int) -> str:
        style = self.pick("dec", "hex", "oct", "bin", "under") if n >= 0 else "dec"
        if style == "hex":
            return hex(n)
        if style == "oct":
            return "0o" + format(n, "o")
        if style == "bin":
            return "0b" + format(n, "b")
        text = str(n)
        if style == "under" and len(text) > 3:
            return "_".join(text[i : i + 3] for i in range(0, len(text), 3))
        return ("+" + text) if n >= 0 and self.draw(st.booleans()) else text

    def value(self, v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return self.integer(v)
        if isinstance(v, float):
            if math.isnan(v):
                return self.pick("nan", "+nan", "-nan")
            if math.isinf(v):
                return ("-" if v < 0 else self.pick("", "+")) + "inf"
            return repr(v)
        if isinstance(v, str):
            return self.string(v)
        if isinstance(v, dt.datetime):
            text = v.isoformat(sep=self.pick("T", " ", "t"))
            if v.utcoffset() == dt.timedelta(0) and self.draw(st.booleans()):
                text = text[:-6] + self.pick("Z", "z")
            return text
        if isinstance(v, (dt.date, dt.time)):
            return v.isoformat()
        if isinstance(v, list):
            items = [self.value(x) for x in v]
            sep = self.pick(", ", ",", ",\n  ", " ,\n# note\n")
            tail = self.pick("", ",", ",\n") if items else ""
            return "[" + sep.join(items) + tail + "]"
        assert isinstance(v, dict)
        return "{" + ", ".join(f"{self.key(k)} = {self.value(x)}" for k, x in v.items()) + "}"

    # -- tables -------------------------------------------------------------------------
    def leaves(self, prefix: list[str], d: dict[str, Any]) -> list[tuple[list[str], Any]]:
        out: list[tuple[list[str], Any]] = []
        for k, v in d.items():
            if isinstance(v, dict) and v:
                out.extend(self.leaves([*prefix, k], v))
            else:
                out.append(([*prefix, k], v))
        return out

    def table(self, path: list[str], d: dict[str, Any]) -> None:
        later: list[tuple[str, str, Any]] = []
        for k, v in d.items():
            is_aot = isinstance(v, list) and v and all(isinstance(x, dict) for x in v)
            if isinstance(v, dict):
                style = (
                    self.pick("header", "dotted", "inline") if v else self.pick("header", "inline")
                )
            elif is_aot:
                style = self.pick("aot", "inline")
            else:
                style = "inline"
            if style in ("header", "aot"):
                later.append((style, k, v))
            elif style == "dotted":
                for keys, leaf in self.leaves([k], v):
                    dotted = self.pick(".", " . ").join(self.key(x) for x in keys)
                    self.lines.append(f"{dotted} = {self.value(leaf)}")
            else:
                self.lines.append(f"{self.key(k)}{self.pick(' = ', '=', '  =  ')}{self.value(v)}")
        for style, k, v in later:
            sub = [*path, k]
            header = ".".join(self.key(x) for x in sub)
            if style == "header":
                self.lines.append(self.pick("", "# section"))
                self.lines.append(f"[{header}]")
                self.table(sub, v)
            else:
                for element in v:
                    self.lines.append(f"[[{header}]]")
                    self.table(sub, element)


@st.composite
def documents(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    data = draw(DOCUMENTS)
    writer = Writer(draw)
    writer.table([], data)
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    return data, newline.join(writer.lines) + newline


@SETTINGS
@given(documents())
def test_generated_documents_agree_with_tomllib(case: tuple[dict[str, Any], str]) -> None:
    data, text = case
    expected = tomllib.loads(text)
    assert same(expected, data), "the test's writer produced the wrong TOML"
    assert same(parse_document(text, "gen.toml").to_python(), expected)


MUTATION = st.sampled_from(list("=[]{}\"'.,#\n \\_-+:0aeTZ\t") + ["[[", "]]", '"""', "'''"])


@settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(documents(), st.data())
def test_mutated_documents_accepted_alike(
    case: tuple[dict[str, Any], str], data: st.DataObject
) -> None:
    _, text = case
    if not text:
        return
    pos = data.draw(st.integers(0, len(text) - 1))
    op = data.draw(st.sampled_from(["insert", "delete", "replace"]))
    piece = data.draw(MUTATION)
    if op == "insert":
        mutated = text[:pos] + piece + text[pos:]
    elif op == "delete":
        mutated = text[:pos] + text[pos + 1 :]
    else:
        mutated = text[:pos] + piece + text[pos + 1 :]
    try:
        expected: Any = tomllib.loads(mutated)
    except tomllib.TOMLDecodeError:
        expected = None
    try:
        got: Any = parse_document(mutated, "m.toml").to_python()
    except DiagnosticError:
        got = None
    if expected is not None and got is None:
        # The one place TOML 1.0 is stricter than tomllib: integers beyond 64 bits.
        big = [n for n in re.findall(r"\d[\d_]*", mutated) if int(n.replace("_", "")) >= 2**63]
        assert big, f"we rejected a document tomllib accepts: {mutated!r}"
        return
    assert (got is None) == (expected is None), f"acceptance differs on {mutated!r}"
    if got is not None:
        assert same(got, expected)
