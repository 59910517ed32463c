"""Every trainer topology the compiler accepts is one the runtime carries out; the others are
refused at compile time with a positioned error.

A grid of (trainer nodes, GPUs or CPU processes per node, expert parallelism, dense or MoE)
over the example specs is compiled. A refused one must carry an error at a spec line. For an
accepted one the runtime's view must agree with the plan: the world it rendezvouses
(``TrainerConfig``), the ranks each node starts (global rank ``node * per_node + local``, GPU
``local`` of that node), and the mesh: ``plan_mesh`` and then OLMo-core's own
``build_world_mesh`` over a fake process group of that world size (in a child process), with
HSDP across trainer nodes and the EP mesh over the shard dimension. The multi-process tests
(``test_trainer_distributed.py``, ``tests/e2e/test_trainer_ranks.py``) run the updates on such
meshes for real; this test covers the shapes no machine here can hold.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("olmo_core")

from compiler.diagnostics import DiagnosticError  # noqa: E402
from compiler.pipeline import compile_spec  # noqa: E402
from contract.run import parse  # noqa: E402
from runtime.trainer.parallel import plan_mesh  # noqa: E402
from runtime.trainer.trainer import TrainerConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "specs" / "examples"
NO_EXPORT = ("output.export_hf=false", "checkpoint.export_hf_final=false")


def _grid() -> list[tuple[str, tuple[str, ...]]]:
    out: list[tuple[str, tuple[str, ...]]] = []
    for src, procs, ep in itertools.product(("tiny-moe", "tiny"), (1, 2, 3, 4), (1, 2, 4, 8)):
        sets = (f'model.source="builtin:{src}"', f"trainer.cpu_processes={procs}")
        out.append(("quickstart.toml", (*sets, f"trainer.expert_parallel={ep}", *NO_EXPORT)))
    for src, nodes, procs, ep in itertools.product(
        ("tiny-moe", "tiny"), (1, 2, 3), (1, 2, 4), (1, 2, 4)
    ):
        sets = (f'model.source="builtin:{src}"', f"trainer.nodes={nodes}")
        out.append(
            (
                "multinode-cpu.toml",
                (*sets, f"trainer.cpu_processes={procs}", f"trainer.expert_parallel={ep}"),
            )
        )
    for gpus, ep in itertools.product((1, 2, 3, 4, 8), (1, 2, 4, 8)):
        sets = (f"trainer.gpus={gpus}", f"inference.gpus={gpus}", f"inference.num_engines={gpus}")
        out.append(("gpu-moe.toml", (*sets, f"trainer.expert_parallel={ep}")))
    for arch, nodes, gpus, ep in itertools.product(
        ("moe", "dense"), (1, 2, 4), (1, 2, 4, 8), (1, 2, 8, 16)
    ):
        sets = (f'model.architecture="{arch}"', f"trainer.router_replay={arch == 'moe'}".lower())
        sets += (f"trainer.nodes={nodes}", f"trainer.gpus={gpus}")
        out.append(("multinode.toml", (*sets, f"trainer.expert_parallel={ep}")))
    return out


def _compile(spec: str, sets: tuple[str, ...]) -> dict[str, Any] | DiagnosticError:
    try:
        return compile_spec(str(EXAMPLES / spec), list(sets)).manifest()
    except DiagnosticError as exc:
        return exc


def _ranks_by_node(manifest: dict[str, Any]) -> dict[int, list[tuple[int, int | None]]]:
    """``node -> [(global rank, GPU or None)]`` of the trainer ranks the plan places."""
    out: dict[int, list[tuple[int, int | None]]] = {}
    for node in manifest["plan"]["placement"]["nodes"]:
        ranks = [
            (int(r.split(":")[1]), None) for r in node["cpu_roles"] if r.startswith("trainer:")
        ]
        for gpu in node["gpus"]:
            ranks += [
                (int(r.split(":")[1]), gpu["gpu"]) for r in gpu["roles"] if r.startswith("trainer:")
            ]
        if ranks:
            out[node["node"]] = sorted(ranks)
    return out


MESH_CHILD = """
import json, sys
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore
import olmo_core.distributed.parallel as P
from runtime.trainer.parallel import plan_mesh, world_mesh
out = []
for world, nodes, ep in json.loads(sys.argv[1]):
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        mesh = world_mesh(plan_mesh(world, nodes, ep), "cpu")
        out.append({
            "dims": list(mesh.mesh_dim_names), "shape": list(mesh.shape),
            "dp_model": list(P.get_dp_model_mesh(mesh).shape),
            "ep": P.get_ep_mesh(mesh).size() if ep > 1 else 1,
        })
    finally:
        P._WORLD_MESH = None
        dist.destroy_process_group()
print(json.dumps(out))
"""


def test_every_accepted_trainer_topology_is_carried_out_and_the_rest_refused_at_a_line() -> None:
    accepted: dict[tuple[int, int, int], str] = {}
    refused = hsdp_dense = 0
    for spec, sets in _grid():
        what = f"{spec} {' '.join(sets)}"
        got = _compile(spec, sets)
        if isinstance(got, DiagnosticError):
            errors = [d for d in got.diagnostics if d.severity == "error"]
            assert errors and all(d.span is not None for d in errors), what
            refused += 1
            continue
        cfg = TrainerConfig.from_contract(parse(got))
        trainer = got["config"]["trainer"]
        nodes = int(trainer["nodes"])
        per_node = int(trainer["gpus"]) or int(trainer["cpu_processes"])
        ep = int(trainer["expert_parallel"])
        world = got["plan"]["placement"]["trainer"]["world_size"]
        assert (cfg.world_size, cfg.nodes, cfg.expert_parallel) == (world, nodes, ep), what
        assert world == nodes * per_node, what
        # each trainer node starts ranks node*per_node + local (runtime.trainer.ranks), on
        # its GPUs 0..per_node-1 (the rank's CUDA device is its local rank)
        layout = _ranks_by_node(got)
        assert sorted(layout) == list(range(nodes)), what
        for node, ranks in layout.items():
            want = [(node * per_node + i, i if trainer["gpus"] else None) for i in range(per_node)]
            assert ranks == want, what
        mesh = plan_mesh(world, nodes, ep)
        assert mesh.replicas * mesh.shard == world, what
        if ep > 1:
            assert mesh.shard == ep, what
        elif nodes > 1:  # HSDP: shard within a node, replicate across nodes
            assert (mesh.replicas, mesh.shard) == (nodes, per_node), what
        accepted[(world, nodes, ep)] = what
        hsdp_dense += nodes > 1 and got["config"]["model"]["architecture"] == "dense"
    assert refused and len(accepted) > 20 and hsdp_dense  # both outcomes, broadly

    keys = sorted(accepted)
    child = subprocess.run(
        [sys.executable, "-c", MESH_CHILD, json.dumps(keys)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    meshes = json.loads(child.stdout.strip().splitlines()[-1])
    for (world, nodes, ep), got_mesh in zip(keys, meshes, strict=True):
        plan = plan_mesh(world, nodes, ep)
        what = accepted[(world, nodes, ep)]
        if plan.hsdp:
            assert got_mesh["dims"] == ["dp_replicate", "dp_shard"], what
            assert got_mesh["shape"] == [plan.replicas, plan.shard], what
        else:
            assert got_mesh["shape"] == [world], what
        assert got_mesh["ep"] == ep, what


@pytest.mark.parametrize(
    "native",
    [
        'dp_config.name = "ddp"',
        "dp_config.shard_degree = 2",
        "dp_config.num_replicas = 2",
    ],
)
def test_an_olmo_core_mesh_option_is_refused_at_its_line(tmp_path: Path, native: str) -> None:
    """The trainer plans its mesh from trainer.* alone: an OLMo-core data-parallel layout
    in ``[native.olmo_core]`` would be a topology the runtime does not produce."""
    text = (EXAMPLES / "quickstart.toml").read_text()
    spec = tmp_path / "s.toml"
    spec.write_text(text + f"\n[native.olmo_core]\n{native}\n")
    line = len(spec.read_text().splitlines())
    with pytest.raises(DiagnosticError) as err:
        compile_spec(str(spec), ["trainer.cpu_processes=2"]).manifest()
    (d,) = [d for d in err.value.diagnostics if d.code == "native-owned"]
    assert d.span is not None and d.span.line == line
    assert "trainer.nodes" in d.help[0] and "trainer.expert_parallel" in d.help[0]
