"""A minimal OpenAI-compatible chat endpoint, mountable on any aiohttp app.

`add_openai_routes(app, generate_fn, tokenizer)` adds ``POST /v1/chat/completions`` and
``GET /v1/models``. The embedded engine mounts it to serve as a managed judge; tests mount
it with a deterministic ``generate_fn``.

``generate_fn(prompt, params)`` may be sync or async. ``prompt`` is a list of token ids when
a tokenizer is given (the chat is rendered with ``tokenizer.apply_chat_template`` when it
has one, else with a plain ``<|role|>`` layout, then ``tokenizer.encode``), otherwise the
rendered text. ``params`` holds SGLang-style sampling params (``max_new_tokens``,
``temperature``, ``top_p``, ``stop``, ``sampling_seed``). It returns the completion as text,
as token ids (decoded with the tokenizer), or as a dict with ``text`` and/or
``output_ids`` (an SGLang ``/generate`` result).
"""

from __future__ import annotations

import inspect
import time
import uuid
from collections.abc import Callable
from typing import Any

from aiohttp import web

GenerateFn = Callable[[Any, dict[str, Any]], Any]
MODEL_NAME_KEY = web.AppKey("openai_model_name", str)


def render_chat(messages: list[dict[str, str]], tokenizer: Any = None) -> str:
    """The prompt text for ``messages`` (the tokenizer's chat template when it has one)."""
    template = getattr(tokenizer, "apply_chat_template", None)
    if template is not None and getattr(tokenizer, "chat_template", None):
        return str(template(messages, tokenize=False, add_generation_prompt=True))
    parts = [f"<|{m['role']}|>\n{m['content']}\n" for m in messages]
    return "".join(parts) + "<|assistant|>\n"


def _encode(tokenizer: Any, text: str) -> list[int]:
    out = tokenizer.encode(text)
    ids = getattr(out, "ids", out)  # `tokenizers.Tokenizer` returns an Encoding
    return [int(t) for t in ids]


def _as_text(result: Any, tokenizer: Any) -> tuple[str, int | None]:
    """(completion text, completion token count if known) of a generate_fn result."""
    if isinstance(result, dict):
        meta = result.get("meta_info") or {}
        if "text" in result:
            return str(result["text"]), meta.get("completion_tokens")
        result = result.get("output_ids", [])
    if isinstance(result, str):
        return result, None
    if isinstance(result, list | tuple) and tokenizer is not None:
        return str(tokenizer.decode([int(t) for t in result])), len(result)
    raise TypeError(f"generate_fn returned {type(result).__name__}, not text or token ids")


def _or(value: Any, default: float) -> Any:
    return default if value is None else value


def _parse(body: Any) -> tuple[list[dict[str, str]], dict[str, Any], int]:
    if not isinstance(body, dict):
        raise ValueError("request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("'messages' must be a non-empty list")
    clean = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ValueError(f"messages[{i}] needs a 'role'")
        content = m.get("content", "")
        if isinstance(content, list):  # [{"type": "text", "text": ...}]
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        clean.append({"role": m["role"], "content": str(content)})
    if body.get("stream"):
        raise ValueError("stream=true is not supported")
    n = int(body.get("n", 1))
    if not 1 <= n <= 16:
        raise ValueError("'n' must be in 1..16")
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 256
    params: dict[str, Any] = {
        "max_new_tokens": int(max_tokens),
        "temperature": float(_or(body.get("temperature"), 1.0)),
        "top_p": float(_or(body.get("top_p"), 1.0)),
    }
    stop = body.get("stop")
    if stop:
        params["stop"] = [stop] if isinstance(stop, str) else list(stop)
    if body.get("seed") is not None:
        params["sampling_seed"] = int(body["seed"])
    return clean, params, n


def add_openai_routes(
    app: web.Application,
    generate_fn: GenerateFn,
    tokenizer: Any = None,
    model_name: str = "rlc-judge",
) -> None:
    """Mount ``/v1/chat/completions`` and ``/v1/models`` on ``app``."""
    app[MODEL_NAME_KEY] = model_name

    async def call(prompt: Any, params: dict[str, Any]) -> Any:
        out = generate_fn(prompt, params)
        if inspect.isawaitable(out):
            out = await out
        return out

    async def chat_completions(request: web.Request) -> web.Response:
        try:
            body = await request.json()
            messages, params, n = _parse(body)
        except (ValueError, TypeError) as exc:
            return _error(str(exc), 400)
        text = render_chat(messages, tokenizer)
        prompt: Any = _encode(tokenizer, text) if tokenizer is not None else text
        prompt_tokens = len(prompt) if tokenizer is not None else None
        choices = []
        completion_tokens = 0
        try:
            for i in range(n):
                p = dict(params)
                if n > 1 and "sampling_seed" in p:
                    p["sampling_seed"] += i
                content, count = _as_text(await call(prompt, p), tokenizer)
                completion_tokens += count or 0
                finish = "length" if count is not None and count >= p["max_new_tokens"] else "stop"
                choices.append(
                    {
                        "index": i,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": finish,
                    }
                )
        except Exception as exc:  # the generator failed: a server error, not a bad request
            return _error(f"generation failed: {type(exc).__name__}: {exc}", 500)
        return web.json_response(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": str(body.get("model") or model_name),
                "choices": choices,
                "usage": {
                    "prompt_tokens": prompt_tokens or 0,
                    "completion_tokens": completion_tokens,
                    "total_tokens": (prompt_tokens or 0) + completion_tokens,
                },
            }
        )

    async def models(_request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "rlc"}]}
        )

    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/v1/models", models)


def _error(message: str, status: int) -> web.Response:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return web.json_response({"error": {"message": message, "type": kind}}, status=status)


class JudgeServer:
    """Serve ``add_openai_routes`` on loopback from a background thread.

    For tools and tests that need a real OpenAI-compatible judge endpoint next to a run:
    ``with JudgeServer(generate_fn) as srv: srv.url``. ``requests`` counts the chat
    completions answered.
    """

    def __init__(
        self,
        generate_fn: GenerateFn,
        tokenizer: Any = None,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        model_name: str = "rlc-judge",
    ) -> None:
        import socket

        self.host = host
        if port is None:
            with socket.socket() as s:
                s.bind((host, 0))
                port = int(s.getsockname()[1])
        self.port = port
        self.requests = 0
        self._generate_fn = generate_fn
        self._tokenizer = tokenizer
        self._model_name = model_name
        self._loop: Any = None
        self._thread: Any = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _counted(self, prompt: Any, params: dict[str, Any]) -> Any:
        self.requests += 1
        return self._generate_fn(prompt, params)

    def start(self) -> JudgeServer:
        import asyncio
        import threading

        ready = threading.Event()
        errors: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            app = web.Application()
            add_openai_routes(app, self._counted, self._tokenizer, self._model_name)
            runner = web.AppRunner(app, access_log=None)
            try:
                loop.run_until_complete(runner.setup())
                loop.run_until_complete(web.TCPSite(runner, self.host, self.port).start())
            except BaseException as exc:  # surfaced by start()
                errors.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=serve, name="judge-http", daemon=True)
        self._thread.start()
        if not ready.wait(30) or errors:
            raise RuntimeError(f"judge server did not start: {errors[0] if errors else 'timeout'}")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> JudgeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
