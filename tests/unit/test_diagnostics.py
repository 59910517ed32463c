"""Rendering of diagnostics: header line, source line, caret under the span, help, JSON."""

from __future__ import annotations

import json

import pytest

from compiler.diagnostics import (
    Diagnostic,
    DiagnosticError,
    SourceMap,
    Span,
    did_you_mean,
    render_all,
    render_text,
    suggest,
)
from compiler.parse import parse_document

TEXT = "[trainer]\ngpus = 8\ntensor_parallel = 2\n"
SOURCES = SourceMap({"spec.toml": TEXT})
SPAN = Span("spec.toml", 3, 19, 3, 20)
DIAG = Diagnostic(
    "error",
    "trainer-parallelism",
    "tensor parallelism greater than one is not supported",
    SPAN,
    secondary=((Span("spec.toml", 2, 8, 2, 9), "with this many GPUs"),),
    help=("use trainer.expert_parallel",),
    notes=("see docs/support.md",),
)


def test_render_text_shape() -> None:
    lines = render_text(DIAG, SOURCES).splitlines()
    assert lines[0] == (
        "spec.toml:3:19: error[trainer-parallelism]: "
        "tensor parallelism greater than one is not supported"
    )
    assert lines[1:4] == [
        "  |",
        "3 | tensor_parallel = 2",
        "  |                   ^",
    ]
    assert lines[4] == "  --> spec.toml:2:8"
    assert lines[7] == "  |        ^ with this many GPUs"
    assert lines[-2:] == ["  = note: see docs/support.md", "  = help: use trainer.expert_parallel"]


def test_caret_width_follows_span_and_multiline_spans() -> None:
    wide = Diagnostic("error", "x", "m", Span("spec.toml", 3, 1, 3, 16))
    assert render_text(wide, SOURCES).splitlines()[3] == "  | " + "^" * 15
    multi = Diagnostic("error", "x", "m", Span("spec.toml", 2, 8, 3, 3))
    assert render_text(multi, SOURCES).splitlines()[3] == "  |        ^"


def test_tabs_keep_caret_aligned() -> None:
    sources = SourceMap({"t": "\ta = x\n"})
    d = Diagnostic("error", "x", "m", Span("t", 1, 6, 1, 7))
    _, _, line, caret = render_text(d, sources).splitlines()
    assert line.index("x") == caret.index("^")


def test_unknown_source_and_no_span() -> None:
    d = Diagnostic("error", "x", "m", Span("elsewhere", 1, 1, 1, 2))
    assert render_text(d, SOURCES) == "elsewhere:1:1: error[x]: m"
    bare = Diagnostic("warning", "w", "just so", help=("h",))
    assert render_text(bare) == "rlc: warning[w]: just so\n  = help: h"


def test_source_lines_split_only_on_newlines() -> None:
    # \u2028 and \x85 are legal inside TOML strings and comments; they are not line breaks.
    sources = SourceMap({"t": 'a = "x\u2028y"\r\nb = 1 # \x85\nc = 2'})
    assert sources.line("t", 1) == 'a = "x\u2028y"'
    assert sources.line("t", 2) == "b = 1 # \x85"
    assert sources.line("t", 3) == "c = 2"
    assert sources.line("t", 4) == ""
    assert sources.line("t", 5) is None


def test_render_all_counts_and_json() -> None:
    warn = Diagnostic("warning", "w", "careful", None)
    text = render_all([DIAG, warn], SOURCES)
    assert text.endswith("1 error(s), 1 warning(s)")
    data = json.loads(render_all([DIAG, warn], SOURCES, fmt="json"))
    assert data[0] == {
        "severity": "error",
        "code": "trainer-parallelism",
        "message": "tensor parallelism greater than one is not supported",
        "help": ["use trainer.expert_parallel"],
        "notes": ["see docs/support.md"],
        "secondary": [
            {
                "file": "spec.toml",
                "line": 2,
                "column": 8,
                "end_line": 2,
                "end_column": 9,
                "label": "with this many GPUs",
            }
        ],
        "file": "spec.toml",
        "line": 3,
        "column": 19,
        "end_line": 3,
        "end_column": 20,
    }
    assert data[1]["file"] is None and data[1]["line"] is None


def test_parse_error_renders_end_to_end() -> None:
    with pytest.raises(DiagnosticError) as info:
        parse_document("[trainer]\ngpus = eight\n", "spec.toml")
    text = render_all(info.value.diagnostics, getattr(info.value, "sources", None))
    assert text.splitlines()[:4] == [
        "spec.toml:2:8: error[toml-invalid-value]: invalid value 'eight'",
        "  |",
        "2 | gpus = eight",
        "  |        ^^^^^",
    ]
    assert '  = help: strings need quotes: "eight"' in text


def test_diagnostic_error_collects() -> None:
    err = DiagnosticError([DIAG, DIAG])
    assert len(err.diagnostics) == 2 and "not supported" in str(err)
    assert DiagnosticError(DIAG).diagnostics == [DIAG]


def test_suggestions() -> None:
    assert suggest("tensor_paralel", ["tensor_parallel", "gpus"]) == ["tensor_parallel"]
    assert did_you_mean("gpu", ["gpus", "nodes"]) == ("did you mean 'gpus'?",)
    assert did_you_mean("zzz", ["gpus"]) == ()
