"""Engine-drain publication (``async.publication_mode = "engine_drain"``, experimental).

Engines take a new version one at a time, never all together: an engine is taken out of
sglang-router (``DELETE /workers/{id}``) so no new request reaches it, finishes the requests
it already admitted on its current version, loads the new weights through the transport
(disk or tensor; one engine at a time), and is added back (``POST /workers``) once it
serves them. Meanwhile the other engines keep serving the old version, so generation never
stops fleet-wide. No response spans two versions; each sample carries the version of the
engine that produced it (``meta_info.weight_versions``), which is what the collector ages
it by. With one engine (or no router) the engine's own pause protocol does the draining.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from runtime import control_http

from .disk import (
    DiskPublisher,
    PublicationError,
    load_on_engines,
    prune_snapshots,
    snapshot_dir,
    write_snapshot,
)

POLL_S = 0.05
LOADS = "/v1/loads"  # SGLang's load report: num_running_reqs / num_waiting_reqs per rank


class EngineDrainPublisher:
    """Wraps a disk or tensor publisher: drain, load and re-add engines one at a time."""

    def __init__(self, inner: Any, router_url: str | None, timeout_s: float) -> None:
        if not hasattr(inner, "urls") or type(inner).__name__ == "DistributedPublisher":
            raise ValueError("engine_drain publishes engine by engine: disk or tensor transport")
        self.inner = inner
        self.router_url = router_url.rstrip("/") if router_url else None
        self.timeout_s = timeout_s
        # (engine just loaded, every engine's version right then): what the fleet served
        self.timeline: list[tuple[str, dict[str, str | None]]] = []
        self.on_drained: Callable[[str], None] | None = None  # tests: observe the window

    @property
    def urls(self) -> list[str]:
        return list(self.inner.urls)

    @urls.setter
    def urls(self, value: list[str]) -> None:  # the node drops dead engines here
        self.inner.urls = value

    def __getattr__(self, name: str) -> Any:  # audit, writer: the transport's
        return getattr(self.inner, name)

    def publish(self, state_dict: Mapping[str, Any], version: int) -> None:
        urls = self.urls
        load = self._loader(state_dict, version)
        for url in urls:
            detach = self.router_url is not None and len(self.urls) > 1
            if detach:
                self._router_remove(url, version)
            try:
                self._wait_idle(url, version)
                if self.on_drained is not None:
                    self.on_drained(url)
                load(url)
            finally:
                if detach:
                    self._router_add(url, version)
            self.timeline.append((url, {u: self._version(u) for u in self.urls}))
        if isinstance(self.inner, DiskPublisher):
            prune_snapshots(self.inner.root, self.inner.keep)

    def _loader(self, state_dict: Mapping[str, Any], version: int) -> Callable[[str], None]:
        """Load ``version`` on one engine (a disk snapshot is written once, up front)."""
        inner = self.inner
        if isinstance(inner, DiskPublisher):
            if inner.writer is not None:
                path = inner.writer(state_dict, snapshot_dir(inner.root, version))
            else:
                path = write_snapshot(state_dict, inner.root, version)
            return lambda url: load_on_engines([url], path, version, self.timeout_s)

        def one(url: str) -> None:
            keep = inner.urls
            inner.urls = [url]
            try:
                inner.publish(state_dict, version)
            finally:
                inner.urls = keep

        return one

    def _wait_idle(self, url: str, version: int) -> None:
        """The requests this engine admitted finish on its current version."""
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            try:
                r = control_http.get(
                    f"{url}{LOADS}", params={"include": "core"}, timeout=self.timeout_s
                )
                loads = r.json()["loads"]
            except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
                raise PublicationError(f"engine {url} did not report its load: {exc}") from exc
            busy = sum(
                int(d.get("num_running_reqs", 0)) + int(d.get("num_waiting_reqs", 0)) for d in loads
            )
            if not busy:
                return
            time.sleep(POLL_S)
        raise PublicationError(
            f"engine {url} did not drain within {self.timeout_s:g}s before loading v{version}"
        )

    def _version(self, url: str) -> str | None:
        try:
            v = control_http.get(f"{url}/get_model_info", timeout=self.timeout_s).json()
        except (httpx.HTTPError, ValueError):
            return None
        got = v.get("weight_version")
        return None if got is None else str(got)

    def _workers(self) -> list[dict[str, Any]]:
        r = control_http.get(f"{self.router_url}/workers", timeout=self.timeout_s)
        r.raise_for_status()
        return list(r.json().get("workers", []))

    def _router_remove(self, url: str, version: int) -> None:
        try:
            for w in self._workers():
                if str(w.get("url", "")).rstrip("/") == url.rstrip("/"):
                    control_http.delete(
                        f"{self.router_url}/workers/{w['id']}", timeout=self.timeout_s
                    )
            self._until(lambda ws: url.rstrip("/") not in ws, "leave", url, version)
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            raise PublicationError(
                f"could not take {url} out of the router for v{version}: {exc}"
            ) from exc

    def _router_add(self, url: str, version: int) -> None:
        try:
            r = control_http.post(
                f"{self.router_url}/workers", json={"url": url}, timeout=self.timeout_s
            )
            if r.status_code >= 300:
                raise PublicationError(f"HTTP {r.status_code}: {r.text[:200]}")
            self._until(lambda ws: ws.get(url.rstrip("/"), False), "rejoin", url, version)
        except (httpx.HTTPError, ValueError) as exc:
            raise PublicationError(
                f"could not add {url} back to the router after v{version}: {exc}"
            ) from exc

    def _until(
        self, cond: Callable[[dict[str, bool]], bool], what: str, url: str, version: int
    ) -> None:
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            healthy = {
                str(w.get("url", "")).rstrip("/"): bool(w.get("is_healthy"))
                for w in self._workers()
            }
            if cond(healthy):
                return
            time.sleep(POLL_S)
        raise PublicationError(
            f"engine {url} did not {what} the router while publishing v{version}"
        )
