"""One HTTP health probe shared by the node runner and the managed judges."""

from __future__ import annotations


def healthy(url: str, timeout: float) -> bool:
    """True when ``{url}/health`` answers 200 within ``timeout`` seconds."""
    from runtime import control_http

    return control_http.answers_ok(f"{url}/health", timeout)
