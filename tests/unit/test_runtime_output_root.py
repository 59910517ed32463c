"""A run directory holding another spec's checkpoints is refused before anything starts."""

from __future__ import annotations

import json
from types import SimpleNamespace

from runtime.checkpoints.manager import COMPLETE, META, step_dir_name
from runtime.execute import _output_root_conflict


def _cfg(tmp_path, digest):
    paths = SimpleNamespace(root=tmp_path, checkpoints=tmp_path / "checkpoints")
    return SimpleNamespace(paths=paths, digest=digest)


def _checkpoint(tmp_path, digest):
    step = tmp_path / "checkpoints" / step_dir_name(5)
    step.mkdir(parents=True)
    (step / META).write_text(json.dumps({"step": 5, "digest": digest}))
    (step / COMPLETE).write_text("")


def test_fresh_directory_is_fine(tmp_path):
    assert _output_root_conflict(_cfg(tmp_path, "sha256:a"), "auto") is None


def test_same_spec_resumes(tmp_path):
    _checkpoint(tmp_path, "sha256:a")
    assert _output_root_conflict(_cfg(tmp_path, "sha256:a"), "auto") is None


def test_other_spec_is_refused_with_a_way_out(tmp_path):
    _checkpoint(tmp_path, "sha256:other")
    message = _output_root_conflict(_cfg(tmp_path, "sha256:a"), "auto")
    assert message is not None
    assert "sha256:other" in message and "fresh directory" in message


def test_resume_never_still_protects_another_specs_checkpoints(tmp_path):
    _checkpoint(tmp_path, "sha256:other")
    assert _output_root_conflict(_cfg(tmp_path, "sha256:a"), "never") is not None
