"""Run the embedded engine's HTTP server inside this process, on a background thread.

For tests and tools that want a real HTTP engine without paying a subprocess start
(importing torch and OLMo-core again). ``with InProcessServer(loaded) as srv: srv.url``.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from aiohttp import web

from ..process import free_port
from .engine import Engine
from .server import build_app


class InProcessServer:
    def __init__(
        self,
        loaded: Any,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        model_path: str = "in-process",
        **engine_kwargs: Any,
    ):
        self.host = host
        self.port = port or free_port(host)
        self.engine = Engine(loaded, model_path=model_path, **engine_kwargs)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> InProcessServer:
        self.engine.start()
        self._thread = threading.Thread(target=self._serve, name="engine-http", daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("in-process engine server did not start")
        if self._error is not None:
            raise RuntimeError(f"in-process engine server failed: {self._error}")
        return self

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            app = build_app(self.engine, {"model_path": self.engine.model_path})
            self._runner = web.AppRunner(app, access_log=None)
            loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, self.host, self.port)
            loop.run_until_complete(site.start())
        except BaseException as exc:  # surfaced by start()
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        loop.run_forever()
        loop.run_until_complete(self._runner.cleanup())
        loop.close()

    def stop(self) -> None:
        if self._loop is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=15)
        self.engine.stop()

    def __enter__(self) -> InProcessServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
