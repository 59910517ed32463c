"""runtime.config / runtime.placement: the manifest -> typed runtime view, node roles."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from runtime.config import ConfigError, from_manifest
from runtime.placement import PlacementError, engine_env, node_identity, roles_for

ROOT = Path(__file__).resolve().parents[2]


def contract_manifest(**over: Any) -> dict[str, Any]:
    """A manifest in the contract's shape (what the compiler emits), built by hand."""
    m: dict[str, Any] = {
        "manifest_version": 1,
        "name": "t",
        "digest": "sha256:abc",
        "config": {
            "model": {"source": "builtin:tiny", "format": "builtin"},
            "data": {"tasks": [{"task": "arithmetic", "train_count": 8}], "seed": 3},
            "output": {"root": "/tmp/rlc-t"},
            "training": {"num_rollouts": 5, "filter_zero_std_groups": True},
            "trainer": {"gpus": 0},
            "inference": {"num_engines": 2, "prompts_per_collection": 4, "samples_per_prompt": 2},
            "optimizer": {"lr": 0.01},
            "async": {"enabled": True, "max_policy_lag": 2},
            "checkpoint": {"interval": 2, "keep_last": 1},
            "rewards": {"failure_policy": "fail", "math": {"timeout_s": 1.0}},
            "runtime": {"max_logprob_mismatch": 0.5},
        },
        "plan": {
            "placement": {
                "nodes": [{"node": 0}, {"node": 1}],
                "engines": [
                    {"id": 0, "node": 0, "gpus": [1], "port": 30000},
                    {"id": 1, "node": 1, "gpus": [0], "port": 30001},
                ],
                "router": {"node": 0, "port": 29000},
                "trainer": {"nodes": [0], "gpus_per_node": 1},
            }
        },
        "paths": {"root": "/tmp/rlc-t", "metrics": "/tmp/rlc-t/m.jsonl"},
    }
    m.update(over)
    return m


def test_contract_shape_maps_to_typed_config() -> None:
    cfg = from_manifest(contract_manifest())
    assert cfg.inference.global_batch_size == 8
    assert (
        cfg.training.filter_zero_std_groups
        and cfg.async_.enabled
        and cfg.async_.max_policy_lag == 2
    )
    assert cfg.runtime.seed == 3  # defaults to data.seed
    assert cfg.runtime.max_logprob_mismatch == 0.5
    assert cfg.failure_policy == "fail" and cfg.rewards == {"math": {"timeout_s": 1.0}}
    assert cfg.paths.metrics == Path("/tmp/rlc-t/m.jsonl")
    assert cfg.paths.checkpoints == Path("/tmp/rlc-t/checkpoints")
    assert cfg.placement.num_nodes == 2 and cfg.placement.router_port == 29000
    assert [e.port for e in cfg.placement.engines] == [30000, 30001]


def test_bad_config_is_refused_clearly() -> None:
    m = contract_manifest()
    m["config"]["data"]["tasks"] = []
    with pytest.raises(ConfigError, match="data.tasks"):
        from_manifest(m)
    m = contract_manifest()
    m["plan"]["placement"]["engines"] = []
    with pytest.raises(ConfigError, match="no engines"):
        from_manifest(m)
    m = contract_manifest()
    m["config"]["inference"]["samples_per_prompt"] = 0
    with pytest.raises(ConfigError, match="samples_per_prompt"):
        from_manifest(m)


def test_roles_per_node_and_replica_count() -> None:
    cfg = from_manifest(contract_manifest())
    env0 = {
        "BEAKER_REPLICA_RANK": "0",
        "BEAKER_REPLICA_COUNT": "2",
        "BEAKER_LEADER_REPLICA_HOSTNAME": "lead",
    }
    env1 = dict(env0, BEAKER_REPLICA_RANK="1")
    r0 = roles_for(cfg.placement, node_identity(env0))
    r1 = roles_for(cfg.placement, node_identity(env1))
    assert r0.trainer and r0.router and [e.id for e in r0.engines] == [0]
    assert not r1.trainer and not r1.router and [e.id for e in r1.engines] == [1]
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
    assert engine_env(cfg.placement.engines[0]) == (
        {"CUDA_VISIBLE_DEVICES": ",".join(map(str, cfg.placement.engines[0].gpus))}
        if cfg.placement.engines[0].gpus
        else {}
    )
    with pytest.raises(PlacementError, match="compiled for 2 node"):
        roles_for(cfg.placement, node_identity({}))
    with pytest.raises(PlacementError, match="outside"):
        node_identity({"BEAKER_REPLICA_RANK": "3", "BEAKER_REPLICA_COUNT": "2"})
    assert node_identity({}).rank == 0 and node_identity({}).count == 1


def test_real_compiled_quickstart_maps() -> None:
    pipeline = pytest.importorskip("compiler.pipeline")
    spec = ROOT / "specs" / "examples" / "quickstart.toml"
    if not spec.exists():
        pytest.skip("quickstart spec not present")
    result = pipeline.compile_spec(str(spec), ['output.root="/tmp/rlc-q"'])
    manifest = result.manifest()
    cfg = from_manifest(copy.deepcopy(manifest))
    assert cfg.model.source == "builtin:tiny-digits"
    assert len(cfg.placement.engines) == 2 and cfg.placement.router_port is not None
    assert cfg.paths.root == Path("/tmp/rlc-q")
    roles = roles_for(cfg.placement, node_identity({}))
    assert roles.trainer and roles.router and len(roles.engines) == 2


def test_connection_and_publication_are_one_type_each_with_the_spec_defaults() -> None:
    """`config.runtime` maps to one ClientSettings, the very object the engine client uses;
    a field the manifest leaves out falls back to the spec's default, not to another one."""
    from contract.spec.runtime import RuntimeSection
    from runtime.config import ClientSettings, PublicationSettings
    from runtime.engines.client import EngineClient

    names = ("health_timeout_s", "generate_timeout_s", "http_retries", "retry_backoff_s")
    spec = RuntimeSection()
    defaults = ClientSettings()
    for name in (*names, "group_retries"):
        assert getattr(defaults, name) == getattr(spec, name), name
    publication = PublicationSettings()
    # the compiler derives the transport from the placement; a manifest without one predates
    # that and meant disk
    assert spec.publication_transport is None
    assert (publication.transport, publication.timeout_s) == ("disk", spec.publish_timeout_s)
    m = contract_manifest()
    m["config"]["runtime"].update(
        generate_timeout_s=30.0, group_retries=0, publication_transport="tensor"
    )
    cfg = from_manifest(m)
    assert cfg.runtime.client == ClientSettings(generate_timeout_s=30.0, group_retries=0)
    assert cfg.runtime.publication == PublicationSettings(transport="tensor")
    client = EngineClient("http://127.0.0.1:1", cfg.runtime.client)
    try:
        assert client.settings is cfg.runtime.client
    finally:
        client.close()
