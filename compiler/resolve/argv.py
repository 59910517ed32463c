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


def _sglang_head(model_path: str, port: str, tp: int, context: int, running: int) -> list[str]:
    """The flags every SGLang server starts with (rollout engines and the teacher)."""
    return [
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        model_path,
        "--host",
        "0.0.0.0",
        "--port",
        port,
        "--tp-size",
        str(tp),
        "--context-length",
        str(context),
        "--max-running-requests",
        str(running),
    ]


def engine_argv(
    config: dict[str, Any], plan: dict[str, Any], paths: dict[str, str]
) -> list[list[str]]:
    inf = config["inference"]
    out: list[list[str]] = []
    for eng in plan["placement"]["engines"]:
        port = str(eng["port"])
        if inf["engine"] == "embedded":
            argv = _embedded_head(
                str(config["model"]["source"]),
                "127.0.0.1" if eng["node"] == 0 else "0.0.0.0",
                port,
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
            if config["model"].get("hf_template"):
                argv += ["--hf-template", str(config["model"]["hf_template"])]
            if inf["max_mamba_cache_size"] < inf["max_running_requests"]:
                # binds only for GatedDeltaNet models: one recurrent state per running sequence
                argv += ["--max-mamba-cache-size", str(inf["max_mamba_cache_size"])]
            if not inf["cuda_graph_decode"]:
                argv.append("--disable-cuda-graph")
        else:
            argv = _sglang_head(
                _model_path(config, paths),
                port,
                inf["tensor_parallel"],
                inf["max_context_length"],
                inf["max_running_requests"],
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
