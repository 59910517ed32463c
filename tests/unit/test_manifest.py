"""Manifest: canonical JSON, digest, immutability, tamper detection, reproducibility."""

from __future__ import annotations

import json
import math
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.diagnostics import DiagnosticError
from compiler.manifest.manifest import load_manifest, manifest_bytes, write_manifest
from compiler.pipeline import compile_spec
from contract.canonical import CanonicalError, canonical_bytes, digest_of

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = "specs/examples/quickstart.toml"


@pytest.fixture(scope="module")
def manifest() -> dict[str, object]:
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return compile_spec(QUICKSTART).manifest()
    finally:
        os.chdir(cwd)


def test_canonical_json() -> None:
    assert canonical_bytes({"b": 1, "a": [1.5, 2, "é"]}) == '{"a":[1.5,2,"é"],"b":1}\n'.encode()
    assert canonical_bytes({"x": 1.0}) == b'{"x":1.0}\n'
    assert json.loads(canonical_bytes({"f": 0.1})) == {"f": 0.1}
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(CanonicalError):
            canonical_bytes({"x": [bad]})
    with pytest.raises(CanonicalError):
        canonical_bytes({"x": {1, 2}})


def test_manifest_shape(manifest: dict[str, object]) -> None:
    m = manifest
    for key in (
        "manifest_version",
        "schema_version",
        "name",
        "digest",
        "compiler",
        "source",
        "config",
        "provenance",
        "plan",
        "commands",
        "runtime_lock",
        "paths",
    ):
        assert key in m
    assert m["source"]["path"] == QUICKSTART  # type: ignore[index]
    assert m["compiler"]["schema_digest"].startswith("sha256:")  # type: ignore[index]
    assert m["compiler"]["rules_digest"].startswith("sha256:")  # type: ignore[index]
    assert m["commands"]["trainer_argv"] == [
        "python",
        "-m",
        "runtime.entrypoints.execute",
        "{manifest}",
    ]  # type: ignore[index]
    assert len(m["commands"]["engine_argv"]) == 2  # type: ignore[index]
    assert m["paths"]["root"] == "runs/quickstart"  # type: ignore[index]
    body = {k: v for k, v in m.items() if k != "digest"}
    assert m["digest"] == digest_of(body)
    assert isinstance(m["config"]["inference"]["max_context_length"], int)  # type: ignore[index]


def test_write_is_atomic_readonly_and_immutable(
    tmp_path: Path, manifest: dict[str, object]
) -> None:
    path = tmp_path / "q" / "manifest.json"
    write_manifest(manifest, path)
    assert path.read_bytes() == manifest_bytes(manifest)
    assert stat.S_IMODE(path.stat().st_mode) == 0o444
    write_manifest(manifest, path)  # same bytes: no-op
    other = json.loads(json.dumps(manifest))
    other["config"]["training"]["num_rollouts"] = 7
    other["digest"] = digest_of({k: v for k, v in other.items() if k != "digest"})
    with pytest.raises(DiagnosticError) as err:
        write_manifest(other, path)
    assert err.value.diagnostics[0].code == "manifest-exists"
    assert path.read_bytes() == manifest_bytes(manifest)
    assert [p.name for p in path.parent.iterdir()] == ["manifest.json"]  # no temp files left


def test_load_verifies(tmp_path: Path, manifest: dict[str, object]) -> None:
    path = write_manifest(manifest, tmp_path / "manifest.json")
    assert load_manifest(path) == manifest
    tampered = tmp_path / "t.json"
    data = json.loads(path.read_text())
    data["config"]["optimizer"]["lr"] = 0.5
    tampered.write_bytes(canonical_bytes(data))
    with pytest.raises(DiagnosticError) as err:
        load_manifest(tampered)
    assert [d.code for d in err.value.diagnostics] == ["manifest-digest"]
    data = json.loads(path.read_text())
    data["manifest_version"] = 9
    data["digest"] = digest_of({k: v for k, v in data.items() if k != "digest"})
    (tmp_path / "v.json").write_bytes(canonical_bytes(data))
    with pytest.raises(DiagnosticError) as err:
        load_manifest(tmp_path / "v.json")
    assert [d.code for d in err.value.diagnostics] == ["manifest-version"]
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(DiagnosticError):
        load_manifest(tmp_path / "x.json")
    with pytest.raises(DiagnosticError):
        load_manifest(tmp_path / "missing.json")


_SCRIPT = (
    "import sys; from compiler.pipeline import compile_spec; from compiler.manifest.manifest import manifest_bytes;"
    "sys.stdout.buffer.write(manifest_bytes(compile_spec(sys.argv[1], sys.argv[2:]).manifest()))"
)


@pytest.mark.parametrize("spec", [QUICKSTART, "specs/examples/multinode.toml"])
def test_byte_identical_across_processes(spec: str, manifest: dict[str, object]) -> None:
    outs = []
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run(
            [sys.executable, "-c", _SCRIPT, spec, "training.num_rollouts=3"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            timeout=120,
            check=True,
        )
        outs.append(proc.stdout)
    assert outs[0] == outs[1]
    assert json.loads(outs[0])["source"]["overrides"] == ["training.num_rollouts=3"]
    if spec == QUICKSTART:
        assert json.loads(outs[0])["digest"] != manifest["digest"]
