"""rlc docs --check, explain, lint, diff, launch --dry-run and status, through the real CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RLC = [sys.executable, "-m", "rlc_cli.main"]


def rlc(*args: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*RLC, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("build")
    for name in ("quickstart", "gsm8k-dense"):
        r = rlc("compile", f"specs/examples/{name}.toml", "-o", str(out))
        assert r.returncode == 0, r.stderr
    return out


def test_docs_check_passes_on_the_committed_tree():
    r = rlc("docs", "--check")
    assert r.returncode == 0, r.stdout + r.stderr


def test_docs_check_detects_a_stale_file(tmp_path):
    for sub in ("docs", "schemas"):
        shutil.copytree(ROOT / sub, tmp_path / sub)
    assert rlc("docs", "--check", "--root", str(tmp_path)).returncode == 0
    conf = tmp_path / "docs" / "configuration.md"
    conf.write_text(conf.read_text() + "\nhand edit\n")
    r = rlc("docs", "--check", "--root", str(tmp_path))
    assert r.returncode == 1 and "configuration.md" in r.stdout
    assert rlc("docs", "--root", str(tmp_path)).returncode == 0
    assert rlc("docs", "--check", "--root", str(tmp_path)).returncode == 0


def test_configuration_reference_lists_every_field():
    from compiler.emit.reference import catalog

    text = (ROOT / "docs" / "configuration.md").read_text()
    missing = [p for p in catalog() if "." in p and f"`{p}`" not in text]
    assert not missing


def test_explain_field_rule_native_and_unknown():
    r = rlc("explain", "trainer.expert_parallel")
    assert r.returncode == 0 and "expert-parallel-divides-world" in r.stdout
    r = rlc("explain", "trainer-parallelism")
    assert r.returncode == 0 and "when" in r.stdout and "trainer.tensor_parallel > 1" in r.stdout
    r = rlc("explain", "native.sglang.chunked_prefill_size")
    assert r.returncode == 0 and "chunked prefill" in r.stdout.lower()
    r = rlc("explain", "trainer.expert_paralel")
    assert r.returncode == 2 and "did you mean 'trainer.expert_parallel'" in r.stderr
    assert "Traceback" not in r.stderr


def test_explain_manifest_value_walks_to_spec_lines(built):
    manifest = built / "quickstart" / "manifest.json"
    r = rlc("explain", str(manifest), "inference.max_total_tokens")
    assert r.returncode == 0, r.stderr
    assert "derived by" in r.stdout
    assert "specs/examples/quickstart.toml:" in r.stdout  # an input set in the spec
    r = rlc("explain", str(manifest), "inference.max_total_tokenz")
    assert r.returncode == 2 and "did you mean" in r.stderr


def test_lint_clean_tampered_stale_and_schema_invalid(built, tmp_path):
    good = built / "quickstart" / "manifest.json"
    assert rlc("lint", str(good)).returncode == 0

    data = json.loads(good.read_text())
    tampered = tmp_path / "tampered" / "manifest.json"
    tampered.parent.mkdir()
    body = dict(
        data, config={**data["config"], "optimizer": {**data["config"]["optimizer"], "lr": 0.5}}
    )
    tampered.write_text(json.dumps(body, sort_keys=True, separators=(",", ":")) + "\n")
    r = rlc("lint", str(tampered))
    assert r.returncode == 1 and "manifest-digest" in r.stdout

    from compiler.manifest.manifest import digest_of

    def resealed(doc: dict, where: str) -> Path:
        doc = {k: v for k, v in doc.items() if k != "digest"}
        doc["digest"] = digest_of(doc)
        path = tmp_path / where / "manifest.json"
        path.parent.mkdir()
        path.write_text(
            json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"
        )
        return path

    stale = resealed(
        {**data, "compiler": {**data["compiler"], "rules_digest": "sha256:" + "0" * 64}}, "stale"
    )
    r = rlc("lint", str(stale))
    assert r.returncode == 1 and "manifest-stale" in r.stdout

    bad = resealed({**data, "plan": {**data["plan"], "batch": "not an object"}}, "schema")
    r = rlc("lint", str(bad), "--format", "json")
    assert r.returncode == 1
    report = json.loads(r.stdout)
    assert any(f["code"] == "manifest-schema" for f in report[0]["findings"])

    rules_broken = resealed(
        {
            **data,
            "config": {
                **data["config"],
                "trainer": {**data["config"]["trainer"], "tensor_parallel": 2},
            },
        },
        "rules",
    )
    r = rlc("lint", str(rules_broken))
    assert r.returncode == 1 and "trainer-parallelism" in r.stdout


def test_diff_reports_changes_with_provenance(built):
    a = built / "quickstart" / "manifest.json"
    assert rlc("diff", str(a), str(a)).returncode == 0
    r = rlc("diff", "specs/examples/quickstart.toml", str(a))
    assert r.returncode == 0, r.stdout + r.stderr
    b = built / "gsm8k-dense" / "manifest.json"
    r = rlc("diff", str(a), str(b), "--format", "json")
    assert r.returncode == 1
    changes = {c["path"]: c for c in json.loads(r.stdout)}
    assert "model.source" in changes
    assert changes["model.source"]["left_origin"].startswith("spec specs/examples/quickstart.toml:")


def test_launch_dry_run_writes_a_receipt_and_status_lists_it(built, tmp_path):
    env = {"RLC_RECEIPTS_DIR": str(tmp_path / "receipts")}
    r = rlc("launch", str(built / "gsm8k-dense" / "manifest.json"), "--dry-run", env=env)
    assert r.returncode == 0, r.stderr
    assert "RLC_LAUNCH_ID" in r.stdout
    receipts = list((tmp_path / "receipts").glob("*.json"))
    assert len(receipts) == 1
    receipt = json.loads(receipts[0].read_text())
    assert receipt["dry_run"] is True and receipt["manifest_digest"].startswith("sha256:")
    r = rlc("status", "--no-remote", env=env)
    assert r.returncode == 0 and "gsm8k-dense" in r.stdout
    r = rlc("status", "nosuchrun", env=env)
    assert r.returncode == 2
