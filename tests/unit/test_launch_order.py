"""`rlc launch`: preparation is submitted first and training only after it succeeded.

Beaker cannot be reached here, so a stand-in client answers beaker-py's calls; the specs
still go through beaker-py's own ``BeakerExperimentSpec.from_json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from compiler.diagnostics import DiagnosticError
from compiler.manifest.manifest import write_manifest
from compiler.pipeline import compile_spec
from rlc_cli.main import cli

pytest.importorskip("beaker")
ROOT = Path(__file__).resolve().parents[2]


class StandIn:
    """beaker-py's surface used by rlc_cli.launch.beaker, with scripted job states."""

    def __init__(self, prepare_states: list[str]) -> None:
        self.created: list[str] = []
        self.states = list(prepare_states)
        self.image = SimpleNamespace(get=lambda name: SimpleNamespace(id="01IMAGEID"))
        self.workspace = SimpleNamespace(get=lambda name: name)
        self.experiment = SimpleNamespace(create=self._create)
        self.workload = SimpleNamespace(
            get=lambda wid: SimpleNamespace(experiment=SimpleNamespace(id=wid)),
            get_latest_job=self._job,
            url=lambda w: f"https://beaker.example/ex/{w.experiment.id}",
        )

    def _create(self, *, spec: Any, name: str, workspace: Any) -> Any:
        self.created.append(name)
        return SimpleNamespace(experiment=SimpleNamespace(id=f"EX{len(self.created)}"))

    def _job(self, workload: Any) -> Any:
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        return SimpleNamespace(status=SimpleNamespace(status=state, exit_code=3))


@pytest.fixture(scope="module")
def manifest_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    r = compile_spec(str(ROOT / "specs" / "examples" / "hybrid-moe.toml"))
    assert r.ok
    return write_manifest(r.manifest(), tmp_path_factory.mktemp("m") / "manifest.json")


def _launch(manifest_path: Path, client: StandIn, receipts: list[Any]) -> list[Any]:
    from compiler.manifest.manifest import load_manifest
    from rlc_cli.launch.beaker import launch_all

    return launch_all(
        load_manifest(manifest_path),
        manifest_path,
        dry_run=False,
        record=receipts.append,
        client=client,
        echo=lambda s: None,
        poll_s=0.0,
    )


def test_training_waits_for_successful_preparation(manifest_path: Path) -> None:
    client = StandIn(["STATUS_QUEUED", "STATUS_RUNNING", "STATUS_SUCCEEDED"])
    receipts: list[Any] = []
    out = _launch(manifest_path, client, receipts)
    assert [n.rsplit("-", 1)[0] for n in client.created] == ["hybrid-moe-prepare", "hybrid-moe"]
    assert client.states == ["STATUS_SUCCEEDED"]  # polled until it finished
    prep, train = (r for r, _ in out)
    assert prep.extra == {"stage": "prepare"} and prep.experiment_id == "EX1"
    assert train.extra == {"stage": "train", "after_prepare": "EX1"}
    assert prep.launch_id == train.launch_id and receipts == [prep, train]
    assert out[0][1]["tasks"][0]["image"] == {"beaker": "01IMAGEID"}


def test_failed_preparation_submits_no_training(manifest_path: Path) -> None:
    client = StandIn(["STATUS_RUNNING", "STATUS_FAILED"])
    receipts: list[Any] = []
    with pytest.raises(DiagnosticError) as err:
        _launch(manifest_path, client, receipts)
    assert "training was not submitted" in err.value.diagnostics[0].message
    assert len(client.created) == 1 and len(receipts) == 1  # the preparation receipt is kept


def test_dry_run_shows_both_in_order(manifest_path: Path, tmp_path: Path) -> None:
    r = CliRunner().invoke(
        cli, ["launch", str(manifest_path), "--dry-run", "--receipts-dir", str(tmp_path)]
    )
    assert r.exit_code == 0, r.output
    assert (
        r.output.index("# prepare")
        < r.output.index("runtime.entrypoints.prepare")
        < r.output.index("# train")
    )
    assert "runtime.entrypoints.execute" in r.output[r.output.index("# train") :]
    stages = sorted(json.loads(p.read_text())["extra"]["stage"] for p in tmp_path.glob("*.json"))
    assert stages == ["prepare", "train"]
