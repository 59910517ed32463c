"""aiohttp HTTP front of the embedded engine: the SGLang native API subset rlc uses.

Shapes follow SGLang's ``http_server.py``/``io_struct.py`` (see the reference anchors, B):
``/generate`` takes ``input_ids`` or ``text`` (single or batch), ``sampling_params``,
``return_logprob``, ``logprob_start_len``, ``return_routed_experts``, ``rid``; answers
``{"text", "output_ids", "meta_info"}`` (a list for batch input or ``n > 1``). Validation
errors are 400. Streaming is not supported (400). ``/update_weights_from_tensor`` takes
SGLang's body (``serialized_named_tensors``: one base64 entry per tensor-parallel rank, here
exactly one; ``load_format`` None or ``direct``; ``flush_cache``; ``abort_all_requests``;
``weight_version``); the tensors are CUDA IPC or shared-memory handles
(``runtime.publication.ipc``). ``flush_cache=false`` marks a chunk that more chunks of the
same version follow: admission stays paused until the last one. ``/pause_generation``
(``mode``: ``abort`` | ``retract`` | ``in_place``) and ``/continue_generation`` follow
SGLang's bodies and answers; while paused a weight update applies at once.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web

from runtime.heap import freeze_heap, gc_pauses

from .engine import Engine, GenRequest
from .sampling import BadRequest, SamplingParams
from .weight_group import add_routes

log = logging.getLogger(__name__)

HEALTH_GENERATE_TIMEOUT_S = 20.0
ENGINE_KEY: web.AppKey[Engine] = web.AppKey("engine", Engine)
INFO_KEY: web.AppKey[dict[str, Any]] = web.AppKey("server_args")
FREEZE_KEY: web.AppKey[bool] = web.AppKey("freeze_heap_after_warm_up", bool)


def _error(message: str, status: int = 400) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "code": status}, "object": "error", "message": message},
        status=status,
    )


def _per_item(value: Any, n: int, name: str) -> list[Any]:
    """Broadcast a scalar/dict field over a batch, or check a per-item list's length."""
    if isinstance(value, list):
        if len(value) != n:
            raise BadRequest(f"{name} has {len(value)} entries for a batch of {n}")
        return value
    return [value] * n


def _parse_inputs(engine: Engine, body: dict[str, Any]) -> tuple[list[list[int]], bool]:
    has_text, has_ids = body.get("text") is not None, body.get("input_ids") is not None
    if body.get("input_embeds") is not None:
        raise BadRequest("input_embeds is not supported")
    if has_text == has_ids:
        raise BadRequest("give exactly one of 'text' or 'input_ids'")
    if has_ids:
        ids = body["input_ids"]
        if not isinstance(ids, list) or not ids:
            raise BadRequest("input_ids must be a non-empty list")
        if isinstance(ids[0], list):
            return [[int(t) for t in row] for row in ids], True
        return [[int(t) for t in ids]], False
    text = body["text"]
    if isinstance(text, list):
        return [engine.tokenizer.encode(str(t)) for t in text], True
    return [engine.tokenizer.encode(str(text))], False


async def generate(request: web.Request) -> web.StreamResponse:
    engine = request.app[ENGINE_KEY]
    try:
        body = await request.json()
    except ValueError:
        return _error("request body must be JSON")
    if not isinstance(body, dict):
        return _error("request body must be a JSON object")
    try:
        if body.get("stream"):
            raise BadRequest("stream=true is not supported by the embedded engine")
        prompts, batched = _parse_inputs(engine, body)
        count = len(prompts)
        sp = _per_item(body.get("sampling_params"), count, "sampling_params")
        rids = _per_item(body.get("rid"), count, "rid")
        want_lp = _per_item(body.get("return_logprob", False), count, "return_logprob")
        start = _per_item(body.get("logprob_start_len", -1), count, "logprob_start_len")
        want_ex = bool(body.get("return_routed_experts", False))
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[dict[str, Any]]] = []
        reqs: list[GenRequest] = []
        for i, prompt in enumerate(prompts):
            params = SamplingParams.from_json(sp[i])
            for j in range(params.n):
                fut: asyncio.Future[dict[str, Any]] = loop.create_future()

                def done(result: dict[str, Any], fut: asyncio.Future[Any] = fut) -> None:
                    loop.call_soon_threadsafe(_resolve, fut, result)

                rid = rids[i]
                if rid is not None and params.n > 1:
                    rid = f"{rid}-{j}"
                p = params
                if params.n > 1 and params.sampling_seed is not None:
                    p = SamplingParams(
                        **{**params.__dict__, "sampling_seed": params.sampling_seed + j}
                    )
                reqs.append(
                    engine.make_request(
                        prompt,
                        p,
                        done,
                        rid=None if rid is None else str(rid),
                        return_logprob=bool(want_lp[i]),
                        logprob_start_len=int(start[i] if start[i] is not None else -1),
                        return_routed_experts=want_ex,
                    )
                )
                futures.append(fut)
        if len(reqs) > 1:
            batched = True
    except BadRequest as exc:
        return _error(str(exc))
    except (TypeError, ValueError) as exc:
        return _error(f"invalid request: {exc}")
    if not engine.alive:
        return _error("the engine's scheduler is not running", 503)
    engine.submit_many(reqs)  # a batch or a group (n samples): one admission round
    try:
        results = await asyncio.gather(*futures)
    except asyncio.CancelledError:
        for r in reqs:
            engine.abort(r.rid)
        raise
    return web.json_response(results if batched else results[0])


def _threadsafe_resolve(
    loop: asyncio.AbstractEventLoop, fut: asyncio.Future[Any], result: dict[str, Any]
) -> None:
    loop.call_soon_threadsafe(_resolve, fut, result)


def _resolve(fut: asyncio.Future[Any], result: dict[str, Any]) -> None:
    if not fut.done():
        fut.set_result(result)


async def health(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    return web.Response(status=200 if engine.alive else 503)


async def health_generate(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    if not engine.alive:
        return web.Response(status=503)
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[dict[str, Any]] = loop.create_future()
    req = engine.make_request(
        [0],
        SamplingParams(max_new_tokens=1, temperature=0.0),
        lambda res: _threadsafe_resolve(loop, fut, res),
        rid=f"HEALTH_CHECK_{id(fut)}",
    )
    engine.submit(req)
    try:
        await asyncio.wait_for(fut, HEALTH_GENERATE_TIMEOUT_S)
    except TimeoutError:
        engine.abort(req.rid)
        return web.Response(status=503)
    return web.Response(status=200)


async def flush_cache(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    load = engine.load()
    if load["num_running_reqs"] or load["num_waiting_reqs"]:
        return web.Response(
            status=400,
            text="Cache not flushed. Please check if there are any running requests.\n",
        )
    if not await asyncio.to_thread(engine.flush_cache):
        return web.Response(status=503, text="Cache not flushed: the engine did not answer.\n")
    return web.Response(status=200, text="Cache flushed.\n")


async def update_weights_from_disk(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    try:
        body = await request.json()
    except ValueError:
        return _error("request body must be JSON")
    path = body.get("model_path") if isinstance(body, dict) else None
    if not path:
        return _error("model_path is required")
    load_format = body.get("load_format")
    if load_format not in (None, "auto", "safetensors"):
        return _error(f"load_format {load_format!r} is not supported (auto, safetensors)")
    version = body.get("weight_version")
    abort_all = bool(body.get("abort_all_requests", False))
    result = await asyncio.to_thread(
        engine.update_weights, str(path), version=version, abort_all=abort_all
    )
    return web.json_response(result, status=200 if result.get("success") else 400)


def _tensor_update_args(body: Any) -> tuple[str, bool, bool, str | None]:
    """Validate an ``/update_weights_from_tensor`` body (raises ``BadRequest``)."""
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    shards = body.get("serialized_named_tensors")
    if not isinstance(shards, list) or not shards:
        raise BadRequest("serialized_named_tensors must be a non-empty list (one entry per rank)")
    if len(shards) != 1:
        raise BadRequest(
            f"serialized_named_tensors has {len(shards)} entries; this engine has one rank"
        )
    load_format = body.get("load_format")
    if load_format not in (None, "direct", "auto"):
        raise BadRequest(f"load_format {load_format!r} is not supported (direct)")
    flags = {}
    for key, default in (("flush_cache", True), ("abort_all_requests", False)):
        value = body.get(key, default)
        if not isinstance(value, bool):
            raise BadRequest(f"{key} must be true or false, got {value!r}")
        flags[key] = value
    version = body.get("weight_version")
    if version is not None and not isinstance(version, str | int):
        raise BadRequest(f"weight_version must be a string, got {version!r}")
    return (
        shards[0],
        flags["flush_cache"],
        flags["abort_all_requests"],
        None if version is None else str(version),
    )


async def update_weights_from_tensor(request: web.Request) -> web.Response:
    from runtime.publication.ipc import PayloadError, deserialize_named_tensors

    engine = request.app[ENGINE_KEY]
    try:
        body = await request.json()
    except ValueError:
        return _error("request body must be JSON")
    try:
        shard, final, abort_all, version = _tensor_update_args(body)
        named = await asyncio.to_thread(deserialize_named_tensors, shard)
    except (BadRequest, PayloadError) as exc:
        return _error(str(exc))
    result = await asyncio.to_thread(
        engine.update_weights_from_tensors,
        named,
        version=version,
        abort_all=abort_all,
        final=final,
    )
    del named  # the sender may free its tensors once we answer
    return web.json_response(result, status=200 if result.get("success") else 400)


async def get_model_info(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    info = request.app[INFO_KEY]  # type: ignore[index]
    # sglang-router 0.3.2 loads the tokenizer from the ``model_path`` it discovers here and
    # downloads it from the Hugging Face Hub when that is not a local directory; the model
    # keeps its name as ``served_model_name``. So: the local tokenizer directory.
    tokenizer = info.get("tokenizer_path") or engine.model_path
    return web.json_response(
        {
            "model_path": tokenizer,
            "served_model_name": info.get("served_model_name") or engine.model_path,
            "tokenizer_path": tokenizer,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": engine.weight_version,
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": "olmo_core",
            "architectures": [type(engine.model).__name__],
            "dtype": str(next(engine.model.parameters()).dtype).removeprefix("torch."),
        }
    )


async def get_server_info(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    info: dict[str, Any] = dict(request.app[INFO_KEY])  # type: ignore[index]
    info.update(engine.load())
    info.update(engine.stats)
    info["weight_version"] = engine.weight_version
    info["is_moe"] = engine.im.is_moe
    info["kv_cache_bytes"] = engine.im.kv_bytes()
    # the flag's value stays under its own name (SGLang's server args); what the cache holds:
    info["kv_cache_storage_dtype"] = str(engine.im.kv_dtype).removeprefix("torch.")
    info["max_total_num_tokens"] = engine.max_total_tokens  # the KV token pool
    info["kv_cache_slots"] = engine.im.max_slots
    info["max_running_requests"] = engine.max_running
    info["random_seed"] = engine.seed
    info["chunked_prefill_size"] = engine.prefill_tokens
    info["cuda_graph_batch_sizes"] = list(engine.im.graph_batch_sizes)
    info["radix_cache"] = engine.radix_cache
    # prefix-cache hits: cached / prompt tokens over every request served so far
    prompt = engine.stats["num_prompt_tokens"]
    info["cache_hit_rate"] = engine.stats["num_cached_prompt_tokens"] / prompt if prompt else 0.0
    info["radix_cache_tokens"] = engine.prefix_cache_tokens
    info["radix_cache_max_tokens"] = engine.prefix.max_tokens if engine.prefix else 0
    info["decode_cuda_graph"] = bool(engine.im.graph_batch_sizes)
    info["decode_compiled"] = engine.im.compiled
    info["decode_graphs"] = engine.im.captured_graphs()
    info["decode_capture_s"] = round(engine.im.capture_s, 3)  # compile + capture, once
    info["internal_states"] = [engine.load()]
    pauses = gc_pauses().snapshot()  # this server process's, since it started
    info.update({k: v for k, v in pauses.items() if k.startswith("gc_")})
    return web.json_response(info)


async def _optional_object(request: web.Request) -> dict[str, Any] | web.Response:
    """The request's JSON object (``{}`` without a body), or the 400 answer to send."""
    try:
        body = await request.json() if request.can_read_body else {}
    except ValueError:
        return _error("request body must be JSON")
    if not isinstance(body, dict):
        return _error("request body must be a JSON object")
    return body


async def warm_up(request: web.Request) -> web.Response:
    """Capture every decode graph the run's sampling settings can meet, before it starts.

    Body: ``{"sampling_params": [{...}, ...], "max_kv_len": N}`` (both optional)."""
    engine = request.app[ENGINE_KEY]
    body = await _optional_object(request)
    if isinstance(body, web.Response):
        return body
    raw = body.get("sampling_params") or [{}]
    max_kv = body.get("max_kv_len")
    if not isinstance(raw, list) or not (max_kv is None or isinstance(max_kv, int)):
        return _error("sampling_params must be a list and max_kv_len an integer")
    try:
        params = [SamplingParams.from_json(p) for p in raw]
    except BadRequest as exc:
        return _error(str(exc))
    result = await asyncio.to_thread(engine.warm_up, params, max_kv)
    result["startup"] = list(engine.startup_phases)  # this server's own start-up phases
    if result.get("success") and request.app[FREEZE_KEY]:
        # compiled and captured: freeze what start-up built (runtime.heap says why)
        result["frozen_objects"] = await asyncio.to_thread(freeze_heap)
    return web.json_response(result, status=200 if result.get("success") else 503)


async def get_load(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    load = engine.load()
    return web.json_response([{"dp_rank": 0, "num_reqs": sum(load.values()), **load}])


async def v1_loads(request: web.Request) -> web.Response:
    """SGLang's ``/v1/loads`` (core section): per-rank running and waiting requests."""
    engine = request.app[ENGINE_KEY]
    load = engine.load()
    return web.json_response(
        {
            "loads": [{"dp_rank": 0, **load, "max_running_requests": engine.max_running}],
        }
    )


async def get_weight_version(request: web.Request) -> web.Response:
    return web.json_response({"weight_version": request.app[ENGINE_KEY].weight_version})


async def get_weight_checksum(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    kind = request.query.get("kind", "sha256")
    if kind not in ("sha256", "wsum64"):
        return _error(f"kind {kind!r} is not supported (sha256, wsum64)")
    try:
        checksum = await asyncio.to_thread(engine.checksum, kind)
    except RuntimeError as exc:  # the model's weights failed to load (or never came)
        return _error(str(exc), 503)
    return web.json_response({"checksum": checksum, "weight_version": engine.weight_version})


async def abort_request(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    try:
        body = await request.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        return _error("request body must be a JSON object")
    rid, abort_all = body.get("rid"), bool(body.get("abort_all", False))
    if rid is None and not abort_all:
        return _error("give rid or abort_all=true")
    engine.abort(None if rid is None else str(rid), abort_all)
    return web.Response(status=200)


async def pause_generation(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    body = await _optional_object(request)
    if isinstance(body, web.Response):
        return body
    try:
        applied = await asyncio.to_thread(engine.pause_generation, str(body.get("mode", "abort")))
    except BadRequest as exc:
        return _error(str(exc))
    if not applied:
        return _error("the scheduler did not pause in time", 503)
    return web.json_response({"message": "Generation paused successfully.", "status": "ok"})


async def continue_generation(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    if not await asyncio.to_thread(engine.continue_generation):
        return _error("the scheduler did not continue in time", 503)
    return web.json_response({"message": "Generation continued successfully.", "status": "ok"})


class _Http2ProbeFilter(logging.Filter):
    """sglang-router probes each worker with an HTTP/2 (gRPC) preface before it settles on
    HTTP/1.1; aiohttp logs each probe as an error with a traceback. Keep one quiet line."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and "PRI/Upgrade" in str(exc):
            record.msg, record.args, record.exc_info = "ignored an HTTP/2 probe", (), None
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


def mount_openai(app: web.Application, engine: Engine, tokenizer: Any, model_name: str) -> None:
    """Serve ``/v1/chat/completions`` from this engine (what a managed judge answers on)."""
    from runtime.rewards.judge_server import add_openai_routes

    async def generate_fn(prompt_ids: list[int], params: dict[str, Any]) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[dict[str, Any]] = loop.create_future()
        req = engine.make_request(
            list(prompt_ids),
            SamplingParams.from_json(params),
            lambda result: loop.call_soon_threadsafe(_resolve, fut, result),
        )
        engine.submit(req)
        return await fut

    add_openai_routes(app, generate_fn, tokenizer, model_name)


def build_app(
    engine: Engine, server_args: dict[str, Any], *, freeze_heap_after_warm_up: bool = False
) -> web.Application:
    """The engine's routes. ``freeze_heap_after_warm_up``: the server owns its process (the
    engine's ``__main__``), so a successful ``/warm_up`` freezes the heap."""
    server_log = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, _Http2ProbeFilter) for f in server_log.filters):
        server_log.addFilter(_Http2ProbeFilter())
    app = web.Application(client_max_size=512 * 1024 * 1024)
    app[ENGINE_KEY] = engine
    app[INFO_KEY] = dict(server_args)  # type: ignore[index]
    app[FREEZE_KEY] = freeze_heap_after_warm_up
    gc_pauses()  # counted from here: /get_server_info reports them
    r = app.router
    r.add_route("POST", "/generate", generate)
    r.add_route("PUT", "/generate", generate)
    r.add_route("POST", "/warm_up", warm_up)
    r.add_get("/health", health)
    r.add_get("/health_generate", health_generate)
    r.add_post("/health_generate", health_generate)
    r.add_get("/flush_cache", flush_cache)
    r.add_post("/flush_cache", flush_cache)
    r.add_post("/update_weights_from_disk", update_weights_from_disk)
    r.add_post("/update_weights_from_tensor", update_weights_from_tensor)
    r.add_get("/get_model_info", get_model_info)
    r.add_get("/model_info", get_model_info)
    r.add_get("/get_server_info", get_server_info)
    r.add_get("/server_info", get_server_info)
    r.add_get("/get_load", get_load)
    r.add_get("/v1/loads", v1_loads)
    r.add_get("/get_weight_version", get_weight_version)
    r.add_get("/get_weight_checksum", get_weight_checksum)
    r.add_post("/abort_request", abort_request)
    r.add_post("/pause_generation", pause_generation)
    r.add_post("/continue_generation", continue_generation)
    add_routes(app, engine)

    async def on_cleanup(app: web.Application) -> None:
        await asyncio.to_thread(engine.stop)

    app.on_cleanup.append(on_cleanup)
    return app
