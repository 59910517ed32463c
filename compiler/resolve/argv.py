"""Command lines the runtime starts: SGLang (or embedded) engines, sglang-router, trainer.

Placeholders the runtime substitutes: ``{manifest}`` (the manifest path) and
``{host:N}`` (the address of node N; engines on the router's node use 127.0.0.1).
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


def engine_argv(
    config: dict[str, Any], plan: dict[str, Any], paths: dict[str, str]
) -> list[list[str]]:
    inf = config["inference"]
    out: list[list[str]] = []
    for eng in plan["placement"]["engines"]:
        port = str(eng["port"])
        if inf["engine"] == "embedded":
            argv = [
                "python",
                "-m",
                "runtime.engines.embedded",
                "--model-path",
                str(config["model"]["source"]),
                "--host",
                "127.0.0.1" if eng["node"] == 0 else "0.0.0.0",
                "--port",
                port,
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
            if config["model"].get("hf_template"):
                argv += ["--hf-template", str(config["model"]["hf_template"])]
            if inf["max_mamba_cache_size"] < inf["max_running_requests"]:
                # binds only for GatedDeltaNet models: one recurrent state per running sequence
                argv += ["--max-mamba-cache-size", str(inf["max_mamba_cache_size"])]
            if not inf["cuda_graph_decode"]:
                argv.append("--disable-cuda-graph")
        else:
            argv = [
                "python",
                "-m",
                "sglang.launch_server",
                "--model-path",
                _model_path(config, paths),
                "--host",
                "0.0.0.0",
                "--port",
                port,
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
            if config["model"]["architecture"] == "hybrid_moe":
                argv += ["--max-mamba-cache-size", str(inf["max_mamba_cache_size"])]
            if config["trainer"]["router_replay"]:
                argv.append("--enable-return-routed-experts")
            argv += native_sglang_argv(config["native"]["sglang"])
        out.append(argv)
    return out


def router_argv(config: dict[str, Any], plan: dict[str, Any]) -> list[str]:
    router = plan["placement"]["router"]
    if router is None:
        return []
    inf = config["inference"]
    urls = []
    for eng in plan["placement"]["engines"]:
        host = "127.0.0.1" if eng["node"] == router["node"] else "{host:" + str(eng["node"]) + "}"
        urls.append(f"http://{host}:{eng['port']}")
    return [
        "python",
        "-m",
        "sglang_router.launch_router",
        "--host",
        "127.0.0.1",
        "--port",
        str(router["port"]),
        "--policy",
        inf["router_policy"],
        "--cache-threshold",
        repr(float(inf["router_cache_threshold"])),
        "--balance-abs-threshold",
        str(inf["router_balance_abs_threshold"]),
        "--balance-rel-threshold",
        repr(float(inf["router_balance_rel_threshold"])),
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
