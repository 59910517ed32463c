"""Hostile input to the compiler and to every reader of a user-supplied path: each case is a
reproducer that crashed (exit 3), hung or took minutes before, and must now be a positioned
user error (exit 2) or a finding, within a bounded CPU time.

CPU time, not wall time, is bounded (``ITIMER_VIRTUAL``), so a loaded CI machine does not
fail a test that a quadratic algorithm would fail anywhere.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from compiler.diagnostics import Diagnostic, SourceMap, Span, render_all
from compiler.manifest.lint import lint_manifest
from compiler.pipeline import compile_spec
from compiler.spec.secrets import credential_reason
from contract.safe_read import NotReadable, read_regular
from rlc_cli.main import cli

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "specs" / "examples" / "quickstart.toml"
CPU_BUDGET_S = 2.0


@contextmanager
def cpu_budget(seconds: float = CPU_BUDGET_S) -> Iterator[None]:
    """Fail when the block uses more than ``seconds`` of this process's CPU time."""

    def over(*_: Any) -> None:
        raise AssertionError(f"more than {seconds} s of CPU time")

    old = signal.signal(signal.SIGVTALRM, over)
    signal.setitimer(signal.ITIMER_VIRTUAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, old)


def _validate(*args: str) -> Any:
    return CliRunner().invoke(cli, ["validate", *args, "--format", "json"])


def _positioned(output: str) -> list[dict[str, Any]]:
    diags = json.loads(output)
    assert diags
    assert all(d["line"] is not None and d["column"] is not None for d in diags), diags
    return diags


# ---- the secret scanner is linear -------------------------------------------------------
# Each pattern made a regex retry from every position (a scheme before ``://``, ``eyJ`` of a
# JSON Web Token); 100 kB took 17 s and 1 MB over 30 s.
@pytest.mark.parametrize(
    "unit", ["a", "eyJ", "://", "a:/", "x://u", "?key", "sk-", "ghp_", "Ab1/", "=", "&token="]
)
def test_secret_scanner_is_linear(unit: str) -> None:
    value = (unit * (1_000_000 // len(unit) + 1))[:1_000_000]
    with cpu_budget():
        credential_reason(value)


def test_secret_scanner_still_finds_what_it_found() -> None:
    assert credential_reason("https://user:pw@host.example/x") is not None
    assert credential_reason("see git+https://tok:x@github.com/a") is not None
    assert credential_reason("https://host.example/user@x") is None
    assert credential_reason("eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0") is not None
    assert credential_reason("token=eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0") is not None


def test_a_long_spec_string_validates_quickly(tmp_path: Path) -> None:
    spec = tmp_path / "spec.toml"
    import base64
    import hashlib

    # 180 kB of base64 noise: a "high-entropy string", so it is reported (and masked)
    noise = b"".join(hashlib.sha512(str(i).encode()).digest() for i in range(2100))
    value = base64.b64encode(noise).decode().replace("+", "x").replace("/", "y")
    spec.write_text(QUICKSTART.read_text() + f'\n[launch.env]\nNOTE = "{value}"\n')
    with cpu_budget():
        result = _validate(str(spec))
    assert result.exit_code == 2
    assert len(result.output) < 20_000  # the value is not echoed whole


# ---- depth and volume are bounded -------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "a" + ".b" * 500 + " = 1\n",
        "[" + ".".join(["b"] * 500) + "]\nx = 1\n",
        "[" + ".".join(["b"] * 40) + "]\n" + ".".join(["c"] * 40) + " = 1\n",
        "a = {" + ".".join(["b"] * 300) + " = 1}\n",
        "[[" + ".".join(["b"] * 500) + "]]\n",
    ],
    ids=["dotted-key", "header", "header-plus-dotted", "inline", "array-of-tables"],
)
def test_deep_keys_are_positioned_errors(tmp_path: Path, text: str) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(text)
    with cpu_budget():
        result = _validate(str(spec))
    assert result.exit_code == 2, result.output[-2000:]
    diags = _positioned(result.output)
    assert any(d["code"] == "toml-limit" for d in diags), diags


def test_deep_dotted_override_is_a_positioned_error() -> None:
    with cpu_budget():
        result = _validate(str(QUICKSTART), "--set", "a" + ".b" * 500 + "=1")
    assert result.exit_code == 2, result.output[-2000:]
    _positioned(result.output)


def test_thousands_of_errors_are_capped(tmp_path: Path) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text("".join(f"[t{i}]\n" for i in range(20_000)))
    with cpu_budget():
        text = CliRunner().invoke(cli, ["validate", str(spec)])
    with cpu_budget():
        js = _validate(str(spec))
    assert text.exit_code == js.exit_code == 2
    diags = _positioned(js.output)
    assert len(diags) <= 101
    assert any(d["code"] == "too-many-errors" for d in diags)
    assert len(text.output) < 40_000


def test_long_source_lines_and_messages_are_clipped() -> None:
    line = "k = " + "x" * 100_000
    diag = Diagnostic("error", "c", "bad `" + "y" * 100_000 + "`", Span("s", 1, 50_000, 1, 50_005))
    out = render_all([diag], SourceMap({"s": line}))
    assert len(out) < 2_000
    assert "^" in out and "..." in out
    assert len(json.dumps(diag.to_json())) < 2_000


# ---- readers open only bounded regular files --------------------------------------------
def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _compiled(tmp_path: Path) -> Path:
    out = tmp_path / "build"
    result = CliRunner().invoke(cli, ["compile", str(QUICKSTART), "-o", str(out), "--no-cache"])
    assert result.exit_code == 0, result.output
    (manifest,) = out.glob("*/manifest.json")
    return manifest


def test_read_regular_refuses_fifos_devices_and_oversize(tmp_path: Path) -> None:
    with pytest.raises(NotReadable, match="FIFO"):
        read_regular(_fifo(tmp_path / "f"), 100)
    (tmp_path / "zero").symlink_to("/dev/zero")
    with pytest.raises(NotReadable, match="character device"):
        read_regular(tmp_path / "zero", 100)
    (tmp_path / "big").write_bytes(b"x" * 101)
    with pytest.raises(NotReadable, match="larger"):
        read_regular(tmp_path / "big", 100)
    with pytest.raises(NotReadable, match="directory"):
        read_regular(tmp_path, 100)
    assert read_regular(tmp_path / "big", 101) == b"x" * 101


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_lint_never_blocks_on_a_hostile_manifest(tmp_path: Path, kind: str) -> None:
    bad = tmp_path / "pr" / "manifest.json"
    bad.parent.mkdir()
    if kind == "fifo":
        _fifo(bad)
    else:
        bad.symlink_to("/dev/zero")
    # In a child process with a wall-clock bound: a blocked open would hang this test run.
    proc = subprocess.run(
        [sys.executable, "-m", "rlc_cli.main", "lint", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "not a regular file" in proc.stdout + proc.stderr
    report = lint_manifest(bad)
    assert not report.ok


def test_a_hostile_signature_is_refused_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = _compiled(tmp_path)
    _fifo(Path(str(manifest) + ".sig"))
    monkeypatch.setenv("RLC_MANIFEST_KEY", "k" * 32)
    from compiler.manifest.trust import SIGNING_KEY_ENV, read_signature

    monkeypatch.setenv(SIGNING_KEY_ENV, "k" * 32)
    with pytest.raises(OSError, match="FIFO"):
        read_signature(manifest)
    result = CliRunner().invoke(cli, ["lint", str(manifest)])
    assert result.exit_code == 1, result.output


def test_the_runtime_loader_refuses_a_fifo_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from contract.run import VERIFIED_ENV
    from runtime.manifest import ManifestError, load, verify

    fifo = _fifo(tmp_path / "manifest.json")
    with pytest.raises(ManifestError, match="not a regular file"):
        verify(fifo)
    # a process started by a verified one reads without blocking on it too
    monkeypatch.setenv(VERIFIED_ENV, "sha256:" + "0" * 64)
    with pytest.raises(ManifestError, match="not a regular file"):
        load(fifo)


def test_validate_refuses_a_fifo_spec(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["validate", str(_fifo(tmp_path / "spec.toml"))])
    assert result.exit_code == 2
    assert "not a regular file" in result.output


# ---- diagnostics say true things --------------------------------------------------------
def test_native_option_hints_name_real_fields() -> None:
    import re

    from compiler.emit.reference import catalog
    from compiler.spec.native_options import OWNED

    fields = set(catalog())
    named = [
        (tool, key, name)
        for tool, hints in OWNED.items()
        for key, hint in hints.items()
        for name in re.findall(r"\bset ([a-z_]+\.[a-z_.]*[a-z_])", hint)
    ]
    assert named
    assert [n for n in named if n[2] not in fields] == []


def test_explain_lists_every_variant_of_a_union_field() -> None:
    result = CliRunner().invoke(cli, ["explain", "judges.NAME.mode"])
    assert result.exit_code == 0
    assert '"managed"' in result.output and '"external"' in result.output


# ---- output.root policy -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("root", "code"),
    [
        ("runs/x", None),
        ("/tmp/my-run", None),
        ("/home/me/runs/x", None),
        ("/weka/oe-training-default/me/runs/x", None),
        ("/etc", "output-root-system"),
        ("/usr/local/run", "output-root-system"),
        ("/tmp", "output-root-system"),
        ("/opt/run", "output-root-outside"),
        ("/srv/data/run", "output-root-outside"),
        ("/nonexistent/run", "output-root-outside"),
        ("/home/me", "output-root-outside"),
        ("/weka/other-bucket/run", "output-root-outside"),
        ("../../../../../../../../../../etc", "output-root-outside"),
        ("../outside", "output-root-outside"),
    ],
)
def test_output_root_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, root: str, code: str | None
) -> None:
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "spec.toml"
    spec.write_text(
        'schema_version = 1\nname = "p"\n[model]\nsource = "builtin:tiny"\n'
        '[data]\ntasks = [{task = "gsm8k"}]\n[output]\nroot = "runs/x"\n'
    )
    result = compile_spec("spec.toml", [f'output.root="{root}"'])
    codes = [d.code for d in result.errors if d.code.startswith("output-root")]
    assert codes == ([code] if code else []), (root, codes)
    if code == "output-root-outside":
        allowed = compile_spec("spec.toml", [f'output.root="{root}"', "output.allow_outside=true"])
        assert not [d for d in allowed.errors if d.code.startswith("output-root")]
