"""The runtime refuses a tampered manifest (exit 2, a clear message, nothing started)."""

from __future__ import annotations

import json
from pathlib import Path

from rt_helpers import compile_manifest, run


def test_tampered_manifest_is_refused(tmp_path: Path) -> None:
    manifest = compile_manifest(tmp_path)
    data = json.loads(manifest.read_text())
    data["config"]["optimizer"]["lr"] = 0.5  # edited after compilation
    bad = tmp_path / "tampered.json"
    bad.write_text(json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n")
    code, out = run(bad, timeout=60)
    assert code == 2, out
    assert "digest" in out.lower()
    assert "Traceback" not in out
    assert not (tmp_path / "run" / "logs").exists()  # no process was started


def test_missing_manifest_is_a_user_error(tmp_path: Path) -> None:
    code, out = run(tmp_path / "nope.json", timeout=60)
    assert code == 2 and "no such manifest" in out
