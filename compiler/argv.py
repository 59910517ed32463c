"""Command lines the runtime starts: SGLang (or embedded) engines, sglang-router, trainer.

Placeholders the runtime substitutes: ``{manifest}`` (the manifest path) and
``{host:N}`` (the address of node N; engines on the router's node use 127.0.0.1).
"""

from __future__ import annotations

from typing import Any


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def native_sglang_argv(options: dict[str, Any]) -> list[str]:
    try:
        from compiler.native import sglang_argv  # type: ignore[attr-defined]
    except ImportError:
        sglang_argv = None
    if sglang_argv is not None:
        return list(sglang_argv(options))
    out: list[str] = []
    for key in sorted(options):
        value = options[key]
        if value is True:
            out.append(_flag(key))
        elif value is False or value is None:
            continue
        elif isinstance(value, list):
            out.append(_flag(key))
            out.extend(str(v) for v in value)
        else:
            out.append(f"{_flag(key)}={value}" if str(value).startswith("-") else _flag(key))
            if not str(value).startswith("-"):
                out.append(str(value))
    return out


def _model_path(config: dict[str, Any], paths: dict[str, str]) -> str:
    m = config["model"]
    if m["format"] == "hf":
        return str(m["source"])
    return paths["prepared"] + "/hf"


def engine_argv(config: dict[str, Any], plan: dict[str, Any], paths: dict[str, str]) -> list[list[str]]:
    inf = config["inference"]
    out: list[list[str]] = []
    for eng in plan["placement"]["engines"]:
        port = str(eng["port"])
        if inf["engine"] == "embedded":
            argv = [
                "python", "-m", "runtime.engines.embedded",
                "--manifest", "{manifest}",
                "--engine-id", str(eng["id"]),
                "--host", "127.0.0.1" if eng["node"] == 0 else "0.0.0.0",
                "--port", port,
            ]
        else:
            argv = [
                "python", "-m", "sglang.launch_server",
                "--model-path", _model_path(config, paths),
                "--host", "0.0.0.0",
                "--port", port,
                "--tp-size", str(inf["tensor_parallel"]),
                "--context-length", str(inf["max_context_length"]),
                "--max-running-requests", str(inf["max_running_requests"]),
                "--max-total-tokens", str(inf["max_total_tokens"]),
                "--mem-fraction-static", repr(float(inf["mem_fraction_static"])),
                "--random-seed", str(inf["seed"]),
                "--dtype", str(config["model"]["dtype"]),
                "--cuda-graph-max-bs", str(inf["cuda_graph_max_bs"]),
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
        host = "127.0.0.1" if eng["node"] == router["node"] else "{host:%d}" % eng["node"]
        urls.append(f"http://{host}:{eng['port']}")
    return [
        "python", "-m", "sglang_router.launch_router",
        "--host", "127.0.0.1",
        "--port", str(router["port"]),
        "--policy", inf["router_policy"],
        "--cache-threshold", repr(float(inf["router_cache_threshold"])),
        "--balance-abs-threshold", str(inf["router_balance_abs_threshold"]),
        "--balance-rel-threshold", repr(float(inf["router_balance_rel_threshold"])),
        "--worker-urls", *urls,
    ]


def trainer_argv() -> list[str]:
    return ["python", "-m", "runtime.execute", "{manifest}"]
