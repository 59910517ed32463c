"""``--set PATH=VALUE`` overrides: parsing, spans, application and their errors."""

from __future__ import annotations

import pytest

from compiler.diagnostics import Diagnostic, DiagnosticError, Span, render_all
from compiler.parse import parse_document
from compiler.parse.document import Scalar, Table
from compiler.parse.overrides import apply_overrides, parse_override

SPEC = """\
name = "run"
[trainer]
gpus = 8
[[data.eval]]
path = "a.jsonl"
[[data.eval]]
path = "b.jsonl"
[inference]
stop = ["a", "b"]
"""


def doc():  # type: ignore[no-untyped-def]
    return parse_document(SPEC, "spec.toml")


def override_errors(overrides: list[str]) -> list[Diagnostic]:
    with pytest.raises(DiagnosticError) as info:
        apply_overrides(doc(), overrides)
    return info.value.diagnostics


def test_parse_override_path_value_and_spans() -> None:
    path, value = parse_override('judges."my judge".url = "http://x"', 3)
    assert path == ("judges", "my judge", "url")
    assert isinstance(value, Scalar) and value.value == "http://x"
    assert value.span == Span("override 3", 1, 25, 1, 35)
    path, value = parse_override("trainer.lr=1e-6", 1)
    assert path == ("trainer", "lr") and value.to_python() == 1e-6
    assert value.span == Span("override 1", 1, 12, 1, 16)
    _, value = parse_override("x={a = [1, 2], b.c = 'q'}", 1)
    assert value.to_python() == {"a": [1, 2], "b": {"c": "q"}}


def test_apply_sets_creates_and_last_wins() -> None:
    base = doc()
    new = apply_overrides(
        base,
        [
            "trainer.gpus=4",
            "trainer.gpus=16",
            'model.source="builtin:tiny"',
            "name = 'other'",
            'data.eval.1.path="c.jsonl"',
            'inference.stop.0="z"',
        ],
    )
    got = new.to_python()
    assert got["trainer"]["gpus"] == 16
    assert got["model"] == {"source": "builtin:tiny"}
    assert got["name"] == "other"
    assert [e["path"] for e in got["data"]["eval"]] == ["a.jsonl", "c.jsonl"]
    assert got["inference"]["stop"] == ["z", "b"]
    # The input document is untouched, and the overrides are recorded.
    assert base.to_python()["trainer"]["gpus"] == 8 and base.overrides == []
    assert new.overrides[0] == "trainer.gpus=4" and len(new.overrides) == 6
    # Spans of overridden values name the override that set them; others keep theirs.
    assert new.value_span(("trainer", "gpus")) == Span("override 2", 1, 14, 1, 16)
    assert new.key_span(("model", "source")) == Span("override 3", 1, 7, 1, 13)
    created = new.root.entries["model"].value
    assert isinstance(created, Table) and created.span.source == "override 3"
    assert new.value_span(("data", "eval", 0, "path")) == base.value_span(
        ("data", "eval", 0, "path")
    )


def test_values_are_literal_no_env_expansion() -> None:
    new = apply_overrides(doc(), ['name="$HOME/${USER}"'])
    assert new.to_python()["name"] == "$HOME/${USER}"


def test_bare_string_gets_quoting_help() -> None:
    (d,) = override_errors(["name=foo"])
    assert d.code == "toml-invalid-value"
    assert d.span == Span("override 1", 1, 6, 1, 9)
    assert d.help == ("strings need quotes: --set 'name=\"foo\"'",)


def test_unquoted_words_with_spaces_get_help() -> None:
    (d,) = override_errors(["name=hello world"])
    assert d.code == "override-syntax" and d.span is not None and d.span.col == 12
    assert "--set 'name=\"hello world\"'" in d.help[0]


def test_all_malformed_overrides_reported_together() -> None:
    found = override_errors(["trainer.gpus", "ok=1", "a.=1", "x=[1,", "name.first=1"])
    assert [d.code for d in found] == [
        "override-syntax",
        "override-syntax",
        "override-syntax",
        "override-path",
    ]
    assert [d.span.source for d in found if d.span] == [
        "override 1",
        "override 3",
        "override 4",
        "override 5",
    ]
    assert "no '='" in found[0].message


def test_assigning_through_a_value_is_positioned() -> None:
    (d,) = override_errors(["name.first=1"])
    assert d.code == "override-path"
    assert "`name` is a string, not a table" in d.message
    assert d.span == Span("override 1", 1, 6, 1, 11)
    assert d.secondary and d.secondary[0][0].source == "spec.toml"
    (d,) = override_errors(["data.eval.x=1"])
    assert "select an element by index" in d.message
    (d,) = override_errors(["data.eval.5.path='x'"])
    assert "out of range" in d.message
    (d,) = override_errors(["data.eval.0=1"])
    assert "must be a table" in d.message


def test_override_value_errors_use_override_source() -> None:
    (d,) = override_errors(['x="bad \\q"'])
    assert d.code == "toml-invalid-escape" and d.span == Span("override 1", 1, 8, 1, 10)


def test_errors_render_with_the_override_text() -> None:
    with pytest.raises(DiagnosticError) as info:
        apply_overrides(doc(), ["trainer.gpus=four"])
    text = render_all(info.value.diagnostics, getattr(info.value, "sources", None))
    assert "override 1:1:14: error[toml-invalid-value]" in text
    assert "trainer.gpus=four" in text and "^^^^" in text
