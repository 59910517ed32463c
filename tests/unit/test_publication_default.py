"""The weight-publication transport follows the placement unless the spec names one."""

from __future__ import annotations

from pathlib import Path

import pytest

from compiler.pipeline import compile_spec

GPU = '[model]\nsource = "builtin:olmo3-190m"\n[trainer]\ngpus = {gpus}\nnodes = {nodes}\n'
TAIL = '[[data.tasks]]\ntask = "arithmetic"\n[output]\nroot = "/weka/oe-training-default/t"\n'


def resolved(tmp_path: Path, body: str) -> tuple[str, dict]:
    path = tmp_path / "spec.toml"
    path.write_text('schema_version = 1\nname = "t"\n' + body + TAIL)
    result = compile_spec(str(path))
    manifest = result.manifest()
    prov = manifest["provenance"]["runtime.publication_transport"]
    return manifest["config"]["runtime"]["publication_transport"], prov


@pytest.mark.parametrize(
    ("body", "transport", "reason"),
    [
        ('[model]\nsource = "builtin:tiny"\n', "disk", "CPU"),
        (GPU.format(gpus=1, nodes=1), "tensor", "CUDA IPC"),
        (
            GPU.format(gpus=4, nodes=1) + '[inference]\nplacement = "disaggregated"\ngpus = 4\n',
            "tensor",
            "shares the trainer's node",
        ),
        (
            GPU.format(gpus=8, nodes=2) + '[inference]\nplacement = "disaggregated"\n',
            "distributed",
            "NCCL",
        ),
        (
            GPU.format(gpus=8, nodes=2)
            + '[inference]\nplacement = "disaggregated"\n'
            + '[async]\nenabled = true\npublication_mode = "engine_drain"\n',
            "disk",
            "engine_drain",
        ),
    ],
    ids=["cpu", "colocated-gpu", "same-node-disaggregated", "other-nodes", "drain-across-nodes"],
)
def test_transport_follows_the_placement(
    tmp_path: Path, body: str, transport: str, reason: str
) -> None:
    got, prov = resolved(tmp_path, body)
    assert got == transport
    assert prov["kind"] == "derived"
    assert reason in prov["formula"]


def test_an_explicit_disk_is_kept(tmp_path: Path) -> None:
    body = GPU.format(gpus=1, nodes=1) + '[runtime]\npublication_transport = "disk"\n'
    got, prov = resolved(tmp_path, body)
    assert got == "disk"
    assert prov["kind"] == "spec"


def test_sglang_sharing_the_trainer_gpus_keeps_disk() -> None:
    from compiler.resolve.transport import publication_transport

    config = {
        "inference": {"placement": "colocated", "engine": "sglang"},
        "trainer": {"gpus": 8},
        "async": {"enabled": False, "publication_mode": "barrier"},
    }
    placement = {"trainer": {"nodes": [0]}, "engines": [{"node": 0}]}
    transport, why = publication_transport(config, placement)
    assert transport == "disk" and "SGLang" in why
