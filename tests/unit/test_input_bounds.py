"""Bounded inputs: nesting depth, text size, huge integers, invalid UTF-8 and oversized
counts are positioned user errors (exit 2), never a crash or a hang."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from compiler.diagnostics import DiagnosticError
from compiler.parse import parse_document
from compiler.parse.source import MAX_NESTING, MAX_TEXT_CHARS
from compiler.pipeline import compile_spec

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "specs" / "examples" / "quickstart.toml")


def _parse_error(text: str) -> DiagnosticError:
    with pytest.raises(DiagnosticError) as info:
        parse_document(text, "t.toml")
    assert all(d.span is not None for d in info.value.diagnostics)
    return info.value


@pytest.mark.parametrize(
    "text",
    [
        "a = " + "[" * 450 + "]" * 450,
        "a = " + "{b = " * 450 + "1" + "}" * 450,
        "a = [" + "[" * 200 + "]" * 200 + "]",
    ],
    ids=["arrays", "inline-tables", "nested"],
)
def test_deep_nesting_is_a_positioned_error(text: str) -> None:
    (diag,) = _parse_error(text).diagnostics
    assert diag.code == "toml-limit"
    assert diag.span is not None and diag.span.line == 1 and diag.span.col > 4 + MAX_NESTING


def test_nesting_within_the_limit_and_brackets_in_strings_parse() -> None:
    depth = MAX_NESTING - 1
    doc = parse_document("a = " + "[" * depth + "]" * depth, "t.toml")
    assert doc.to_python()["a"]
    text = 'a = "' + "[" * 500 + "\"\nb = '''" + "{" * 500 + "'''\n# " + "[" * 500 + "\n"
    assert parse_document(text, "t.toml").to_python()["a"] == "[" * 500


def test_oversized_text_is_a_positioned_error() -> None:
    (diag,) = _parse_error("# " + "x" * MAX_TEXT_CHARS + "\n").diagnostics
    assert diag.code == "toml-limit"


@pytest.mark.parametrize("digits", ["9" * 5000, "0x" + "f" * 5000, "-" + "1" * 4400])
def test_huge_integers_are_out_of_range_quickly(digits: str) -> None:
    start = time.perf_counter()
    (diag,) = _parse_error(f"a = {digits}\n").diagnostics
    assert "does not fit in 64 bits" in diag.message and len(diag.message) < 200
    assert time.perf_counter() - start < 5


def test_invalid_utf8_spec_is_positioned(tmp_path: Path) -> None:
    spec = tmp_path / "bad.toml"
    spec.write_bytes(b'name = "ok"\nx = "\xff"\n')
    result = compile_spec(str(spec))
    (diag,) = result.errors
    assert diag.code == "toml-encoding"
    assert diag.span is not None and (diag.span.line, diag.span.col) == (2, 6)


@pytest.mark.parametrize(
    "override",
    [
        "trainer.nodes=10000000",
        "trainer.nodes=9223372036854775807",
        "inference.num_engines=10000000",
        "inference.gpus=100000",
        "training.num_rollouts=9223372036854775807",
    ],
)
def test_counts_have_upper_bounds(override: str) -> None:
    start = time.perf_counter()
    result = compile_spec(QUICKSTART, [override])
    assert [d.code for d in result.errors] == ["invalid-value"]
    assert result.errors[0].span is not None
    assert time.perf_counter() - start < 10


def test_rule_errors_are_always_positioned() -> None:
    # an error raised only by plan values and defaults still points into the spec
    for override in ("inference.max_context_length=2", "trainer.nodes=3"):
        result = compile_spec(QUICKSTART, [override])
        assert result.errors and all(d.span is not None for d in result.errors)
