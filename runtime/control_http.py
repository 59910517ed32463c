"""One pooled HTTP client per process for the runtime's control calls: publication, weight
audits, health checks, the router's worker list.

``httpx.get``/``httpx.post`` build a client for every call, and with it a TLS context (about
12 ms of CPU, loading the CA bundle even for plain ``http://``), then open a new connection.
In the quickstart's profile that was most of each weight publication. These functions take
the same arguments and raise the same ``httpx`` errors, over one kept-alive client."""

from __future__ import annotations

import threading
from typing import Any

import httpx

_lock = threading.Lock()
_client: httpx.Client | None = None


def client() -> httpx.Client:
    """The process's control client (made on first use; httpx clients are thread-safe)."""
    global _client
    if _client is None:
        with _lock:
            if _client is None:
                _client = httpx.Client(
                    timeout=httpx.Timeout(5.0),  # httpx.get's default where none is given
                    limits=httpx.Limits(max_connections=64, max_keepalive_connections=16),
                )
    return _client


def get(url: str, **kwargs: Any) -> httpx.Response:
    return client().get(url, **kwargs)


def post(url: str, **kwargs: Any) -> httpx.Response:
    return client().post(url, **kwargs)


def delete(url: str, **kwargs: Any) -> httpx.Response:
    return client().delete(url, **kwargs)


def answers_ok(url: str, timeout: float) -> bool:
    """True when ``url`` answers 200 within ``timeout`` seconds (a health probe)."""
    try:
        return get(url, timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False
