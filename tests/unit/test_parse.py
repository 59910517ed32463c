"""The TOML front end: tree shape, spans, values, and positioned errors."""

from __future__ import annotations

import datetime as dt
import math
import sys
import tomllib
from pathlib import Path

import pytest

from compiler.diagnostics import Diagnostic, DiagnosticError, Span
from compiler.parse import decode_bytes, parse_document, parse_value
from compiler.parse.document import Array, ArrayOfTables, Scalar, Table

REPO = Path(__file__).resolve().parents[2]


def errors(text: str) -> list[Diagnostic]:
    with pytest.raises(DiagnosticError) as info:
        parse_document(text, "t.toml")
    return info.value.diagnostics


def one_error(text: str) -> Diagnostic:
    found = errors(text)
    assert len(found) == 1, found
    return found[0]


def at(d: Diagnostic) -> tuple[int, int, int, int]:
    assert d.span is not None
    return d.span.line, d.span.col, d.span.end_line, d.span.end_col


# -- tree and spans ---------------------------------------------------------------------

SPEC = """\
name = "run"  # a comment
[trainer]
gpus = 8
lr.value = 1e-6
[[data.eval]]
path = 'a.jsonl'
[[data.eval]]
path = "b.jsonl"
opts = {seed = 1, tags = ["x", "y"]}
"""


def test_tree_kinds_and_values() -> None:
    doc = parse_document(SPEC, "spec.toml")
    assert doc.source == "spec.toml" and doc.text == SPEC
    assert doc.to_python() == tomllib.loads(SPEC)
    root = doc.root
    assert root.kind == "root"
    trainer = root.entries["trainer"].value
    assert isinstance(trainer, Table) and trainer.kind == "header"
    lr = trainer.entries["lr"].value
    assert isinstance(lr, Table) and lr.kind == "dotted"
    data = root.entries["data"].value
    assert isinstance(data, Table) and data.kind == "implicit"
    evals = data.entries["eval"].value
    assert isinstance(evals, ArrayOfTables) and len(evals.tables) == 2
    assert all(t.kind == "array-element" for t in evals.tables)
    opts = evals.tables[1].entries["opts"].value
    assert isinstance(opts, Table) and opts.kind == "inline"
    tags = opts.entries["tags"].value
    assert isinstance(tags, Array) and [i.value for i in tags.items] == ["x", "y"]


def test_spans_point_at_keys_values_and_headers() -> None:
    doc = parse_document(SPEC, "spec.toml")
    assert doc.key_span(("name",)) == Span("spec.toml", 1, 1, 1, 5)
    assert doc.value_span(("name",)) == Span("spec.toml", 1, 8, 1, 13)
    # A header table's span is its header; its key span the last key part.
    assert doc.value_span(("trainer",)) == Span("spec.toml", 2, 1, 2, 10)
    assert doc.key_span(("trainer",)) == Span("spec.toml", 2, 2, 2, 9)
    assert doc.value_span(("trainer", "gpus")) == Span("spec.toml", 3, 8, 3, 9)
    # Dotted keys: the key span is the last part.
    assert doc.key_span(("trainer", "lr", "value")) == Span("spec.toml", 4, 4, 4, 9)
    assert doc.value_span(("trainer", "lr", "value")) == Span("spec.toml", 4, 12, 4, 16)
    # Array of tables: the array's span is the first header; elements their own.
    assert doc.value_span(("data", "eval")) == Span("spec.toml", 5, 1, 5, 14)
    assert doc.value_span(("data", "eval", 1)) == Span("spec.toml", 7, 1, 7, 14)
    assert doc.value_span(("data", "eval", 1, "path")) == Span("spec.toml", 8, 8, 8, 17)
    assert doc.value_span(("data", "eval", 1, "opts")) == Span("spec.toml", 9, 8, 9, 37)
    assert doc.value_span(("data", "eval", 1, "opts", "tags", 1)) == Span("spec.toml", 9, 32, 9, 35)
    assert doc.best_span(("trainer", "missing")) == doc.value_span(("trainer",))


def test_multiline_string_span_and_crlf() -> None:
    text = 'a = """\r\nline one\r\nline two"""\r\nb = 1\r\n'
    doc = parse_document(text, "t.toml")
    assert doc.to_python() == {"a": "line one\nline two", "b": 1}
    assert doc.value_span(("a",)) == Span("t.toml", 1, 5, 3, 12)
    assert doc.value_span(("b",)) == Span("t.toml", 4, 5, 4, 6)


def test_scalar_kinds_match_tomllib() -> None:
    text = """\
odt = 1979-05-27T07:32:00.999999-07:00
odt2 = 1979-05-27 07:32:00Z
ldt = 1979-05-27T07:32:00
ld = 1979-05-27
lt = 07:32:00.5
pinf = +inf
nnan = -nan
hex = 0xDEAD_beef
oct = 0o755
bin = 0b1101
flt = -1_000.5e-3
int = -9_223_372_036_854_775_808
t = true
lit = 'C:\\path'
esc = "tab\\t\\u00e9\\U0001F600"
"""
    doc = parse_document(text, "t.toml")
    got = doc.to_python()
    want = tomllib.loads(text)
    assert math.isnan(got.pop("nnan")) and math.isnan(want.pop("nnan"))
    assert got == want
    kinds = {k: e.value.kind for k, e in doc.root.entries.items() if isinstance(e.value, Scalar)}
    assert kinds["odt"] == kinds["odt2"] == "datetime"
    assert kinds["ldt"] == "datetime-local" and kinds["ld"] == "date" and kinds["lt"] == "time"
    assert got["odt"].utcoffset() == dt.timedelta(hours=-7)
    assert got["ldt"].tzinfo is None
    assert kinds["pinf"] == "float" and kinds["hex"] == "integer" and kinds["t"] == "bool"


def test_bom_and_empty_documents() -> None:
    bom = parse_document("\ufeffa = 1\n", "t")
    assert bom.to_python() == {"a": 1}
    # Columns count the BOM, as an editor showing the raw file would.
    assert bom.value_span(("a",)) == Span("t", 1, 6, 1, 7)
    assert parse_document("", "t").to_python() == {}
    assert parse_document("# only a comment", "t").to_python() == {}


def test_decode_bytes_positions_invalid_utf8() -> None:
    with pytest.raises(DiagnosticError) as info:
        decode_bytes(b'a = 1\nb = "\xff"\n', "t.toml")
    (d,) = info.value.diagnostics
    assert d.code == "toml-encoding" and at(d) == (2, 6, 2, 7)


def test_parse_value() -> None:
    assert parse_value("[1, 'a', {b = 2}]", "v").to_python() == [1, "a", {"b": 2}]
    node = parse_value('  "x"', "override 1")
    assert isinstance(node, Scalar) and node.span == Span("override 1", 1, 3, 1, 6)
    with pytest.raises(DiagnosticError):
        parse_value("1 2", "v")
    with pytest.raises(DiagnosticError):
        parse_value("foo", "v")


# -- semantic errors ------------------------------------------------------------------


def test_duplicate_keys_are_all_reported_with_first_definition() -> None:
    found = errors("a = 1\nb = 2\na = 3\nb = 4\nc.d = 1\nc.d = 2\n")
    assert [d.code for d in found] == ["toml-duplicate-key"] * 3
    assert [at(d)[:2] for d in found] == [(3, 1), (4, 1), (6, 3)]
    assert found[0].secondary[0][0] == Span("t.toml", 1, 1, 1, 2)
    assert "`c.d`" in found[2].message


def test_redefined_table() -> None:
    d = one_error("[a]\nx = 1\n[b]\n[a]\n")
    assert d.code == "toml-redefine-table" and at(d) == (4, 2, 4, 3)
    assert d.secondary[0][0].line == 1


def test_implicit_table_may_be_defined_once() -> None:
    doc = parse_document("[a.b]\nx = 1\n[a]\ny = 2\n", "t")
    assert doc.to_python() == {"a": {"b": {"x": 1}, "y": 2}}
    assert doc.value_span(("a",)) == Span("t", 3, 1, 3, 4)
    assert one_error("[a.b]\n[a]\n[a]\n").code == "toml-redefine-table"


def test_dotted_keys_and_headers() -> None:
    # Headers may add sub-tables below a dotted-key table, but not define it.
    text = "[fruit]\napple.color = 'red'\n[fruit.apple.texture]\nsmooth = true\n"
    assert parse_document(text, "t").to_python() == tomllib.loads(text)
    d = one_error("[fruit]\napple.color = 'red'\n[fruit.apple]\n")
    assert d.code == "toml-redefine-table" and "dotted keys" in d.message
    d = one_error("[a.b.c]\nz = 9\n[a]\nb.c.t = 1\n")
    assert d.code == "toml-redefine-table" and "[a.b.c]" in d.message


def test_inline_tables_and_arrays_are_closed() -> None:
    d = one_error("a = {b = 1}\na.c = 2\n")
    assert d.code == "toml-immutable" and at(d) == (2, 1, 2, 2)
    assert one_error("a = {b = 1}\n[a.c]\n").code == "toml-immutable"
    assert one_error("a = [1]\n[[a]]\n").code == "toml-immutable"
    assert one_error("a = {b = {c = 1}, b.d = 2}\n").code == "toml-immutable"
    assert one_error("[[a]]\n[a]\n").code == "toml-redefine-table"
    assert one_error("[a]\n[[a]]\n").code == "toml-redefine-table"
    assert one_error("a = 1\n[a]\n").code == "toml-redefine-table"
    assert one_error("a = 1\na.b = 2\n").code == "toml-duplicate-key"


def test_array_of_tables_resets_subtables() -> None:
    text = "[[a]]\n[a.b]\nx = 1\n[[a]]\n[a.b]\nx = 2\n"
    assert parse_document(text, "t").to_python() == {"a": [{"b": {"x": 1}}, {"b": {"x": 2}}]}


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("01", "leading zeros"),
        ("1__0", "underscore"),
        ("+0x1", "no sign"),
        ("True", "lower case"),
        ("Inf", "lower case"),
        ("9223372036854775808", "64 bits"),
        ("foo", 'strings need quotes: "foo"'),
        ("1979-02-30", None),
        ("24:00:00", None),
        ("1979-05-27T07:32:00+24:00", None),
        ("1.", None),
        (".5", None),
        ("1e", None),
    ],
)
def test_invalid_values(value: str, fragment: str | None) -> None:
    d = one_error(f"x = {value}\n")
    assert d.code == "toml-invalid-value"
    assert at(d) == (1, 5, 1, 5 + len(value))
    if fragment:
        assert fragment in " ".join((d.message, *d.help))


def test_integer_bounds() -> None:
    doc = parse_document("a = 9223372036854775807\nb = -9223372036854775808\n", "t")
    assert doc.to_python() == {"a": 2**63 - 1, "b": -(2**63)}


def test_invalid_escape_points_at_the_escape() -> None:
    d = one_error('a = "ok \\q"\n')
    assert d.code == "toml-invalid-escape" and at(d) == (1, 9, 1, 11)
    d = one_error('a = """\nfirst\n  \\x41"""\n')
    assert d.code == "toml-invalid-escape" and at(d) == (3, 3, 3, 5)
    d = one_error('a = "\\uD800"\n')
    assert "scalar value" in d.message
    d = one_error('"k\\e" = 1\n')
    assert d.code == "toml-invalid-escape" and at(d) == (1, 3, 1, 5)


def test_line_ending_backslash() -> None:
    text = 'a = """one \\\n    two \\  \n\n  three"""\n'
    assert parse_document(text, "t").to_python() == tomllib.loads(text)
    assert one_error('a = """one \\ two"""\n').code == "toml-invalid-escape"


def test_control_characters_and_bare_cr() -> None:
    found = errors("a = 'x\x01'\nb = 2\r\nc = 3\rd = 4\n# \x7f\n")
    assert [d.code for d in found] == ["toml-control-character"] * 3
    assert [at(d)[:2] for d in found] == [(1, 7), (3, 6), (4, 3)]
    assert "U+0001" in found[0].message and "carriage return" in found[1].message


# -- syntax errors --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "where", "fragment"),
    [
        ("a = 1 b = 2\n", (1, 7), "after the value"),
        ("a =\n", (1, 4), "missing value"),
        ("a\n", (1, 2), "'='"),
        ("[a\nb = 1\n", (1, 3), "not closed; expected ']'"),
        ("[[a]\n", (1, 4), "expected ']]'"),
        ("t = {a = 1,\n b = 2}\n", (1, 12), "inline table"),
        ("t = {a = 1,}\n", (1, 12), "trailing comma"),
        ('a = "open\n', (1, 5), "unterminated string"),
        ("a = [1, 2\n", (2, 1), "not closed"),
        ("bad!key = 1\n", (1, 4), "bare keys"),
        ("[a]\n[]\n", (2, 2), "expected a key"),
    ],
)
def test_syntax_errors(text: str, where: tuple[int, int], fragment: str) -> None:
    d = one_error(text)
    assert d.code == "toml-syntax"
    assert at(d)[:2] == where
    assert fragment in " ".join((d.message, *d.help)), d


def test_syntax_errors_on_later_lines_are_collected() -> None:
    text = 'a = 1 b\nc = ok\nd == 2\n[t]\ne =\nf = [1,\n  2, 3]\ng = 4 5\nh = "\\q"\n'
    found = errors(text)
    assert [(d.code, at(d)[:2]) for d in found] == [
        ("toml-syntax", (1, 7)),
        ("toml-invalid-value", (2, 5)),
        ("toml-syntax", (3, 4)),
        ("toml-syntax", (5, 4)),
        ("toml-syntax", (8, 7)),
        ("toml-invalid-escape", (9, 6)),
    ]
    # Inside a multi-line array the rest of the text can't be trusted: stop there.
    assert len(errors("a = [1,\n 2 3,\n]\nb = 1 2\n")) == 1


def test_errors_carry_source_text_for_rendering() -> None:
    with pytest.raises(DiagnosticError) as info:
        parse_document("a = 1\na = 2\n", "t.toml")
    sources = getattr(info.value, "sources", None)
    assert sources is not None and sources.line("t.toml", 2) == "a = 2"


# -- parser tables from the derived-artifact cache -----------------------------------


def test_cached_parser_matches_a_fresh_lark_build(tmp_path, monkeypatch) -> None:
    """The runtime and tables from the cache (`compiler.derive.lalr`) parse exactly as lark's own
    parser built from toml.lark, whether built now or read back by a later process."""
    import lark

    from compiler.derive import lalr
    from compiler.parse.syntax import _GRAMMAR, _STARTS, _parser

    monkeypatch.setenv("RLC_CACHE_DIR", str(tmp_path))
    fresh = lark.Lark(_GRAMMAR.read_text(), parser="lalr", lexer="contextual", start=_STARTS)
    built = lalr.parser(_GRAMMAR, _STARTS)  # empty cache: built from the grammar, stored
    assert len(list((tmp_path / "derived" / "lalr-parse-toml").glob("*.bin"))) == 1
    loaded = lalr.parser(_GRAMMAR, _STARTS)  # read back from the cache entry

    def shape(node: object) -> object:
        children = getattr(node, "children", None)
        if children is None:
            return (getattr(node, "type", ""), str(node), getattr(node, "line", 0))
        return (str(getattr(node, "data", "")), [shape(c) for c in children])

    for text in (SPEC, "a = [[1, 2], [3]]\n", "x = {a.b = 1, c = '''q'''}\n"):
        want = shape(fresh.parse(text, start="document"))
        for parser in (built, loaded, _parser()):
            assert shape(parser.parse(text, start="document")) == want


def test_a_300_line_spec_parses_like_tomllib() -> None:
    """Correctness on a realistic large spec; speed is measured by benchmarks/parse_bench.py."""
    sys.path.insert(0, str(REPO))
    try:
        from benchmarks.parse_bench import realistic_spec
    finally:
        sys.path.remove(str(REPO))
    spec = realistic_spec(300)
    assert parse_document(spec, "s").to_python() == tomllib.loads(spec)
