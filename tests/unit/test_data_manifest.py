"""Data manifests: prepare, verify (tamper detection), immutability, and `rlc data`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from compiled_run import contract

from contract.spec.data import DataSection
from contract.spec.root import Spec
from runtime.data.manifest import (
    DataManifestError,
    load_prompts,
    prepare_data,
    verify_data_manifest,
)


def _config(root: Path, inference: dict | None = None, **data: object) -> Spec:
    """A compiled spec (the contract's type) with these ``[data]`` values."""
    d: dict = {
        "tasks": [
            {"task": "arithmetic", "train_count": 20, "eval_count": 4},
            {"task": "multiplication", "train_count": 6},
        ],
        "seed": 3,
    }
    d.update(data)
    return contract(root, data=d, inference=inference or {}).config


def test_prepare_verify_and_load(tmp_path: Path) -> None:
    res = prepare_data(_config(tmp_path))
    assert res.manifest_path == tmp_path / "prepared" / "data" / "data-manifest.json"
    assert (res.train_count, res.eval_count) == (26, 4)
    m = verify_data_manifest(res.manifest_path.parent)
    assert m.body["files"]["train"]["records"] == 26
    assert m.body["verifiers"] == ["arithmetic", "multiplication"]
    assert (
        m.verifier_registry()["arithmetic"]["factory"]
        == "runtime.rewards.arithmetic.ArithmeticVerifier"
    )
    train = m.prompts("train")
    assert [p.id for p in train] == [p.id for p in load_prompts(_config(tmp_path).data)[0]]
    via = load_prompts(DataSection(manifest=str(res.manifest_path)))
    assert [p.to_json() for p in via[0]] == [p.to_json() for p in train]
    assert not os.access(m.file("train"), os.W_OK) or os.geteuid() == 0
    # same inputs again: accepted, byte-identical
    again = prepare_data(_config(tmp_path))
    assert again.manifest["digest"] == res.manifest["digest"]


def test_preparing_different_data_into_the_same_place_is_refused(tmp_path: Path) -> None:
    prepare_data(_config(tmp_path))
    with pytest.raises(DataManifestError, match="immutable"):
        prepare_data(_config(tmp_path, seed=4))


def test_tampering_is_detected(tmp_path: Path) -> None:
    res = prepare_data(_config(tmp_path))
    train = res.manifest_path.parent / "train.jsonl"
    os.chmod(train, 0o644)
    train.write_text(train.read_text().replace('"7"', '"8"', 1))
    with pytest.raises(DataManifestError, match="train file .* was modified after preparation"):
        verify_data_manifest(res.manifest_path)
    body = json.loads(res.manifest_path.read_text())
    body["seed"] = 99
    os.chmod(res.manifest_path, 0o644)
    res.manifest_path.write_text(json.dumps(body))
    with pytest.raises(DataManifestError, match="digest mismatch"):
        verify_data_manifest(res.manifest_path)
    with pytest.raises(DataManifestError, match="does not exist"):
        verify_data_manifest(tmp_path / "missing.json")


class _Tok:
    def encode(self, text: str) -> list[int]:
        return list(range(len(text)))


def test_over_long_prompts_error_or_drop_with_report(tmp_path: Path) -> None:
    short = {"max_context_length": 8, "max_response_length": 4}  # prompts up to 4 tokens
    product = {"task": "multiplication", "digits": [2, 2], "train_count": 3}
    cfg = _config(tmp_path, inference=short, tasks=[product])
    assert cfg.inference.max_prompt_length == 4  # "12*34=" is 6 characters
    from runtime.data.render import PromptTooLong

    with pytest.raises(PromptTooLong, match="3 of 3 prompts exceed"):
        prepare_data(cfg, tokenizer=_Tok())
    both = [product, {"task": "arithmetic", "train_count": 2}]
    cfg = _config(tmp_path, inference=short, tasks=both)
    res = prepare_data(cfg, tokenizer=_Tok(), on_overflow="drop")
    assert res.train_count == 2 and len(res.dropped) == 3
    assert res.manifest["dropped_over_length"] == res.dropped


def test_cli_prepare_and_verify(tmp_path: Path) -> None:
    from rlc_cli.main import cli

    spec = Path(__file__).resolve().parents[2] / "specs" / "examples" / "quickstart.toml"
    if not spec.exists():
        pytest.skip("quickstart spec not present")
    out = tmp_path / "prep"
    runner = CliRunner()
    r = runner.invoke(cli, ["data", "prepare", str(spec), "-o", str(out)])
    if r.exit_code == 3 and "pipeline" in r.output:
        pytest.skip("compiler pipeline not available")
    assert r.exit_code == 0, r.output
    assert "train prompts: 6400" in r.output
    r = runner.invoke(cli, ["data", "verify", str(out)])
    assert r.exit_code == 0 and "ok " in r.output
    os.chmod(out / "eval.jsonl", 0o644)
    (out / "eval.jsonl").write_text("")
    r = runner.invoke(cli, ["data", "verify", str(out)])
    assert r.exit_code == 2 and "modified after preparation" in r.output
