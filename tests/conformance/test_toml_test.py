"""toml-test (TOML 1.0) conformance: every valid case decodes to its tagged JSON and agrees
with tomllib; every invalid case is rejected with a positioned diagnostic. In-process for
speed, plus a handful through the real ``rlc toml decode`` subprocess."""

from __future__ import annotations

import datetime as dt
import json
import math
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from compiler.diagnostics import DiagnosticError
from compiler.parse import decode_bytes, parse_document
from compiler.parse.tagged import document_tagged

REPO = Path(__file__).resolve().parents[2]
CASES = REPO / ".." / "shared" / "data" / "toml-test" / "tests"
LISTING = CASES / "files-toml-1.0.0"


def _listed(kind: str) -> list[str]:
    if not LISTING.exists():
        return []
    names = LISTING.read_text().split()
    return sorted(n for n in names if n.startswith(kind + "/") and n.endswith(".toml"))


VALID = _listed("valid")
INVALID = _listed("invalid")
needs_data = pytest.mark.skipif(
    not LISTING.exists(), reason=f"toml-test data not found at {CASES.resolve()}"
)


def _when(text: str) -> Any:
    text = text.replace("Z", "+00:00").replace("z", "+00:00")
    for parse in (dt.datetime.fromisoformat, dt.time.fromisoformat, dt.date.fromisoformat):
        try:
            value = parse(text)
        except ValueError:
            continue
        if isinstance(value, (dt.datetime, dt.time)):
            # toml-test only checks millisecond precision.
            value = value.replace(microsecond=value.microsecond // 1000 * 1000)
        return value
    raise AssertionError(f"not a date/time: {text!r}")


def tagged_equal(got: Any, want: Any) -> bool:
    """toml-test's comparison: floats numerically (any NaN = NaN), times as times."""
    if isinstance(want, dict) and set(want) == {"type", "value"} and isinstance(want["type"], str):
        if not (isinstance(got, dict) and got.get("type") == want["type"]):
            return False
        if want["type"] == "float":
            a, b = float(got["value"]), float(want["value"])
            return (math.isnan(a) and math.isnan(b)) or a == b
        if want["type"] in ("datetime", "datetime-local", "date-local", "time-local"):
            return bool(_when(got["value"]) == _when(want["value"]))
        return bool(got["value"] == want["value"])
    if isinstance(want, dict):
        return (
            isinstance(got, dict)
            and got.keys() == want.keys()
            and all(tagged_equal(got[k], want[k]) for k in want)
        )
    if isinstance(want, list):
        return (
            isinstance(got, list)
            and len(got) == len(want)
            and all(tagged_equal(g, w) for g, w in zip(got, want, strict=True))
        )
    return False


def python_equal(a: Any, b: Any) -> bool:
    """== with NaN equal to NaN and type-exact leaves (True is not 1)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(python_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(python_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dt.datetime):
        return a == b and a.utcoffset() == b.utcoffset()
    return bool(a == b)


def test_tagged_equal_is_strict() -> None:
    one = {"type": "integer", "value": "1"}
    assert tagged_equal({"a": one}, {"a": one})
    assert not tagged_equal({"a": {"type": "float", "value": "1"}}, {"a": one})
    assert not tagged_equal({"a": one, "b": one}, {"a": one})
    nan = {"type": "float", "value": "nan"}
    assert tagged_equal([nan], [{"type": "float", "value": "-nan"}])
    t1 = {"type": "datetime", "value": "1987-07-05T17:45:00+00:00"}
    assert tagged_equal(t1, {"type": "datetime", "value": "1987-07-05T17:45:00Z"})
    assert not tagged_equal(t1, {"type": "datetime", "value": "1987-07-05T17:45:01Z"})


@needs_data
def test_case_counts() -> None:
    # The README promises 210 valid and 499 invalid TOML 1.0 cases; all must be found.
    assert len(VALID) == 210
    assert len(INVALID) == 499


@needs_data
@pytest.mark.parametrize("name", VALID)
def test_valid(name: str) -> None:
    path = CASES / name
    data = path.read_bytes()
    doc = parse_document(decode_bytes(data, name), name)
    want = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
    got = document_tagged(doc)
    assert tagged_equal(got, want), f"{name}: got {got!r}"
    expected = tomllib.loads(data.decode("utf-8-sig"))
    assert python_equal(doc.to_python(), expected)


@needs_data
@pytest.mark.parametrize("name", INVALID)
def test_invalid(name: str) -> None:
    data = (CASES / name).read_bytes()
    with pytest.raises(DiagnosticError) as info:
        parse_document(decode_bytes(data, name), name)
    diagnostics = info.value.diagnostics
    assert diagnostics
    for d in diagnostics:
        assert d.code.startswith("toml-")
        assert d.span is not None and d.span.source == name and d.span.line >= 1


CLI_VALID = ["valid/example.toml", "valid/newline-crlf.toml", "valid/utf8-bom-01.toml"]
CLI_INVALID = [
    "invalid/table/duplicate-key-01.toml",
    "invalid/encoding/bad-utf8-in-string.toml",
    "invalid/control/bare-cr.toml",
]


def _decode(data: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "rlc_cli.main", "toml", "decode"],
        input=data,
        capture_output=True,
        cwd=REPO,
        timeout=60,
    )


@needs_data
@pytest.mark.parametrize("name", CLI_VALID)
def test_cli_decode_valid(name: str) -> None:
    path = CASES / name
    proc = _decode(path.read_bytes())
    assert proc.returncode == 0, proc.stderr.decode()
    want = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
    assert tagged_equal(json.loads(proc.stdout), want)


@needs_data
@pytest.mark.parametrize("name", CLI_INVALID)
def test_cli_decode_invalid(name: str) -> None:
    proc = _decode((CASES / name).read_bytes())
    assert proc.returncode == 1
    assert proc.stdout == b""
    first = proc.stderr.decode().splitlines()[0]
    assert first.startswith("<stdin>:") and "error[toml-" in first
