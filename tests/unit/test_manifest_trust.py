"""The runtime's manifest loader re-checks lint and re-derives every derived field.

Each forgery recomputes the (unkeyed) digest, as an attacker would; each must be refused by
`compiler.manifest.trust` and by `python -m runtime.entrypoints.execute` (exit 2, nothing started).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from compiler.diagnostics import DiagnosticError
from compiler.manifest.trust import (
    check_manifest,
    load_trusted,
    rederive,
    sign_bytes,
    signature_path,
)
from compiler.pipeline import compile_spec
from contract.canonical import canonical_bytes, digest_of
from rlc_cli.main import cli as rlc

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "specs" / "examples").glob("*.toml"))


@pytest.fixture(scope="module")
def manifest() -> dict[str, Any]:
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return compile_spec("specs/examples/quickstart.toml").manifest()
    finally:
        os.chdir(cwd)


def _forge(manifest: dict[str, Any], edit: Callable[[dict[str, Any]], None]) -> bytes:
    m = copy.deepcopy(manifest)
    edit(m)
    m["digest"] = digest_of({k: v for k, v in m.items() if k != "digest"})
    return canonical_bytes(m)


def _codes(data: bytes, env: dict[str, str] | None = None) -> list[str]:
    loaded, problems = check_manifest("m.json", data, env or {})
    assert (loaded is None) == bool(problems)
    return [d.code for d in problems]


@pytest.mark.parametrize("spec", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_rederives_exactly(spec: Path) -> None:
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        m = compile_spec(str(spec.relative_to(ROOT))).manifest()
    finally:
        os.chdir(cwd)
    fresh = rederive(m)
    for key in ("config", "plan", "facts", "paths", "commands"):
        assert fresh[key] == m[key], key
    assert _codes(canonical_bytes(m)) == []


def test_untouched_manifest_loads(manifest: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    path.write_bytes(canonical_bytes(manifest))
    assert load_trusted(path, {})["digest"] == manifest["digest"]


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m["commands"]["engine_argv"].__setitem__(0, ["sh", "-c", "touch /tmp/pwned"]),
        lambda m: m["commands"].__setitem__("router_argv", ["sh", "-c", "id"]),
        lambda m: m["commands"].__setitem__("trainer_argv", ["bash"]),
        lambda m: m["paths"].__setitem__("root", "/etc"),
        lambda m: m["paths"].__setitem__("checkpoints", "/etc/cron.d"),
        lambda m: m["plan"]["batch"].__setitem__("micro_batch_size", 4),
        lambda m: m["plan"]["placement"].__setitem__("engines", []),
        lambda m: m["facts"].__setitem__("judge_names", ["ghost"]),
        # a default value edited without a spec line that sets it
        lambda m: m["config"]["optimizer"].__setitem__("weight_decay", 0.5),
    ],
    ids=[
        "engine-argv",
        "router-argv",
        "trainer-argv",
        "paths-root",
        "paths-checkpoints",
        "plan",
        "plan-engines",
        "facts",
        "default-value",
    ],
)
def test_edited_derived_field_is_refused(
    manifest: dict[str, Any], edit: Callable[[dict[str, Any]], None]
) -> None:
    codes = _codes(_forge(manifest, edit))
    # refused: by the re-derivation, or earlier by a rule that sees the forged value
    assert codes and set(codes) <= {"manifest-derived", "judges-without-bindings"}


def test_schema_rule_and_stale_rules_are_refused(manifest: dict[str, Any]) -> None:
    schema = _forge(manifest, lambda m: m["config"]["trainer"].__setitem__("bogus", 1))
    assert "manifest-schema" in _codes(schema)
    rule = _forge(manifest, lambda m: m["config"]["trainer"].__setitem__("micro_batch_size", 2))
    assert any(c not in ("manifest-derived",) for c in _codes(rule))
    stale = _forge(
        manifest, lambda m: m["compiler"].__setitem__("rules_digest", "sha256:" + "0" * 64)
    )
    assert "manifest-stale" in _codes(stale)


def test_non_canonical_and_duplicate_keys_are_refused(manifest: dict[str, Any]) -> None:
    raw = canonical_bytes(manifest)
    dup = raw.replace(b'{"async":', b'{"async":{},"async":', 1)
    assert "manifest-invalid" in _codes(dup)
    assert "manifest-not-canonical" in _codes(raw.replace(b'":', b'": ', 1))


def test_pinned_digest_from_the_environment(manifest: dict[str, Any]) -> None:
    raw = canonical_bytes(manifest)
    assert _codes(raw, {"RLC_MANIFEST_SHA256": manifest["digest"]}) == []
    assert _codes(raw, {"RLC_MANIFEST_SHA256": "sha256:" + "1" * 64}) == ["manifest-digest"]


def test_signature_required_when_a_key_is_set(manifest: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    raw = canonical_bytes(manifest)
    path.write_bytes(raw)
    assert load_trusted(path, {})  # no key: signatures are not part of the check
    with pytest.raises(DiagnosticError, match="no signature"):
        load_trusted(path, {"RLC_SIGNING_KEY": "team-key"})
    signature_path(path).write_text(sign_bytes(raw, "team-key") + "\n")
    assert load_trusted(path, {"RLC_SIGNING_KEY": "team-key"})
    with pytest.raises(DiagnosticError, match="another key"):
        load_trusted(path, {"RLC_SIGNING_KEY": "other-key"})


def test_compile_sign_and_lint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    out = tmp_path / "b"
    runner = CliRunner()
    monkeypatch.delenv("RLC_SIGNING_KEY", raising=False)
    res = runner.invoke(
        rlc, ["compile", "specs/examples/quickstart.toml", "-o", str(out), "--sign"]
    )
    assert res.exit_code == 2 and "RLC_SIGNING_KEY" in res.output
    monkeypatch.setenv("RLC_SIGNING_KEY", "k1")
    res = runner.invoke(
        rlc, ["compile", "specs/examples/quickstart.toml", "-o", str(out), "--sign"]
    )
    assert res.exit_code == 0, res.output
    manifest = next(out.rglob("manifest.json"))
    assert signature_path(manifest).is_file()
    assert runner.invoke(rlc, ["lint", str(manifest)]).exit_code == 0
    monkeypatch.setenv("RLC_SIGNING_KEY", "k2")
    res = runner.invoke(rlc, ["lint", str(manifest)])
    assert res.exit_code == 1 and "manifest-signature" in res.output


def test_signature_travels_in_the_beaker_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rlc compile --sign`: each job script writes the manifest and its .sig where the
    runtime reads them; the runtime verifies the pair under RLC_SIGNING_KEY."""
    import subprocess

    import yaml

    from rlc_cli.launch.beaker import render_specs
    from runtime.manifest import manifest_signature

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("RLC_SIGNING_KEY", "k1")
    out = tmp_path / "b"
    res = CliRunner().invoke(
        rlc, ["compile", "specs/examples/quickstart.toml", "-o", str(out), "--sign"]
    )
    assert res.exit_code == 0, res.output
    manifest_path = next(out.rglob("manifest.json"))
    sig = manifest_signature(manifest_path)
    assert sig is not None and sig.startswith("hmac-sha256:")
    train = yaml.safe_load((manifest_path.parent / "beaker" / "train.yaml").read_text())
    script = train["tasks"][0]["arguments"][0]
    assert f"echo {sig} > /rlc/manifest.json.sig" in script
    # the job's own lines, pointed at a scratch directory, give a pair the runtime accepts
    job = tmp_path / "job"
    job.mkdir()
    lines = [ln for ln in script.splitlines() if ln.startswith("echo ")]
    subprocess.run(
        ["bash", "-c", "\n".join(lines).replace("/rlc/", f"{job}/")], check=True, timeout=60
    )
    assert load_trusted(job / "manifest.json", {"RLC_SIGNING_KEY": "k1"})
    with pytest.raises(DiagnosticError, match="another key"):
        load_trusted(job / "manifest.json", {"RLC_SIGNING_KEY": "k2"})
    # `rlc launch` renders from the manifest file: the signature beside it travels too
    import json

    def script_of(text: str) -> str:
        return str(yaml.safe_load(text)["tasks"][0]["arguments"][0])

    launched = render_specs(json.loads(manifest_path.read_text()), sig)["train"]
    assert f"echo {sig} > /rlc/manifest.json.sig" in script_of(launched)
    unsigned = render_specs(json.loads(manifest_path.read_text()))["train"]
    assert ".sig" not in script_of(unsigned)


def test_runtime_execute_refuses_a_forged_command(
    manifest: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runtime.entrypoints.execute import main as execute

    marker = tmp_path / "pwned"
    forged = _forge(
        manifest,
        lambda m: m["commands"]["engine_argv"].__setitem__(0, ["touch", str(marker)]),
    )
    path = tmp_path / "manifest.json"
    path.write_bytes(forged)
    monkeypatch.delenv("RLC_SIGNING_KEY", raising=False)
    assert execute([str(path)]) == 2
    assert not marker.exists()


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m["commands"]["engine_argv"].__setitem__(0, ["sh", "-c", "id"]),
        lambda m: m["commands"]["router_argv"].append("--evil"),
        lambda m: m["paths"].__setitem__("checkpoints", "/tmp/elsewhere"),
    ],
    ids=["engine-argv", "router-argv", "path"],
)
def test_plain_lint_catches_forged_commands_and_paths(
    manifest: dict[str, Any], tmp_path: Path, edit: Callable[[dict[str, Any]], None]
) -> None:
    path = tmp_path / "manifest.json"
    path.write_bytes(_forge(manifest, edit))
    runner = CliRunner()
    for argv in (["lint", str(path)], ["lint", "--rederive", str(path)]):
        res = runner.invoke(rlc, argv)
        assert res.exit_code == 1 and "manifest-derived" in res.output, argv


def test_lint_rederive_catches_a_forged_derived_value(
    manifest: dict[str, Any], tmp_path: Path
) -> None:
    """A derived config value edited consistently everywhere plain lint looks (the engine
    command line follows it): only re-deriving from what the user wrote shows it."""

    def edit(m: dict[str, Any]) -> None:
        m["config"]["inference"]["max_total_tokens"] += 64
        from compiler.resolve.argv import engine_argv

        m["commands"]["engine_argv"] = engine_argv(m["config"], m["plan"], m["paths"])

    path = tmp_path / "manifest.json"
    path.write_bytes(_forge(manifest, edit))
    runner = CliRunner()
    assert runner.invoke(rlc, ["lint", str(path)]).exit_code == 0  # consistent artifacts
    res = runner.invoke(rlc, ["lint", "--rederive", str(path)])
    assert res.exit_code == 1 and "manifest-derived" in res.output


def test_the_runtime_loads_manifests_only_through_trust() -> None:
    offenders = []
    for path in sorted((ROOT / "runtime").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "load_manifest(" in text or "verify_manifest(" in text:
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == [], "the runtime reads manifests with compiler.manifest.trust.load_trusted"
