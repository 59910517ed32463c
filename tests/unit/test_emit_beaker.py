"""Beaker specs rendered from manifests: valid, deterministic, carrying the manifest."""

from __future__ import annotations

import base64
import gzip
import json
import os
from pathlib import Path

import pytest
import yaml

from compiler.emit.beaker import embed_manifest, render_beaker
from compiler.emit.beaker_model import validate_beaker_spec
from compiler.manifest.manifest import manifest_bytes
from compiler.pipeline import compile_spec

ROOT = Path(__file__).resolve().parents[2]


def _compile(name: str, *overrides: str) -> tuple[dict, str]:
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        manifest = compile_spec(Path("specs/examples") / f"{name}.toml", list(overrides)).manifest()
    finally:
        os.chdir(cwd)
    return manifest, manifest_bytes(manifest).decode()


@pytest.mark.parametrize("name", [p.stem for p in (ROOT / "specs/examples").glob("*.toml")])
def test_every_example_renders_a_valid_training_spec(name):
    manifest, text = _compile(name)
    files = render_beaker(manifest, text).files
    spec = validate_beaker_spec(yaml.safe_load(files["train.yaml"]))
    assert len(spec.tasks) == 1, "a distributed run is one task with replicas, never N tasks"


def test_manifest_travels_inside_the_job_byte_for_byte():
    manifest, text = _compile("quickstart")
    script = yaml.safe_load(render_beaker(manifest, text).files["train.yaml"])["tasks"][0][
        "arguments"
    ][0]
    payload = script.split("echo ", 1)[1].split(" ", 1)[0]
    assert gzip.decompress(base64.b64decode(payload)).decode() == text
    assert "python -m runtime.entrypoints.execute /rlc/manifest.json" in script


def test_rendering_is_deterministic():
    manifest, text = _compile("gsm8k-dense")
    assert embed_manifest(text) == embed_manifest(text)
    assert render_beaker(manifest, text).files == render_beaker(manifest, text).files


def test_multinode_is_one_replicated_task():
    manifest, text = _compile("multinode")
    task = yaml.safe_load(render_beaker(manifest, text).files["train.yaml"])["tasks"][0]
    nodes = len(manifest["plan"]["placement"]["nodes"])
    assert nodes > 1
    assert task["replicas"] == nodes
    for flag in ("leaderSelection", "hostNetworking", "propagateFailure", "propagatePreemption"):
        assert task[flag] is True
    assert task["resources"]["gpuCount"] == 8
    mounts = {d["mountPath"] for d in task["datasets"]}
    assert {m["mount_path"] for m in manifest["config"]["launch"]["weka_mounts"]} == mounts


def test_env_values_and_secrets_by_name_only():
    manifest, text = _compile(
        "gsm8k-dense", 'launch.env.MY_FLAG="1"', 'launch.secrets.HF_TOKEN="my-hf-secret"'
    )
    env = yaml.safe_load(render_beaker(manifest, text).files["train.yaml"])["tasks"][0]["envVars"]
    by_name = {e["name"]: e for e in env}
    assert by_name["MY_FLAG"] == {"name": "MY_FLAG", "value": "1"}
    assert by_name["HF_TOKEN"] == {"name": "HF_TOKEN", "secret": "my-hf-secret"}
    assert by_name["RLC_MANIFEST_SHA256"]["value"] == manifest["digest"]
    assert "my-hf-secret" not in json.dumps([e.get("value") for e in env])


def test_beaker_py_reads_what_we_emit():
    beaker = pytest.importorskip("beaker", reason="beaker-py 2.x not installed")
    manifest, text = _compile("multinode")
    data = yaml.safe_load(render_beaker(manifest, text).files["train.yaml"])
    spec = beaker.BeakerExperimentSpec.from_json(data)
    back = spec.to_json()
    assert back["tasks"][0]["replicas"] == data["tasks"][0]["replicas"]
    validate_beaker_spec(back)
