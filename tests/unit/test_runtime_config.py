"""runtime.config / runtime.manifest / runtime.node.placement: a compiled manifest read as the
typed contract (one definition of every field), verified once per run, node roles."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from contract.run import VERIFIED_ENV, ContractError, parse
from runtime.config import RunConfig
from runtime.node.placement import PlacementError, node_identity, roles_for

ROOT = Path(__file__).resolve().parents[2]


@cache
def _compiled(name: str, *overrides: str) -> dict[str, Any]:
    from compiler.pipeline import compile_spec

    spec = ROOT / "specs" / "examples" / f"{name}.toml"
    return compile_spec(str(spec), list(overrides)).manifest()


def compiled(name: str, *overrides: str) -> dict[str, Any]:
    """A compiled example manifest (a fresh copy: tests may edit it)."""
    return copy.deepcopy(_compiled(name, *overrides))


def test_sections_are_the_specs_own_models_with_the_resolved_values() -> None:
    from contract.spec.inference import InferenceSection
    from contract.spec.root import Spec

    manifest = compiled("quickstart", 'output.root="/tmp/rlc-q"')
    cfg = RunConfig.from_contract(parse(manifest))
    assert type(cfg.spec) is Spec and type(cfg.inference) is InferenceSection
    assert cfg.config_document == manifest["config"]  # nothing lost, nothing added
    assert cfg.inference.placement == "colocated"  # derived by the compiler, read as is
    assert cfg.runtime.seed == cfg.data.seed == 17
    assert cfg.samples_per_collection == 64 * 16
    assert cfg.paths.root == Path("/tmp/rlc-q")
    assert cfg.paths.checkpoints == Path("/tmp/rlc-q/checkpoints")
    assert [e.port for e in cfg.placement.engines] == [30000, 30001]
    assert cfg.placement.router is not None and cfg.placement.num_nodes == 1
    roles = roles_for(cfg.placement, node_identity({}))
    assert roles.trainer and roles.router and len(roles.engines) == 2


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        (("config", "inference", "samples_per_prompt"), 0, "config.inference.samples_per_prompt"),
        (("config", "training", "algorithm"), "ppo", "config.training.algorithm"),
        (("config", "inference", "surprise"), 1, "config.inference.surprise"),
        (("plan", "placement", "engines"), "none", "plan.placement.engines"),
    ],
)
def test_contract_refuses_what_the_spec_refuses_naming_the_field(
    path: tuple[str, ...], value: Any, named: str
) -> None:
    m = compiled("quickstart")
    node = m
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    with pytest.raises(ContractError, match=named.replace(".", r"\.")):
        parse(m, "manifest.json")


def test_every_example_manifest_fits_the_contract() -> None:
    for spec in sorted((ROOT / "specs" / "examples").glob("*.toml")):
        contract = parse(compiled(spec.stem), spec.stem)
        assert contract.plan.placement.num_nodes >= 1, spec.stem


def test_roles_per_node_and_replica_count() -> None:
    cfg = RunConfig.from_contract(parse(compiled("multinode-cpu")))
    env0 = {
        "BEAKER_REPLICA_RANK": "0",
        "BEAKER_REPLICA_COUNT": "2",
        "BEAKER_LEADER_REPLICA_HOSTNAME": "lead",
    }
    env1 = dict(env0, BEAKER_REPLICA_RANK="1")
    r0 = roles_for(cfg.placement, node_identity(env0))
    r1 = roles_for(cfg.placement, node_identity(env1))
    assert r0.trainer and r0.router and r0.engines == ()
    assert not r1.trainer and not r1.router and [e.id for e in r1.engines] == [0, 1]
    assert node_identity(env0).leader_host == "lead"
    # explicit RLC_* variables win over Beaker's (other schedulers, simulated nodes)
    rlc = dict(env1, RLC_NODE_RANK="0", RLC_NUM_NODES="2", RLC_LEADER_ADDR="127.0.1.1")
    ident = node_identity({**rlc, "RLC_NODE_ADDR": "127.0.1.1", "RLC_REGISTRY_PORT": "4242"})
    assert (ident.rank, ident.leader_host, ident.address, ident.registry_port) == (
        0,
        "127.0.1.1",
        "127.0.1.1",
        4242,
    )
    with pytest.raises(PlacementError, match="no leader address"):
        node_identity({"RLC_NODE_RANK": "1", "RLC_NUM_NODES": "2"})
    gpu = RunConfig.from_contract(parse(compiled("gpu-dense")))
    engine = gpu.placement.engines[0]
    gpus = ",".join(map(str, engine.gpus))
    assert gpu.contract.commands.engine_env[engine.id] == {"CUDA_VISIBLE_DEVICES": gpus}
    assert cfg.contract.commands.engine_env[0] == {}
    with pytest.raises(PlacementError, match="compiled for 2 node"):
        roles_for(cfg.placement, node_identity({}))
    with pytest.raises(PlacementError, match="outside"):
        node_identity({"BEAKER_REPLICA_RANK": "3", "BEAKER_REPLICA_COUNT": "2"})
    assert node_identity({}).rank == 0 and node_identity({}).count == 1


def test_component_settings_default_to_the_spec_and_build_from_their_section() -> None:
    """A component's own settings type takes each spec field's default from the contract,
    and `from_contract` carries the compiled values (no second default anywhere)."""
    from contract.spec.compiler_cache import CompilerCacheSection
    from contract.spec.inference import InferenceSection
    from contract.spec.rewards import CodeReward, LengthPenalty
    from contract.spec.runtime import RuntimeSection
    from contract.spec.tracking import TrackingSection
    from runtime.compiler_cache import CompilerCache
    from runtime.engines.client import ClientSettings
    from runtime.engines.router import RouterSettings
    from runtime.executor.settings import ExecutorSettings
    from runtime.rollout.shaping import Shaping
    from runtime.tracking import WandbSink

    rt = RuntimeSection()
    for name in ("health_timeout_s", "generate_timeout_s", "http_retries", "group_retries"):
        assert getattr(ClientSettings(), name) == getattr(rt, name), name
    code = CodeReward()
    assert {n: getattr(ExecutorSettings(), n) for n in CodeReward.model_fields} == dict(code)
    assert Shaping().target_tokens == LengthPenalty().target_tokens
    assert CompilerCache().max_storage_bytes == CompilerCacheSection().max_storage_bytes
    assert WandbSink().mode == TrackingSection().wandb_mode

    m = compiled(
        "quickstart",
        "runtime.generate_timeout_s=30.0",
        "runtime.group_retries=0",
        "rewards.code.memory_limit_mb=256",
        "rewards.length_penalty.enabled=true",
        'inference.router_policy="round_robin"',
    )
    cfg = RunConfig.from_contract(parse(m))
    client = ClientSettings.from_contract(cfg.runtime)
    assert (client.generate_timeout_s, client.group_retries) == (30.0, 0)
    assert cfg.executor.memory_limit_mb == 256
    assert Shaping.from_contract(cfg.rewards).length_penalty
    assert RouterSettings.from_contract(cfg.inference).policy == "round_robin"
    assert RouterSettings.from_contract(InferenceSection()).policy == "cache_aware"


def test_the_trainer_takes_every_setting_from_the_contract() -> None:
    pytest.importorskip("torch")
    from runtime.trainer.trainer import TrainerConfig, contract_settings

    contract = parse(compiled("quickstart", "optimizer.lr=0.5", "optimizer.min_lr=0.25"))
    settings = contract_settings(contract)
    assert set(settings) == {f.name for f in dataclasses.fields(TrainerConfig)}
    cfg = TrainerConfig.from_contract(contract)
    assert (cfg.lr, cfg.min_lr_ratio, cfg.total_steps) == (0.5, 0.5, 100)
    assert cfg.world_size == contract.plan.placement.trainer.world_size


# -- verified once ---------------------------------------------------------------------------
def _written(tmp_path: Path, manifest: dict[str, Any]) -> Path:
    from contract.canonical import canonical_bytes

    path = tmp_path / "manifest.json"
    path.write_bytes(canonical_bytes(manifest))
    return path


def test_the_entry_verifies_and_its_children_only_check_the_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runtime import manifest as door

    monkeypatch.delenv(VERIFIED_ENV, raising=False)
    path = _written(tmp_path, compiled("quickstart"))
    contract = door.verify(path)
    assert os.environ[VERIFIED_ENV] == contract.digest
    # a child process: the same bytes load without the compiler (not even imported)
    code = (
        "import sys\n"
        "from runtime.manifest import load\n"
        f"c = load({str(path)!r})\n"
        "print(c.digest, any(m.split('.')[0] == 'compiler' for m in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [contract.digest, "False"]


def test_other_bytes_than_the_verified_ones_are_verified_in_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runtime import manifest as door

    good = compiled("quickstart")
    monkeypatch.setenv(VERIFIED_ENV, good["digest"])
    tampered = copy.deepcopy(good)
    tampered["commands"]["engine_argv"] = [["sh", "-c", "echo owned"]]
    path = _written(tmp_path, tampered)  # its stale digest no longer matches its bytes
    with pytest.raises(door.ManifestError, match="digest"):
        door.load(path)
    with pytest.raises(door.ManifestError):
        door.document(path)


def test_a_manifest_that_does_not_fit_the_contract_is_a_user_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`python -m runtime.entrypoints.execute` on a manifest the runtime cannot read: exit 2, one line."""
    from contract.canonical import digest_of
    from runtime.entrypoints.execute import main

    monkeypatch.delenv(VERIFIED_ENV, raising=False)
    m = compiled("quickstart")
    m["plan"]["placement"]["widest_node"] = "wide"  # the plan is not re-derived here...
    body = {k: v for k, v in m.items() if k != "digest"}
    m["digest"] = digest_of(body)
    path = _written(tmp_path, m)
    monkeypatch.setenv(VERIFIED_ENV, m["digest"])  # ...as a verified parent would pass it
    assert main([str(path)]) == 2
    assert json.loads(path.read_text())["digest"] == m["digest"]
