"""One HTTP health probe shared by the node runner and the managed judges."""

from __future__ import annotations


def healthy(url: str, timeout: float) -> bool:
    """True when ``{url}/health`` answers 200 within ``timeout`` seconds."""
    import httpx

    from runtime import control_http

    try:
        return control_http.get(f"{url}/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False
