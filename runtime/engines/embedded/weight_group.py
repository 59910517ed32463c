"""SGLang's distributed weight-update endpoints for the embedded engine.

``/init_weights_update_group`` joins the trainer's broadcast group (this engine is one rank,
``rank_offset``); ``/update_weights_from_distributed`` receives one announced bucket from
rank 0 and applies it under the engine's pause protocol (non-final buckets keep admission
paused); ``/destroy_weights_update_group`` leaves. Same request bodies and answers as
sglang's http_server, so the trainer's publisher cannot tell the two engines apart.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from .engine import Engine

GROUPS_KEY: web.AppKey[dict[str, Any]] = web.AppKey("weight_groups", dict)
ENGINE_REF: web.AppKey[Engine] = web.AppKey("weight_group_engine", Engine)


def _answer(success: bool, message: str) -> web.Response:
    return web.json_response(
        {"success": success, "message": message}, status=200 if success else 400
    )


async def _body(request: web.Request) -> dict[str, Any] | None:
    try:
        body = await request.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


async def init_weights_update_group(request: web.Request) -> web.Response:
    from runtime.publication.distributed import GROUP_NAME, init_weight_group

    body = await _body(request)
    if body is None:
        return _answer(False, "request body must be a JSON object")
    name = str(body.get("group_name") or GROUP_NAME)
    groups = request.app[GROUPS_KEY]
    if name in groups:
        return _answer(False, f"group {name!r} exists; destroy it first")
    try:
        kwargs = {
            "backend": str(body.get("backend", "nccl")),
            "master_address": str(body["master_address"]),
            "master_port": int(body["master_port"]),
            "rank": int(body["rank_offset"]),
            "world_size": int(body["world_size"]),
            "group_name": name,
        }
    except (KeyError, TypeError, ValueError) as exc:
        return _answer(False, f"bad request: {type(exc).__name__}: {exc}")
    try:
        groups[name] = await asyncio.to_thread(lambda: init_weight_group(**kwargs))  # type: ignore[arg-type]
    except Exception as exc:  # the answer carries the cause, as SGLang's does
        return _answer(False, f"Failed to initialize custom process group: {exc}.")
    return _answer(True, "Succeeded to initialize custom process group.")


async def update_weights_from_distributed(request: web.Request) -> web.Response:
    from runtime.publication.distributed import GROUP_NAME, receive

    engine = request.app[ENGINE_REF]
    body = await _body(request)
    if body is None:
        return _answer(False, "request body must be a JSON object")
    group = request.app[GROUPS_KEY].get(str(body.get("group_name") or GROUP_NAME))
    if group is None:
        return _answer(False, "no weight-update group; call /init_weights_update_group first")
    if body.get("load_format") not in (None, "direct"):
        return _answer(False, f"load_format {body.get('load_format')!r} is not supported")
    try:
        named = await asyncio.to_thread(
            receive, group, body["names"], body["dtypes"], body["shapes"], engine.device
        )
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        return _answer(False, f"Failed to receive weights: {type(exc).__name__}: {exc}")
    version = body.get("weight_version")
    result = await asyncio.to_thread(
        engine.update_weights_from_tensors,
        named,
        version=None if version is None else str(version),
        abort_all=bool(body.get("abort_all_requests", False)),
        final=bool(body.get("flush_cache", True)),
    )
    return web.json_response(result, status=200 if result.get("success") else 400)


async def destroy_weights_update_group(request: web.Request) -> web.Response:
    import torch.distributed as dist

    from runtime.publication.distributed import GROUP_NAME

    body = await _body(request) or {}
    group = request.app[GROUPS_KEY].pop(str(body.get("group_name") or GROUP_NAME), None)
    if group is None:
        return _answer(False, "The group to be destroyed does not exist.")
    await asyncio.to_thread(dist.destroy_process_group, group)
    return _answer(True, "Succeeded to destroy custom process group.")


def add_routes(app: web.Application, engine: Engine) -> None:
    app[GROUPS_KEY] = {}
    app[ENGINE_REF] = engine
    app.router.add_post("/init_weights_update_group", init_weights_update_group)
    app.router.add_post("/update_weights_from_distributed", update_weights_from_distributed)
    app.router.add_post("/destroy_weights_update_group", destroy_weights_update_group)
