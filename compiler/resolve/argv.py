"""Command lines and environments of every process the runtime starts: SGLang (or embedded)
engines, sglang-router, the trainer and its follower ranks, managed judges, the teacher.

The runtime runs these as they stand, with the substitutions of
``runtime.node.launch_argv.substitute``: ``python`` -> its interpreter, ``{manifest}`` -> the
manifest path, ``{host:N}`` -> the address of node N (engines on the router's node use
127.0.0.1), the ports its node picks in place of the compiled ``--port``,
``--prometheus-port`` and ``--worker-urls`` values, and the documented run-time values
(``{rank}``, ``{trainer_port}``, ...) of a trainer rank's environment.
"""

from __future__ import annotations

from typing import Any


def native_sglang_argv(options: dict[str, Any]) -> list[str]:
    """``[native.sglang]`` as flags (the pinned option table's encoding)."""
    from compiler.spec.native_options import sglang_argv

    return list(sglang_argv(options))


def _model_path(config: dict[str, Any], paths: dict[str, str]) -> str:
    """SGLang serves HF checkpoints; others are exported to <root>/prepared/hf first."""
    m = config["model"]
    if m["format"] == "hf":
        return str(m["source"])
    return paths["prepared"] + "/hf"


def _bind_host(plan: dict[str, Any]) -> str:
    """Loopback on one node; every interface when other nodes must reach this one."""
    return "127.0.0.1" if len(plan["placement"].get("nodes") or [0]) <= 1 else "0.0.0.0"


def _embedded_head(
    source: str, host: str, port: str, device: str, dtype: str, running: int
) -> list[str]:
    """The flags every embedded server starts with (rollout engines and the teacher)."""
    return [
        "python",
        "-m",
        "runtime.engines.embedded",
        "--model-path",
        source,
        "--host",
        host,
        "--port",
        port,
        "--device",
        device,
        "--dtype",
        dtype,
        "--max-running-requests",
        str(running),
    ]


def _sglang_head(
    model_path: str, port: str, tp: int, context: int, running: int, host: str = "0.0.0.0"
) -> list[str]:
    """The flags every SGLang server starts with (rollout engines and the teacher)."""
    return [
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        model_path,
        "--host",
        host,
        "--port",
        port,
        "--tp-size",
        str(tp),
        "--context-length",
        str(context),
        "--max-running-requests",
        str(running),
    ]


def embedded_engine_argv(config: dict[str, Any], eng: dict[str, Any], host: str) -> list[str]:
    """The embedded engine: exactly the options it honours (``runtime.engines.embedded``).

    The CUDA-graph and GPU-memory options are emitted for GPU engines only: on a CPU they
    have no effect (the rule set says so where a spec sets them)."""
    inf = config["inference"]
    argv = _embedded_head(
        str(config["model"]["source"]),
        host,
        str(eng["port"]),
        str(eng["device"]),
        str(config["model"]["dtype"]),
        inf["max_running_requests"],
    )
    argv += [
        "--max-total-tokens",
        str(inf["max_total_tokens"]),
        "--context-length",
        str(inf["max_context_length"]),
        "--random-seed",
        str(inf["seed"]),
    ]
    if str(config["model"]["source"]).startswith("builtin:"):
        # a random-initialised model: the engine initialises it as the trainer does
        argv += ["--init-seed", str(config["runtime"]["seed"])]
    if config["model"].get("hf_template"):
        argv += ["--hf-template", str(config["model"]["hf_template"])]
    if inf["chunked_prefill_size"] is not None:
        argv += ["--chunked-prefill-size", str(inf["chunked_prefill_size"])]
    if not inf["radix_cache"]:
        argv.append("--disable-radix-cache")
    if inf["kv_cache_dtype"] != "auto":
        argv += ["--kv-cache-dtype", str(inf["kv_cache_dtype"])]
    if inf["max_mamba_cache_size"] < inf["max_running_requests"]:
        # binds only for GatedDeltaNet models: one recurrent state per running sequence
        argv += ["--max-mamba-cache-size", str(inf["max_mamba_cache_size"])]
    if eng["device"] == "cuda":
        if inf["mem_fraction_static"] is not None:
            argv += ["--mem-fraction-static", repr(float(inf["mem_fraction_static"]))]
        if inf["cuda_graph_decode"]:
            argv += ["--cuda-graph-max-bs", str(inf["cuda_graph_max_bs"])]
        else:
            argv.append("--disable-cuda-graph")
    return argv


def sglang_engine_argv(
    config: dict[str, Any], eng: dict[str, Any], paths: dict[str, str], host: str
) -> list[str]:
    inf = config["inference"]
    argv = _sglang_head(
        _model_path(config, paths),
        str(eng["port"]),
        inf["tensor_parallel"],
        inf["max_context_length"],
        inf["max_running_requests"],
        host,
    )
    argv += [
        "--max-total-tokens",
        str(inf["max_total_tokens"]),
        "--mem-fraction-static",
        repr(float(inf["mem_fraction_static"])),
        "--random-seed",
        str(inf["seed"]),
        "--dtype",
        str(config["model"]["dtype"]),
        # sglang 0.5.23 splits this flag per phase; the bare prefix is ambiguous there
        "--cuda-graph-max-bs-decode",
        str(inf["cuda_graph_max_bs"]),
    ]
    if not inf["radix_cache"]:
        argv.append("--disable-radix-cache")
    if inf["kv_cache_dtype"] != "auto":
        argv += ["--kv-cache-dtype", str(inf["kv_cache_dtype"])]
    if not inf["cuda_graph_decode"]:
        argv.append("--disable-cuda-graph")
    if inf["chunked_prefill_size"] is not None:
        argv += ["--chunked-prefill-size", str(inf["chunked_prefill_size"])]
    if config["model"]["architecture"] == "hybrid_moe":
        argv += ["--max-mamba-cache-size", str(inf["max_mamba_cache_size"])]
    if config["trainer"]["router_replay"]:
        argv.append("--enable-return-routed-experts")
    return argv + native_sglang_argv(config["native"]["sglang"])


def engine_argv(
    config: dict[str, Any], plan: dict[str, Any], paths: dict[str, str]
) -> list[list[str]]:
    """One command line per engine; the runtime runs each as it stands (``{manifest}``,
    the interpreter and the ports its node picks substituted: ``runtime.node.launch_argv``)."""
    host = _bind_host(plan)
    if config["inference"]["engine"] == "embedded":
        return [embedded_engine_argv(config, e, host) for e in plan["placement"]["engines"]]
    return [sglang_engine_argv(config, e, paths, host) for e in plan["placement"]["engines"]]


def router_argv(config: dict[str, Any], plan: dict[str, Any]) -> list[str]:
    router = plan["placement"]["router"]
    if router is None:
        return []
    inf = config["inference"]
    urls = []
    for eng in plan["placement"]["engines"]:
        host = "127.0.0.1" if eng["node"] == router["node"] else "{host:" + str(eng["node"]) + "}"
        urls.append(f"http://{host}:{eng['port']}")
    argv = [
        "python",
        "-m",
        "sglang_router.launch_router",
        "--host",
        _bind_host(plan),
        "--port",
        str(router["port"]),
        "--policy",
        inf["router_policy"],
    ]
    if inf["router_policy"] == "cache_aware":  # the router reads these for that policy only
        argv += [
            "--cache-threshold",
            repr(float(inf["router_cache_threshold"])),
            "--balance-abs-threshold",
            str(inf["router_balance_abs_threshold"]),
            "--balance-rel-threshold",
            repr(float(inf["router_balance_rel_threshold"])),
        ]
    return [
        *argv,
        # a request may wait out a weight update; a dead engine is dropped by the runtime
        # (not by the router's circuit breaker)
        "--request-timeout-secs",
        "1800",
        "--health-check-interval-secs",
        "60",
        "--disable-circuit-breaker",
        "--log-level",
        "warn",
        # sglang-router always starts a metrics exporter (default port 29000) and exits when
        # that port is taken; give it its own port beside the router's
        "--prometheus-host",
        "127.0.0.1",
        "--prometheus-port",
        str(int(router["port"]) + 1),
        "--worker-urls",
        *urls,
    ]


def trainer_argv() -> list[str]:
    return ["python", "-m", "runtime.entrypoints.execute", "{manifest}"]


def evaluator_argv(config: dict[str, Any]) -> list[str]:
    """A background evaluation of one milestone (``[]`` in shared mode): a local subprocess or
    a Beaker job, with the update and its checkpoint substituted per milestone."""
    if config["evaluation"]["mode"] != "background":
        return []
    return [
        "python",
        "-m",
        "runtime.entrypoints.evaluate",
        "{manifest}",
        "--update",
        "{update}",
        "--checkpoint",
        "{checkpoint}",
    ]


def teacher_argv(config: dict[str, Any], plan: dict[str, Any]) -> list[str]:
    """The managed teacher server of on-policy distillation (``[]`` without one): the
    embedded engine, or SGLang on its planned GPUs. The runtime substitutes the port it
    really gives it and this interpreter for ``python``."""
    placed = plan["placement"].get("teacher")
    if placed is None:
        return []
    t = config["teacher"]
    port = str(placed["port"])
    if t["engine"] == "embedded":
        argv = _embedded_head(
            str(t["source"]),
            "127.0.0.1",
            port,
            str(placed["device"]),
            str(t["dtype"]),
            t["max_running_requests"],
        )
        argv += [
            "--context-length",
            str(t["max_context_length"]),
            "--random-seed",
            str(t["seed"]),
        ]
        if t.get("hf_template"):
            argv += ["--hf-template", str(t["hf_template"])]
        if placed["device"] == "cpu":  # like the CPU rollout engines: one thread each
            argv += ["--threads", "1"]
        return argv
    # an HF checkpoint (rule teacher-sglang-hf)
    head = _sglang_head(
        str(t["source"]),
        port,
        max(int(t["gpus"]), 1),
        t["max_context_length"],
        t["max_running_requests"],
    )
    return head + [
        "--mem-fraction-static",
        repr(float(t["mem_fraction_static"])),
        "--random-seed",
        str(t["seed"]),
        "--dtype",
        str(t["dtype"]),
        # the teacher only scores (prefill): no radix reuse across different samples to keep
        "--disable-radix-cache",
    ]


def visible_gpus(gpus: list[int]) -> dict[str, str]:
    """A server sees only the GPUs the plan gave it (its first one is its device 0)."""
    return {"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in gpus)} if gpus else {}


# SGLang rollout engines, as slime/miles set it: a cheap liveness /health (no generation)
SGLANG_ENGINE_ENV = {"SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "false"}


def engine_env(config: dict[str, Any], plan: dict[str, Any]) -> list[dict[str, str]]:
    """One environment per engine, beside ``engine_argv``."""
    sglang = config["inference"]["engine"] == "sglang"
    return [
        {**(SGLANG_ENGINE_ENV if sglang else {}), **visible_gpus(list(e.get("gpus") or []))}
        for e in plan["placement"]["engines"]
    ]


def judge_process(config: dict[str, Any], placed: dict[str, Any]) -> dict[str, Any]:
    """A managed judge's server on its planned GPUs and port (``judges.NAME.engine``):
    SGLang, or the embedded engine, which serves the same ``/v1/chat/completions`` route."""
    s = config["judges"][placed["name"]]
    gpus = list(placed["gpus"])
    model_path = s["prepared_dir"] or s["model"]
    port, context = str(placed["port"]), str(s["max_context_length"])
    if s["engine"] == "sglang":
        argv = [
            "python",
            "-m",
            "sglang.launch_server",
            "--model-path",
            model_path,
            "--served-model-name",
            s["model"],
            "--host",
            "0.0.0.0",
            "--port",
            port,
            "--tp-size",
            str(max(1, len(gpus))),
            "--context-length",
            context,
        ]
        if s["revision"]:
            argv += ["--revision", s["revision"]]
        if s["context_extension"] == "qwen3-yarn-128k":
            argv += [
                "--json-model-override-args",
                '{"rope_scaling":{"rope_type":"yarn","factor":4.0,'
                '"original_max_position_embeddings":32768}}',
            ]
        return {"argv": argv, "env": visible_gpus(gpus)}
    argv = [
        "python",
        "-m",
        "runtime.engines.embedded",
        "--model-path",
        model_path,
        "--served-model-name",
        s["model"],
        "--host",
        "0.0.0.0" if placed["node"] else "127.0.0.1",
        "--port",
        port,
        "--device",
        "cuda" if gpus else "cpu",
        "--context-length",
        context,
        "--max-running-requests",
        str(s["max_concurrent_calls"]),
    ]
    return {"argv": argv, "env": visible_gpus(gpus)}


def trainer_rank_process(config: dict[str, Any], plan: dict[str, Any]) -> dict[str, Any] | None:
    """A follower trainer rank (``runtime.trainer.ranks``) with its torch.distributed
    environment; what only the node knows is a placeholder (``runtime.node.launch_argv``).
    None for a world of one (rank 0 is the trainer process itself)."""
    trainer = plan["placement"]["trainer"]
    world = int(trainer["world_size"])
    if world <= 1:
        return None
    per_node = world // max(len(trainer["nodes"]), 1)
    env = {
        "RANK": "{rank}",
        "LOCAL_RANK": "{local_rank}",
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(per_node),
        "GROUP_RANK": "{node_rank}",
        "MASTER_ADDR": "{trainer_addr}",
        "MASTER_PORT": "{trainer_port}",
        "TORCHELASTIC_RUN_ID": "node{node_rank}",  # names the log directory
    }
    if trainer["device"] == "cpu":  # the node's cores split between its ranks
        env["OMP_NUM_THREADS"] = "{cpu_threads}"
    return {"argv": ["python", "-m", "runtime.trainer.ranks", "{manifest}"], "env": env}


def commands(config: dict[str, Any], plan: dict[str, Any], paths: dict[str, str]) -> dict[str, Any]:
    """``manifest.commands``: every command line and environment the runtime starts."""
    out: dict[str, Any] = {
        "engine_argv": engine_argv(config, plan, paths),
        "trainer_argv": trainer_argv(),
        "router_argv": router_argv(config, plan),
        "engine_env": engine_env(config, plan),
    }
    teacher = teacher_argv(config, plan)
    if teacher:
        out["teacher_argv"] = teacher
        out["teacher_env"] = visible_gpus(list(plan["placement"]["teacher"].get("gpus") or []))
    evaluator = evaluator_argv(config)
    if evaluator:
        out["evaluator_argv"] = evaluator
    judges = {
        j["name"]: judge_process(config, j)
        for j in plan["placement"]["judges"]
        if config["judges"].get(j["name"], {}).get("mode") == "managed"
    }
    if judges:
        out["judges"] = judges
    rank = trainer_rank_process(config, plan)
    if rank is not None:
        out["trainer_rank"] = rank
    return out
