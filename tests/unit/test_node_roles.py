"""What each node starts for the multi-node examples: roles, argv (with the port the node
gives), environment (GPU pinning, the RLC_* variables of simulated nodes). Golden values."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def config(spec: str, *overrides: str):
    from compiler.pipeline import compile_spec
    from contract.run import parse
    from runtime.config import RunConfig

    manifest = compile_spec(str(ROOT / "specs" / "examples" / spec), list(overrides)).manifest()
    return RunConfig.from_contract(parse(manifest))


def ident(rank: int, count: int):
    from runtime.launch.local_nodes import node_env
    from runtime.node.placement import node_identity

    return node_identity(node_env(rank, count, 4242))


def test_multinode_cpu_roles_argv_env() -> None:
    from runtime.launch.local_nodes import node_env
    from runtime.node.launch_argv import engine_process
    from runtime.node.placement import roles_for

    cfg = config("multinode-cpu.toml")
    assert cfg.placement.num_nodes == 2
    r0, r1 = (roles_for(cfg.placement, ident(k, 2)) for k in range(2))
    assert r0.describe() == "node 0: router, trainer"
    assert [e.id for e in r1.engines] == [0, 1] and not (r1.router or r1.trainer)
    assert node_env(1, 2, 4242) == {
        "RLC_NODE_RANK": "1",
        "RLC_NUM_NODES": "2",
        "RLC_LEADER_ADDR": "127.0.1.1",
        "RLC_NODE_ADDR": "127.0.1.2",
        "RLC_REGISTRY_PORT": "4242",
    }
    i1 = ident(1, 2)
    assert (i1.address, i1.leader_host, i1.registry_port) == ("127.0.1.2", "127.0.1.1", 4242)
    argv, env = engine_process(cfg, cfg.placement.engines[1].model_copy(update={"port": 40001}))
    assert env == {}
    assert argv[1:3] == ["-m", "runtime.engines.embedded"]
    assert argv[argv.index("--port") + 1] == "40001" and argv.count("--port") == 1
    assert argv[argv.index("--host") + 1] == "0.0.0.0"
    assert argv[argv.index("--device") + 1] == "cpu"
    assert cfg.contract.commands.engine_env[r1.engines[0].id] == {}  # CPU: nothing to pin


def test_multinode_gpu_engines_pinned_and_on_their_ports() -> None:
    from runtime.node.launch_argv import engine_process
    from runtime.node.placement import node_identity, roles_for

    cfg = config("multinode.toml")
    env = {"BEAKER_REPLICA_COUNT": "4", "BEAKER_LEADER_REPLICA_HOSTNAME": "lead"}
    roles = [
        roles_for(cfg.placement, node_identity({**env, "BEAKER_REPLICA_RANK": str(k)}))
        for k in range(4)
    ]
    assert [r.trainer for r in roles] == [True, True, False, False]
    assert [r.router for r in roles] == [True, False, False, False]
    assert [[e.id for e in r.engines] for r in roles] == [
        [],
        [],
        list(range(8)),
        list(range(8, 16)),
    ]
    for e in roles[3].engines:
        assert cfg.contract.commands.engine_env[e.id]["CUDA_VISIBLE_DEVICES"] == str(e.id - 8)
        argv, _ = engine_process(cfg, e.model_copy(update={"port": 41000 + e.id}))
        assert argv[1:3] == ["-m", "sglang.launch_server"]
        assert argv[argv.index("--port") + 1] == str(41000 + e.id)
        flags = [a for a in argv if a.startswith("--")]
        assert len(flags) == len(set(flags))
        assert "--cuda-graph-max-bs-decode" in flags and "--cuda-graph-max-bs" not in flags


@pytest.mark.parametrize("env", [{}, {"RLC_NODE_RANK": "x", "RLC_NUM_NODES": "2"}])
def test_bad_node_variables_are_user_errors(env: dict[str, str]) -> None:
    from runtime.node.placement import PlacementError, node_identity

    if not env:
        assert node_identity(env).count == 1
        return
    with pytest.raises(PlacementError, match="bad node rank variables"):
        node_identity(env)


def test_managed_judges_are_reached_where_their_node_registered_them() -> None:
    from runtime.config import JudgeBinding
    from runtime.entrypoints.execute import with_judge_urls

    def binding(verifier: str, judge: str, mode: str, url: str) -> JudgeBinding:
        return JudgeBinding(verifier, judge, "r", mode, url, "m", "p", 60.0, 4, 256, 0.0)

    bindings = {
        "a": binding("a", "local_judge", "managed", "http://127.0.0.1:31000"),
        "b": binding("b", "api", "external", "https://judge.example/v1"),
    }
    found = {"judge:local_judge": "http://10.0.0.7:31000"}
    out = with_judge_urls(bindings, found)
    assert out["a"].url == "http://10.0.0.7:31000"
    assert out["b"] == bindings["b"]


def _py(argv: list[str]) -> list[str]:
    import sys

    return ["python" if a == sys.executable else a for a in argv]


def test_golden_argv_and_env_of_every_role_of_the_multinode_examples() -> None:
    """The whole command line and environment each role gets, on the node the plan gives
    it, with the addresses and ports that node really has (what the registry carries)."""
    from runtime.node.launch_argv import engine_process, router_process, trainer_rank_process
    from runtime.node.placement import node_identity, roles_for
    from runtime.trainer.ranks import rank_values

    cpu = config("multinode-cpu.toml")
    argv, env = engine_process(cpu, cpu.placement.engines[1].model_copy(update={"port": 40002}))
    assert (_py(argv), env) == ([
        "python", "-m", "runtime.engines.embedded", "--model-path", "builtin:tiny",
        "--host", "0.0.0.0", "--port", "40002", "--device", "cpu", "--dtype", "float32",
        "--max-running-requests", "64", "--max-total-tokens", "524288",
        "--context-length", "64", "--random-seed", "17", "--init-seed", "17",
        "--disable-radix-cache",
    ], {})  # fmt: skip
    urls = ["http://127.0.1.2:40001", "http://127.0.1.2:40002"]
    router = _py(router_process(cpu, urls, 29000, 29123))
    assert router == [
        "python", "-m", "sglang_router.launch_router", "--host", "0.0.0.0",
        "--port", "29000", "--policy", "cache_aware", "--cache-threshold", "0.5",
        "--balance-abs-threshold", "32", "--balance-rel-threshold", "1.0001",
        "--request-timeout-secs", "1800", "--health-check-interval-secs", "60",
        "--disable-circuit-breaker", "--log-level", "warn", "--prometheus-host", "127.0.0.1",
        "--prometheus-port", "29123", "--worker-urls", *urls,
    ]  # fmt: skip
    # CPU trainer ranks split the node's cores
    two = config("multinode-cpu.toml", "trainer.cpu_processes=2")
    argv, env = trainer_rank_process(
        two.contract.commands.trainer_rank, "/m.json", rank_values(0, 1, 2, "127.0.0.1", 29500, 2)
    )
    assert (_py(argv), env) == (["python", "-m", "runtime.trainer.ranks", "/m.json"], {
        "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
        "TORCHELASTIC_RUN_ID": "node0", "OMP_NUM_THREADS": "1",
    })  # fmt: skip

    gpu = config("multinode.toml")
    env = {"BEAKER_REPLICA_COUNT": "4", "BEAKER_LEADER_REPLICA_HOSTNAME": "lead"}
    node2 = roles_for(gpu.placement, node_identity({**env, "BEAKER_REPLICA_RANK": "2"}))
    e1 = node2.engines[1]
    assert (e1.id, gpu.contract.commands.engine_env[1]["CUDA_VISIBLE_DEVICES"]) == (1, "1")
    argv, env = engine_process(gpu, e1.model_copy(update={"port": 41001}))
    assert env == {"SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "false", "CUDA_VISIBLE_DEVICES": "1"}
    assert _py(argv) == [
        "python", "-m", "sglang.launch_server",
        "--model-path", "/weka/oe-training-default/rlc/models/OLMoE-1B-7B-hf",
        "--host", "0.0.0.0", "--port", "41001",
        "--tp-size", "1", "--context-length", "8192", "--max-running-requests", "64",
        "--max-total-tokens", "524288", "--mem-fraction-static", "0.6",
        "--random-seed", "17", "--dtype", "bfloat16", "--cuda-graph-max-bs-decode", "64",
        "--disable-radix-cache", "--enable-return-routed-experts",
    ]  # fmt: skip
    # trainer node 1 (second of two): ranks 8..15 on its GPUs 0..7, rank 0 on node 0
    # ("lead", at the port rank 0 registered)
    _, node1 = trainer_rank_process(
        gpu.contract.commands.trainer_rank, "/m.json", rank_values(1, 3, 8, "lead", 29500, 128)
    )
    assert node1 == {
        "RANK": "11", "LOCAL_RANK": "3", "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8",
        "GROUP_RANK": "1", "MASTER_ADDR": "lead", "MASTER_PORT": "29500",
        "TORCHELASTIC_RUN_ID": "node1",
    }  # fmt: skip
