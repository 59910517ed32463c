"""A run directory holding another experiment's checkpoints is refused before anything
starts; a continuation of the same experiment (longer run, other save cadence) reuses it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from runtime.checkpoints.identity import resume_key
from runtime.checkpoints.manager import COMPLETE, META, CheckpointMismatch, _check, step_dir_name
from runtime.entrypoints.execute import _output_root_conflict

BASE = {
    "model": {"source": "builtin:tiny"},
    "optimizer": {"lr": 1e-6},
    "training": {"num_rollouts": 4, "kl_coef": 0.0},
    "checkpoint": {"interval": 2},
    "tracking": {"project": "a"},
}


def _config(**changes):
    config = json.loads(json.dumps(BASE))
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        config[section][key] = value
    return config


def _cfg(tmp_path, digest, config=None):
    paths = SimpleNamespace(root=tmp_path, checkpoints=tmp_path / "checkpoints")
    return SimpleNamespace(paths=paths, digest=digest, config_document=config or BASE)


def _checkpoint(tmp_path, digest, config=None):
    step = tmp_path / "checkpoints" / step_dir_name(5)
    step.mkdir(parents=True)
    meta = {"step": 5, "digest": digest}
    if config is not None:
        meta["resume_key"] = resume_key(config)
        manifests = tmp_path / "manifests"
        manifests.mkdir()
        body = {"digest": digest, "config": config}
        (manifests / f"spec-{digest.removeprefix('sha256:')[:16]}.json").write_text(
            json.dumps(body)
        )
    (step / META).write_text(json.dumps(meta))
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


def test_a_longer_run_continues_the_same_experiment(tmp_path):
    _checkpoint(tmp_path, "sha256:first", BASE)
    longer = _config(training__num_rollouts=10, checkpoint__interval=5, tracking__project="b")
    assert _output_root_conflict(_cfg(tmp_path, "sha256:second", longer), "required") is None


def test_a_different_experiment_names_what_differs(tmp_path):
    _checkpoint(tmp_path, "sha256:first", BASE)
    other = _config(optimizer__lr=2e-6, training__num_rollouts=10)
    message = _output_root_conflict(_cfg(tmp_path, "sha256:second", other), "auto")
    assert message is not None
    assert "optimizer.lr" in message and "num_rollouts" not in message


def test_resume_key_ignores_only_continuation_fields():
    assert resume_key(BASE) == resume_key(_config(training__num_rollouts=99))
    assert resume_key(BASE) != resume_key(_config(training__kl_coef=0.1))


def test_checkpoint_load_check_uses_the_resume_key(tmp_path):
    meta = {"digest": "sha256:first", "resume_key": resume_key(BASE)}
    _check(meta, None, "sha256:second", tmp_path, resume_key(_config(training__num_rollouts=8)))
    with pytest.raises(CheckpointMismatch, match="different experiment"):
        _check(meta, None, "sha256:second", tmp_path, resume_key(_config(optimizer__lr=1.0)))
    legacy = {"digest": "sha256:first"}  # written before resume keys: digest must match
    with pytest.raises(CheckpointMismatch):
        _check(legacy, None, "sha256:second", tmp_path, resume_key(BASE))
