"""Fuzz the parser, the compiler and ``--set``: exit 0 or 2 only, every error positioned,
no input takes more than 2 s of CPU time.

Inputs are mutations of the example specs (inserted TOML punctuation, deleted and
duplicated slices, bytes that are not UTF-8) plus hostile seeds (deep nesting, integers of
thousands of digits, credentials, paths outside the run directory), and overrides built
from every documented field with arbitrary values. The budget is bounded for CI (about a
minute on two cores); ``RLC_FUZZ_SCALE=10`` runs ten times as many examples.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler.diagnostics import DiagnosticError
from compiler.emit.reference import catalog
from compiler.parse import parse_document
from rlc_cli.main import cli

ROOT = Path(__file__).resolve().parents[2]
SCALE = max(1, int(os.environ.get("RLC_FUZZ_SCALE", "1")))
# Per input, in CPU time: a loaded machine does not trip it, a quadratic pass does.
EXAMPLE_CPU_S = 2.0
EXAMPLE_WALL_S = 60  # a blocked read (no CPU used) is caught by the wall clock
SEEDS = [
    (ROOT / "specs" / "examples" / n).read_bytes()
    for n in ("quickstart.toml", "gsm8k-dense.toml", "moe-async.toml")
]
HOSTILE = [
    b"a = " + b"[" * 600 + b"]" * 600,
    b"a = " + b"{b = " * 600 + b"1" + b"}" * 600,
    b"a = " + b"9" * 5000,
    b"a = 0x" + b"f" * 5000,
    b'a = "\xff\xfe"\n',
    b'recipe = "/etc/passwd"\n',
    b'recipe = "../../specs/examples/quickstart"\n',
    b"a" + b".b" * 500 + b" = 1\n",
    b"[" + b".".join([b"b"] * 500) + b"]\n",
    b'name = "' + b"a" * 100_000 + b'"\n',
    b'name = "' + b"eyJ" * 30_000 + b'"\n',
    b'name = "' + b"x://" * 25_000 + b'"\n',
    b"".join(b"[t%d]\n" % i for i in range(5000)),
]
PUNCT = st.sampled_from(
    ["[", "]", "{", "}", "=", '"', "'", '"""', "\n", ",", ".", "#", "\\", "0x", "1e999", "\xff"]
)
FIELDS = sorted(catalog())


def _settings(n: int) -> Any:
    return settings(
        max_examples=n * SCALE,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


@contextmanager
def _no_hang() -> Iterator[None]:
    def cpu(*_: Any) -> None:
        raise AssertionError(f"more than {EXAMPLE_CPU_S} s of CPU time")

    def wall(*_: Any) -> None:
        raise AssertionError(f"no answer within {EXAMPLE_WALL_S} s")

    old_cpu = signal.signal(signal.SIGVTALRM, cpu)
    old_wall = signal.signal(signal.SIGALRM, wall)
    signal.setitimer(signal.ITIMER_VIRTUAL, EXAMPLE_CPU_S)
    signal.alarm(EXAMPLE_WALL_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.alarm(0)
        signal.signal(signal.SIGVTALRM, old_cpu)
        signal.signal(signal.SIGALRM, old_wall)


@st.composite
def mutated(draw: Any) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS + HOSTILE)))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["insert", "delete", "duplicate", "bytes"]))
        if op == "insert":
            data[at:at] = draw(PUNCT).encode("utf-8", "surrogateescape")
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 40))]
        elif op == "duplicate":
            data[at:at] = data[at : at + draw(st.integers(1, 200))]
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=6))
    return bytes(data)


VALUES = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(
        [
            "9" * 5000,
            "1e999",
            "nan",
            "true",
            '"/etc"',
            '"/weka/x/../../etc"',
            '"hf_aB3dE5gH7jK9mN1pQ3sT5vW7yZ"',
            '"https://u:p@x.example/?api_key=1"',
            "[" * 200 + "]" * 200,
            "{}",
            "[]",
            '""',
            "9223372036854775807",
        ]
    ),
    st.text(max_size=20).map(json.dumps),
    st.text(max_size=12),
)
OVERRIDE = st.builds(
    lambda key, value: f"{key}={value}",
    st.one_of(st.sampled_from(FIELDS), st.text(max_size=12)),
    VALUES,
)


def _check_cli(args: list[str]) -> None:
    with _no_hang():
        res = CliRunner().invoke(cli, args)
    assert res.exit_code in (0, 2), (res.exit_code, res.output[-2000:], res.exception)
    if res.exit_code == 2:
        diags = json.loads(res.stdout)
        assert diags, res.output[-2000:]
        for d in diags:
            assert d["line"] is not None and d["column"] is not None, d


@_settings(150)
@given(mutated())
def test_parser_answers_with_positions(data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    with _no_hang():
        try:
            parse_document(text, "fuzz.toml")
        except DiagnosticError as exc:
            assert exc.diagnostics
            assert all(d.span is not None for d in exc.diagnostics), exc.diagnostics


@_settings(80)
@given(mutated())
def test_compile_exits_0_or_2_with_positions(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        spec = tmp / "spec.toml"
        spec.write_bytes(data)
        _check_cli(["compile", str(spec), "-o", str(tmp / "out"), "--no-cache", "--format", "json"])


@_settings(80)
@given(st.lists(OVERRIDE, min_size=1, max_size=3))
def test_set_exits_0_or_2_with_positions(overrides: list[str]) -> None:
    args = ["validate", str(ROOT / "specs" / "examples" / "quickstart.toml"), "--format", "json"]
    for ov in overrides:
        args += ["--set", ov]
    _check_cli(args)


@pytest.mark.parametrize("data", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_seeds(data: bytes, tmp_path: Path) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_bytes(data)
    _check_cli(["validate", str(spec), "--format", "json"])


def _leaves(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _leaves(v, (*path, k))] or [path]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in _leaves(v, (*path, i))] or [path]
    return [path]


def _quickstart_manifest() -> dict[str, Any]:
    from compiler.pipeline import compile_spec

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return compile_spec("specs/examples/quickstart.toml").manifest()
    finally:
        os.chdir(cwd)


MANIFEST = _quickstart_manifest()
LEAVES = [p for p in _leaves(MANIFEST) if p and p[0] != "digest"]
LEAF_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**64),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=16),
    st.sampled_from(["/etc", "sh", "-c", "python", "hf_aB3dE5gH7jK9mN1pQ3sT5vW7yZ"]),
    st.lists(st.text(max_size=4), max_size=3),
)


@_settings(60)
@given(st.sampled_from(LEAVES), LEAF_VALUES)
def test_forged_manifests_never_run_edited_derived_fields(
    path: tuple[Any, ...], value: Any
) -> None:
    """Any one leaf set to anything, digest recomputed: the loader answers without raising,
    and whatever it accepts runs exactly the compiled command lines, paths and plan."""
    import copy

    from compiler.manifest.trust import check_manifest
    from contract.canonical import CanonicalError, canonical_bytes, digest_of

    forged = copy.deepcopy(MANIFEST)
    node: Any = forged
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    try:
        forged["digest"] = digest_of({k: v for k, v in forged.items() if k != "digest"})
        data = canonical_bytes(forged)
    except CanonicalError:
        return
    with _no_hang():
        loaded, problems = check_manifest("forged.json", data, {})
    if loaded is not None:
        for key in ("commands", "paths", "plan", "facts"):
            assert loaded[key] == MANIFEST[key], (path, value)
