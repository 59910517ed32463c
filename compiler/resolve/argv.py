"""Command lines the runtime starts: SGLang (or embedded) engines, sglang-router, trainer.

The runtime runs these as they stand, with the substitutions of
``runtime.node.launch_argv.substitute``: ``python`` -> its interpreter, ``{manifest}`` -> the
manifest path, ``{host:N}`` -> the address of node N (engines on the router's node use
127.0.0.1), and the ports its node picks in place of the compiled ``--port``,
``--prometheus-port`` and ``--worker-urls`` values.
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


def commands(config: dict[str, Any], plan: dict[str, Any], paths: dict[str, str]) -> dict[str, Any]:
    """``manifest.commands``: every command line the runtime starts."""
    out: dict[str, Any] = {
        "engine_argv": engine_argv(config, plan, paths),
        "trainer_argv": trainer_argv(),
        "router_argv": router_argv(config, plan),
    }
    teacher = teacher_argv(config, plan)
    if teacher:
        out["teacher_argv"] = teacher
    return out
