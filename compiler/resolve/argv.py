"""Command lines the runtime starts: SGLang (or embedded) engines, sglang-router, trainer.

The runtime runs these as they stand, with the substitutions of
``runtime.launch_argv.substitute``: ``python`` -> its interpreter, ``{manifest}`` -> the
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


def embedded_engine_argv(config: dict[str, Any], eng: dict[str, Any], host: str) -> list[str]:
    """The embedded engine: exactly the options it honours (``runtime.engines.embedded``).

    The CUDA-graph and GPU-memory options are emitted for GPU engines only: on a CPU they
    have no effect (the rule set says so where a spec sets them)."""
    inf = config["inference"]
    argv = [
        "python",
        "-m",
        "runtime.engines.embedded",
        "--model-path",
        str(config["model"]["source"]),
        "--host",
        host,
        "--port",
        str(eng["port"]),
        "--device",
        str(eng["device"]),
        "--dtype",
        str(config["model"]["dtype"]),
        "--max-running-requests",
        str(inf["max_running_requests"]),
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
    argv = [
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        _model_path(config, paths),
        "--host",
        host,
        "--port",
        str(eng["port"]),
        "--tp-size",
        str(inf["tensor_parallel"]),
        "--context-length",
        str(inf["max_context_length"]),
        "--max-running-requests",
        str(inf["max_running_requests"]),
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
    if config["trainer"]["router_replay"]:
        argv.append("--enable-return-routed-experts")
    return argv + native_sglang_argv(config["native"]["sglang"])


def engine_argv(
    config: dict[str, Any], plan: dict[str, Any], paths: dict[str, str]
) -> list[list[str]]:
    """One command line per engine; the runtime runs each as it stands (``{manifest}``,
    the interpreter and the ports its node picks substituted: ``runtime.launch_argv``)."""
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
    return ["python", "-m", "runtime.execute", "{manifest}"]
