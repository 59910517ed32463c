"""Refresh publication (``async.publication_mode = "refresh"``): no wait for in-flight work.

Around the transport's own publication (disk, tensor or distributed, unchanged) every engine
is paused with SGLang's ``/pause_generation`` ``mode = "retract"``: its running requests go
back to its queue with their sampled tokens and behaviour logprobs, their KV dropped. The
weights then load at once (a paused engine takes an update without waiting for requests),
and ``/continue_generation`` resumes: each retracted request is prefilled again over prompt
+ tokens so far under the new weights and decodes on. A response may therefore span policy
versions; the engine reports them per token (``meta_info.weight_versions``), the collector
ages a group by its oldest token, and the trainer corrects with TIS against the recorded
(historical) logprobs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from runtime import control_http

from .disk import PublicationError

PAUSE = {"mode": "retract"}


class RefreshPublisher:
    """Wraps a publisher: pause (retract) every engine, publish, continue every engine."""

    def __init__(self, inner: Any, timeout_s: float) -> None:
        self.inner = inner
        self.timeout_s = timeout_s
        self.publications = 0

    @property
    def urls(self) -> list[str]:
        return list(getattr(self.inner, "urls", []) or [])

    @urls.setter
    def urls(self, value: list[str]) -> None:  # the node drops dead engines here
        self.inner.urls = value

    def __getattr__(self, name: str) -> Any:  # audit, writer, logprobs: the transport's
        return getattr(self.inner, name)

    def publish(self, state_dict: Mapping[str, Any], version: int) -> Any:
        paused: list[str] = []
        try:
            for url in self.urls:
                self._post(url, "/pause_generation", PAUSE, version)
                paused.append(url)
            result = self.inner.publish(state_dict, version)
        finally:
            errors = []
            for url in paused:  # an engine left paused would hang its requests
                try:
                    self._post(url, "/continue_generation", {}, version)
                except PublicationError as exc:
                    errors.append(str(exc))
            if errors:
                raise PublicationError("; ".join(errors))
        self.publications += 1
        return result

    def _post(self, url: str, path: str, body: dict[str, Any], version: int) -> None:
        try:
            r = control_http.post(f"{url}{path}", json=body, timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            raise PublicationError(
                f"engine {url} did not answer {path} while publishing v{version}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if r.status_code != 200:
            raise PublicationError(
                f"engine {url} refused {path} while publishing v{version} "
                f"(HTTP {r.status_code}): {r.text[:200]}"
            )
