"""The executor HTTP service: ``POST /run`` and ``GET /health`` on loopback (aiohttp)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time
from typing import Any

from aiohttp import web

from runtime.executor.protocol import (
    RequestError,
    case_result,
    parse_request,
    skipped_result,
)
from runtime.executor.sandbox import (
    Isolation,
    Sandbox,
    SandboxUnavailable,
    probe_isolation,
)
from runtime.executor.settings import ISOLATIONS, ExecutorSettings

SANDBOX_KEY = web.AppKey("sandbox", Sandbox)
_DEFAULTS = ExecutorSettings()
# stdout/stderr returned per test (the sandbox caps what it reads at limits.output_bytes).
STREAM_CAP = 8192
MAX_BODY = 8 * 1024 * 1024


async def handle_run(request: web.Request) -> web.Response:
    sandbox = request.app[SANDBOX_KEY]
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return web.json_response({"error": "body is not valid JSON"}, status=400)
    try:
        req = parse_request(body)
    except RequestError as exc:
        return web.json_response({"error": str(exc)}, status=400)
    start = time.monotonic()

    if req.network and not sandbox.iso.allow_network:
        msg = "this executor does not allow network access (start it with --allow-network)"
        return web.json_response({"error": msg}, status=400)

    async def one(case):
        outcome = await sandbox.run(
            case.program, req.mode, req.limits, case.stdin, case.judge, req.network
        )
        return case_result(case, outcome, STREAM_CAP)

    results: list[dict[str, Any]]
    if req.stop_on_failure:
        results = []
        for case in req.cases:
            if results and not results[-1]["passed"]:
                results.append(skipped_result())
                continue
            results.append(await one(case))
    else:
        results = list(await asyncio.gather(*(one(c) for c in req.cases)))
    passed = sum(r["passed"] for r in results)
    first_bad = next((r["status"] for r in results if not r["passed"]), "ok")
    return web.json_response(
        {
            "results": results,
            "passed": passed,
            "total": len(results),
            "status": first_bad,
            "wall_s": round(time.monotonic() - start, 4),
            "isolation": sandbox.iso.describe(),
        }
    )


async def handle_health(request: web.Request) -> web.Response:
    sandbox = request.app[SANDBOX_KEY]
    return web.json_response(
        {
            "status": "ok",
            "workers": sandbox.workers,
            "active": sandbox.active,
            "runs": sandbox.runs,
            "uid_range": (
                [sandbox.uid_base, sandbox.uid_base + 2 * sandbox.workers - 1]
                if sandbox.iso.drop_uid
                else None
            ),
            "quarantined_slots": len(sandbox.quarantined),
            "isolation": sandbox.iso.describe(),
        }
    )


def make_app(iso: Isolation, workers: int) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY)
    sandbox = Sandbox(iso, workers)
    app[SANDBOX_KEY] = sandbox
    app.router.add_post("/run", handle_run)
    app.router.add_get("/health", handle_health)

    async def cleanup(_app: web.Application) -> None:
        sandbox.close()

    app.on_cleanup.append(cleanup)
    return app


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m runtime.executor", description=__doc__)
    p.add_argument("--host", default="127.0.0.1", help="bind address (keep it loopback)")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port (printed)")
    p.add_argument(
        "--workers",
        type=int,
        default=_DEFAULTS.workers,
        help="concurrent sandboxed processes",
    )
    p.add_argument("--python", default=None, help="interpreter for programs (default: ours)")
    p.add_argument(
        "--site",
        action="store_true",
        help="let programs import the interpreter's site-packages (default: stdlib only, -S)",
    )
    p.add_argument(
        "--isolation",
        choices=ISOLATIONS,
        default=_DEFAULTS.isolation,
        help="auto: namespaces as root, else an unprivileged user namespace; none: no sandbox"
        " (also needs --allow-unsandboxed)",
    )
    p.add_argument(
        "--allow-unsandboxed",
        action="store_true",
        help="run programs with rlimits only when no sandbox layer works (trusted code only)",
    )
    p.add_argument(
        "--allow-network",
        action="store_true",
        help="let requests ask for network access inside the sandbox ('network': true)",
    )
    return p.parse_args(argv)


def settings_from_args(args: argparse.Namespace) -> ExecutorSettings:
    """The options `ExecutorSettings.service_args` writes, read back into the one type."""
    return ExecutorSettings(
        workers=args.workers,
        isolation=args.isolation,
        site=args.site,
        allow_unsandboxed=args.allow_unsandboxed,
        network=args.allow_network,
    )


async def _serve(args: argparse.Namespace) -> None:
    settings = settings_from_args(args)
    if settings.isolation == "none" and not settings.allow_unsandboxed:
        raise SandboxUnavailable("--isolation none needs --allow-unsandboxed")
    iso = probe_isolation(
        args.python,
        settings.isolation,
        site=settings.site,
        allow_unsandboxed=settings.allow_unsandboxed,
        allow_network=settings.network,
    )
    if not iso.namespaces:
        for _ in range(3):
            print(iso.describe()["warning"], file=sys.stderr, flush=True)
    app = make_app(iso, settings.workers)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port)
    await site.start()
    port = args.port
    for addr in runner.addresses:
        port = addr[1]
        break
    # The first stdout line is the contract with launchers that pass --port 0.
    print(f"rlc-executor listening on http://{args.host}:{port}", flush=True)
    print(json.dumps({"isolation": iso.describe()}), file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_serve(args))
    except SandboxUnavailable as exc:
        print(f"rlc-executor: {exc}", file=sys.stderr, flush=True)
        return 2
    return 0
