"""Launch real SGLang servers from the compiled engine argv.

The compiler emits one argv per engine (``manifest.commands.engine_argv``), either the
full ``python -m sglang.launch_server ...`` line or just its flags. Here we normalise it
to this interpreter, pin ``--host``/``--port`` to the placement, and supervise the process
(log file, ``/health`` wait, death detection, SIGTERM then SIGKILL). SGLang itself is not
installed on CPU machines; ``module=`` lets tests put the embedded engine, which accepts
SGLang's spellings of the common flags, in its place.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from contract.spec.evaluation import EvaluationSection
from contract.spec.inference import InferenceSection

from .process import ServerProcess, ServerStartError, start_server

SGLANG_MODULE = "sglang.launch_server"


def _strip_launcher(argv: Sequence[str]) -> list[str]:
    """Drop a leading ``python -m sglang.launch_server`` (or ``sglang serve``)."""
    args = list(argv)
    if args and (args[0].endswith("python") or "python3" in Path(args[0]).name):
        args = args[1:]
    if (
        len(args) >= 2
        and args[0] == "-m"
        and args[1] == SGLANG_MODULE
        or len(args) >= 2
        and Path(args[0]).name == "sglang"
        and args[1] == "serve"
    ):
        args = args[2:]
    return args


def set_flag(args: list[str], flag: str, value: str) -> list[str]:
    """Return ``args`` with the value flag ``flag`` set (replacing ``--f v`` or ``--f=v``)."""
    out: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == flag:
            i += 2
            continue
        if a.startswith(flag + "="):
            i += 1
            continue
        out.append(a)
        i += 1
    return [*out, flag, value]


def get_flag(args: Sequence[str], flag: str) -> str | None:
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def sglang_argv(
    compiled: Sequence[str],
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    python: str | None = None,
    module: str = SGLANG_MODULE,
) -> list[str]:
    """The command line to run: this interpreter, the launcher module, pinned host/port."""
    args = _strip_launcher(compiled)
    if get_flag(args, "--model-path") is None:
        raise ValueError("the compiled SGLang argv has no --model-path")
    args = set_flag(args, "--host", host)
    if port is not None:
        args = set_flag(args, "--port", str(port))
    elif get_flag(args, "--port") is None:
        raise ValueError("no --port in the compiled SGLang argv and none given")
    return [python or sys.executable, "-m", module, *args]


def sglang_installed() -> bool:
    return importlib.util.find_spec("sglang") is not None


# Every engine endpoint the runtime calls -> the SGLang endpoint used where an engine lacks
# it (None: SGLang has it). tests/unit/test_sglang_compat.py checks this table against the
# pinned sglang wheel's http_server and against the paths the runtime's sources call.
ENGINE_ENDPOINTS: dict[str, str | None] = {
    "/generate": None,
    "/health": None,
    "/health_generate": None,
    "/flush_cache": None,
    "/abort_request": None,
    "/get_model_info": None,
    "/get_server_info": None,
    "/update_weights_from_disk": None,
    "/update_weights_from_tensor": None,
    "/init_weights_update_group": None,
    "/update_weights_from_distributed": None,
    "/destroy_weights_update_group": None,
    "/get_weights_by_name": None,
    # refresh publication: retract in-flight requests, load, recompute their KV, continue
    "/pause_generation": None,
    "/continue_generation": None,
    # engine_drain publication: an engine out of the router is idle when both are zero
    "/v1/loads": None,
    # rlc's device checksum (embedded engine); the audit reads weights by name on SGLang
    "/get_weight_checksum": "/get_weights_by_name",
}

# Env of an evaluator's SGLang server, as slime/miles set it: a cheap liveness /health (no
# generation); rollout engines run the compiled commands.engine_env, which holds the same.
DEFAULT_ENV = {"SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "false"}


@dataclass(frozen=True)
class SGLangBackend:
    """SGLang as a backend (``runtime.engines.backend``): it loads HF checkpoints and HF
    weight names, holds ``tensor_parallel`` ranks per engine, and has no checksum endpoint
    (the audit reads tensors by name and compares logprobs)."""

    name: str = "sglang"
    snapshot_format: Literal["native", "hf"] = "hf"
    hf_weight_names: bool = True
    checksum_audit: bool = False
    pool_from_own_memory: bool = False

    def env(self) -> dict[str, str]:
        return dict(DEFAULT_ENV)

    def ranks_per_engine(self, inference: InferenceSection) -> int:
        return inference.tensor_parallel

    def eval_server_args(self, evaluation: EvaluationSection) -> list[str]:
        return list(evaluation.server_args)


SGLANG = SGLangBackend()


def start_sglang(
    compiled: Sequence[str],
    *,
    log_path: Path,
    host: str = "127.0.0.1",
    port: int | None = None,
    timeout: float = 600.0,
    env: dict[str, str] | None = None,
    module: str = SGLANG_MODULE,
    name: str | None = None,
) -> ServerProcess:
    """Start one SGLang server and wait for ``/health``; stop it before raising on failure."""
    if module == SGLANG_MODULE and not sglang_installed():
        raise ServerStartError(
            "sglang is not installed in this environment; inference.engine = 'sglang' "
            "needs the GPU image (use inference.engine = 'embedded' on CPU)"
        )
    argv = sglang_argv(compiled, host=host, port=port, module=module)
    real_port = get_flag(argv, "--port")
    return start_server(
        name or f"sglang:{real_port}",
        argv,
        f"http://{host}:{real_port}/health",
        log_path,
        timeout=timeout,
        env={**DEFAULT_ENV, **(env or {})},
    )
