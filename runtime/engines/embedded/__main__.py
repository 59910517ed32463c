"""``python -m runtime.engines.embedded --model SOURCE --port P``: serve one engine."""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

# SGLang's --attention-backend names -> the embedded engine's decode attention
ATTENTION_BACKENDS = {"torch_native": "sdpa", "flex_attention": "flex", "triton": "triton"}
# --kv-cache-dtype values (``forward.KV_CACHE_DTYPES``, named here so the parser loads fast)
KV_CACHE_DTYPE_NAMES = ("auto", "bf16", "bfloat16", "fp8_e4m3", "fp8_e5m2")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m runtime.engines.embedded",
        description="rlc embedded generation server (SGLang native HTTP API subset)",
    )
    p.add_argument(
        "--model",
        "--model-path",
        dest="model",
        required=True,
        help="model source (see runtime.models.load_model); --model-path is SGLang's spelling",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--max-running-requests", type=int, default=16)
    p.add_argument(
        "--max-total-tokens",
        type=int,
        default=None,
        help="KV token pool (default: max-running-requests x context-length); the cache "
        "holds as many context-length slots as fit in it",
    )
    p.add_argument(
        "--mem-fraction-static",
        type=float,
        default=None,
        help="on a GPU: the fraction of its memory for weights + KV pool (caps the pool)",
    )
    p.add_argument(
        "--kv-cache-dtype",
        default="auto",
        choices=KV_CACHE_DTYPE_NAMES,
        help="the KV cache's storage type (SGLang's names): auto = the model's dtype; "
        "fp8_e4m3 / fp8_e5m2 hold twice the tokens and halve what a decode step reads of "
        "them, values saturated with a scale of 1",
    )
    p.add_argument("--context-length", type=int, default=2048)
    p.add_argument(
        "--random-seed",
        "--seed",
        dest="seed",
        type=int,
        default=0,
        help="sampling seed of requests that bring none (SGLang's spelling)",
    )
    p.add_argument(
        "--init-seed",
        type=int,
        default=None,
        help="seed of a random-initialised (builtin) model, the trainer's (default: --random-seed)",
    )
    p.add_argument("--tp-size", "--tp", dest="tp_size", type=int, default=1, choices=[1])
    p.add_argument("--weight-version", default="0")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads (default 1 on CPU: decode matmuls are tiny and "
        "threads fight over shared cores)",
    )
    p.add_argument(
        "--cuda-graph",
        dest="cuda_graph",
        action="store_true",
        default=None,
        help="capture the decode step in CUDA graphs (the default with --device cuda)",
    )
    p.add_argument(
        "--disable-cuda-graph",
        dest="cuda_graph",
        action="store_false",
        help="decode without CUDA graphs (SGLang's spelling)",
    )
    p.add_argument(
        "--max-mamba-cache-size",
        type=int,
        default=None,
        help="GatedDeltaNet (olmo_hybrid) models: recurrent states held at once, so at most "
        "this many sequences run together (default: --max-running-requests)",
    )
    p.add_argument(
        "--cuda-graph-kv-step",
        type=int,
        default=256,
        help="KV-length bucket of the decode graphs (0: one graph per batch size, full cache)",
    )
    p.add_argument(
        "--chunked-prefill-size",
        "--prefill-tokens",
        dest="prefill_tokens",
        type=int,
        default=16384,
        help="padded prompt tokens per batched prefill forward (-1: one forward)",
    )
    p.add_argument(
        "--cuda-graph-max-bs",
        type=int,
        default=None,
        help="largest decode batch served from a CUDA graph (larger ones decode eagerly)",
    )
    p.add_argument(
        "--disable-radix-cache",
        dest="radix_cache",
        action="store_false",
        help="no radix prefix cache (every prompt prefilled whole)",
    )
    p.add_argument(
        "--compile-decode",
        dest="compile_decode",
        action="store_true",
        default=None,
        help="torch.compile the decode step (the default with --device cuda; falls back "
        "to eager if compilation fails)",
    )
    p.add_argument(
        "--disable-compile-decode",
        dest="compile_decode",
        action="store_false",
        help="run the decode step without torch.compile",
    )
    p.add_argument(
        "--compile-prefill",
        dest="compile_prefill",
        action="store_true",
        default=None,
        help="torch.compile the prefill's blocks by region, shape-dynamic, compiled in the "
        "warm-up (the default wherever the decode step is compiled on a GPU; falls back to "
        "eager if compilation fails)",
    )
    p.add_argument(
        "--disable-compile-prefill",
        dest="compile_prefill",
        action="store_false",
        help="run the prefill's blocks eagerly",
    )
    p.add_argument(
        "--fused-sampling",
        dest="fused_sampling",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="sample inside the compiled, captured decode step (one graph replay per step); "
        "default: on wherever decode runs as CUDA graphs (a GPU without --disable-cuda-graph)",
    )
    p.add_argument(
        "--disable-overlap-schedule",
        dest="overlap_schedule",
        action="store_false",
        help="read each decode step's tokens before launching the next (SGLang's flag); by "
        "default, with --fused-sampling, step N+1 is launched before step N's tokens are "
        "read, so the host's bookkeeping overlaps the device's step",
    )
    p.add_argument(
        "--attention-backend",
        default=None,
        choices=sorted(ATTENTION_BACKENDS),
        help="decode attention (SGLang's names): triton = the split-KV Triton kernel, each "
        "row reading exactly its own entries (the default with --device cuda); "
        "torch_native = SDPA over the batch's length bucket (the default on a CPU); "
        "flex_attention = FlexAttention's block-sparse decode (compiled decode on a GPU)",
    )
    p.add_argument(
        "--hf-template",
        default=None,
        help="tokenizer directory for an OLMo-core checkpoint source (model.hf_template)",
    )
    p.add_argument(
        "--served-model-name",
        default=None,
        help="model name of the OpenAI-compatible /v1/chat/completions route (managed judges)",
    )
    p.add_argument("--log-level", default="info")
    return p


# Whether the engine starts on zeros while its weights are read: by default on a GPU,
# where it compiles and captures its decode graphs meanwhile; on a CPU it has nothing to
# overlap the read with. ``0``: never (to measure what it saves); ``1``: on a CPU too.
DEFER_WEIGHTS_ENV = "RLC_ENGINE_DEFER_WEIGHTS"


def defers_weights(device: str, env: dict[str, str] | None = None) -> bool:
    setting = (os.environ if env is None else env).get(DEFER_WEIGHTS_ENV)
    return setting == "1" or (setting != "0" and device == "cuda")


def load_source(
    source: str,
    *,
    device: str,
    dtype: torch.dtype,
    seed: int,
    hf_template: str | None = None,
    defer_weights: bool = False,
) -> Any:
    """``engine-test:...`` builds a tiny model here; anything else goes to runtime.models
    (``defer_weights``: see ``load_model``; the engine copies them in before serving)."""
    if source.startswith("engine-test:"):
        from .tiny import build_tiny, parse_test_source

        kind, opts = parse_test_source(source)
        loaded = build_tiny(kind, seed=seed, **opts)
        loaded.model.to(device=device, dtype=dtype)
        return loaded
    from runtime.models import load_model

    return load_model(
        source,
        device=device,
        dtype=dtype,
        seed=seed,
        hf_template=hf_template,
        defer_weights=defer_weights,
    )


def _exit_on_failed_weights(message: str) -> None:
    """The weights did not load: say why in one line (the supervisor reads it), then exit."""
    print(message, file=sys.stderr, flush=True)
    logging.shutdown()
    os._exit(1)


def local_tokenizer_dir(
    model: str, hf_template: str | None, tokenizer: Any
) -> tuple[Path | None, bool]:
    """A local directory with this model's tokenizer (for sglang-router, which otherwise
    asks the Hugging Face Hub for ``model``): the checkpoint's own, the template's, or the
    tokenizer written to a temporary directory (``True``: remove it on exit). None for the
    test engines' byte tokenizer, which has no file form."""
    for root in (model, hf_template):
        if root and (Path(root) / "tokenizer.json").is_file():
            return Path(root).resolve(), False
    if not hasattr(tokenizer, "save"):
        return None, False
    out = Path(tempfile.mkdtemp(prefix="rlc-tokenizer-"))
    tokenizer.save(out)
    return out, True


def main(argv: list[str] | None = None) -> int:
    from runtime.node.startup import phase_line, process_started_at

    started = process_started_at()
    marks: list[tuple[str, float]] = [("", started if started is not None else time.time())]

    def mark(name: str) -> None:
        marks.append((name, time.time()))

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.prefill_tokens == 0 or args.cuda_graph_kv_step < 0:
        parser.error("--chunked-prefill-size must not be 0 and --cuda-graph-kv-step >= 0")
    if args.mem_fraction_static is not None and not 0 < args.mem_fraction_static <= 1:
        parser.error("--mem-fraction-static must lie in (0, 1]")
    if args.attention_backend == "triton" and args.device != "cuda":
        parser.error("--attention-backend triton needs --device cuda (a CPU runs no Triton kernel)")
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    from runtime.node.stacks import dump_stacks_on_sigusr1

    dump_stacks_on_sigusr1()
    threads = args.threads or (1 if args.device == "cpu" else None)
    if threads:
        torch.set_num_threads(threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda but CUDA is not available", file=sys.stderr)
        return 2
    from aiohttp import web

    from .engine import Engine
    from .server import build_app

    mark("interpreter and imports" if started is not None else "imports")
    dtype = getattr(torch, args.dtype)
    loaded = load_source(
        args.model,
        device=args.device,
        dtype=dtype,
        seed=args.seed if args.init_seed is None else args.init_seed,
        hf_template=args.hf_template,
        # the weights are read while the engine sizes its pool, serves its health check
        # and captures its decode graphs (on zeros); they are copied in before any request
        defer_weights=defers_weights(args.device),
    )
    mark("model" if getattr(loaded, "pending", None) is None else "model (allocated)")
    engine = Engine(
        loaded,
        model_path=args.model,
        device=args.device,
        max_running_requests=args.max_running_requests,
        max_total_tokens=args.max_total_tokens,
        context_length=args.context_length,
        seed=args.seed,
        weight_version=args.weight_version,
        cuda_graph=args.cuda_graph,
        graph_kv_step=args.cuda_graph_kv_step,
        prefill_tokens=args.prefill_tokens,
        compile_decode=args.compile_decode,
        compile_prefill=args.compile_prefill,
        fused_sampling=args.fused_sampling,
        overlap_schedule=args.overlap_schedule,
        max_mamba_cache_size=args.max_mamba_cache_size,
        mem_fraction_static=args.mem_fraction_static,
        cuda_graph_max_bs=args.cuda_graph_max_bs,
        radix_cache=args.radix_cache,
        kv_cache_dtype=args.kv_cache_dtype,
        decode_attention=(
            ATTENTION_BACKENDS[args.attention_backend] if args.attention_backend else None
        ),
        on_weights_failed=_exit_on_failed_weights,
    )
    mark("engine (KV pool)")
    engine.startup_phases = [  # before the scheduler starts: it adds the weights' copy
        {"name": name, "seconds": round(t - prev, 3)}
        for (_, prev), (name, t) in zip(marks, marks[1:], strict=False)
    ]
    engine.start()
    server_args = {k: v for k, v in vars(args).items()}
    server_args["model_path"] = args.model
    tokenizer_dir, written = local_tokenizer_dir(args.model, args.hf_template, loaded.tokenizer)
    if tokenizer_dir is not None:  # what sglang-router reads (see server.get_model_info)
        server_args["tokenizer_path"] = str(tokenizer_dir)
        server_args["model_path"] = str(tokenizer_dir)
        server_args["served_model_name"] = args.served_model_name or args.model
    logging.getLogger(__name__).info(
        "serving %s on %s:%d (%s); start-up: %s",
        args.model,
        args.host,
        args.port,
        args.device,
        phase_line(engine.startup_phases),
    )
    app = build_app(engine, server_args, freeze_heap_after_warm_up=True)
    from .server import mount_openai

    mount_openai(app, engine, loaded.tokenizer, args.served_model_name or args.model)
    web.run_app(
        app,
        host=args.host,
        port=args.port,
        print=None,
        access_log=None,
        shutdown_timeout=0.5,
    )
    # run_app has closed the server and stopped the engine thread (on_cleanup). Skip the
    # interpreter's final garbage collection of torch/OLMo-core state, which can take
    # many seconds and would make SIGTERM look ignored to supervisors.
    if written and tokenizer_dir is not None:
        shutil.rmtree(tokenizer_dir, ignore_errors=True)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
