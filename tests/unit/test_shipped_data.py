"""A fresh clone needs no folder beside it: the quickstart's data and every default task
data set resolve inside the checkout (the data rlc ships, each with its license)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from compiler.pipeline import compile_spec
from runtime.data.tasks import SHIPPED_DATA, data_roots, load_task

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "specs" / "examples").glob("*.toml"))


def _inside_checkout(path: Path) -> bool:
    return path.resolve().is_relative_to(ROOT)


def _local(path: str) -> bool:
    return not path.startswith("/weka/")  # cluster examples name their cluster's storage


def test_default_data_comes_from_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLC_DATA_ROOT", raising=False)
    assert data_roots() == [SHIPPED_DATA]
    assert _inside_checkout(SHIPPED_DATA)
    for task in ("gsm8k", "math", "ifeval", "code"):
        data = load_task({"task": task, "train_count": 4, "eval_count": 2}, 17)
        assert data.files and all(_inside_checkout(f) for f in data.files), task
        assert len(data.train) == 4 and len(data.eval) == 2


def test_every_shipped_data_set_carries_its_license() -> None:
    readme = (SHIPPED_DATA / "README.md").read_text()
    folders = sorted(p for p in SHIPPED_DATA.iterdir() if p.is_dir())
    assert [p.name for p in folders] == ["gsm8k", "humaneval", "ifeval", "math500"]
    for folder in folders:
        assert (folder / "LICENSE").is_file(), folder.name
        assert f"`{folder.name}/`" in readme


@pytest.mark.parametrize("spec", EXAMPLES, ids=lambda p: p.stem)
def test_example_data_resolves_inside_the_checkout(
    spec: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quickstart (generated problems) and every example read no file outside the clone."""
    monkeypatch.delenv("RLC_DATA_ROOT", raising=False)
    monkeypatch.chdir(ROOT)
    result = compile_spec(str(spec.relative_to(ROOT)))
    assert result.ok, [d.message for d in result.errors]
    data = result.manifest()["config"]["data"]
    seed = int(data.get("seed") or 0)
    for entry in data.get("tasks") or []:
        if entry.get("path"):
            assert not _local(entry["path"]) or _inside_checkout(Path(entry["path"]))
            continue
        files = load_task(entry, seed).files
        assert all(_inside_checkout(f) for f in files), files
    for key in ("prompt_data", "reward_config", "manifest"):
        if data.get(key) and _local(str(data[key])):
            assert _inside_checkout(Path(os.fspath(data[key])))
