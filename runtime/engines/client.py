"""HTTP client for SGLang-compatible engines (embedded or real), direct or via the router.

Two connection pools: a small one for health probes (short timeout) and one for
generation (long timeout), so a busy generation pool never makes an engine look dead.
Each HTTP call is retried ``http_retries`` times on transport errors, 5xx, 408 and 429,
with exponential backoff and jitter. ``generate_group`` sends a group as one batched
``/generate`` call and retries the whole group (``group_retries``) when the call fails or
any sample comes back aborted; exhausting the budget raises ``EngineFailure``.

The client is thread-safe (httpx pools are); run groups concurrently from threads, e.g.
``generate_groups``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx

from contract.defaults import default_of
from contract.spec.runtime import RuntimeSection

RETRY_STATUS = {408, 429, 500, 502, 503, 504}


class EngineFailure(RuntimeError):
    """Generation failed after the configured retries (or a non-retryable error)."""


class EngineRequestError(EngineFailure):
    """The engine rejected the request (4xx): retrying the same request cannot help."""


# The client settings that are ``[runtime]`` fields (defaults from the spec).
SPEC_FIELDS = (
    "health_timeout_s",
    "generate_timeout_s",
    "http_retries",
    "retry_backoff_s",
    "group_retries",
)


def _spec(name: str) -> Any:
    return field(default=default_of(RuntimeSection, name))


@dataclass(frozen=True)
class ClientSettings:
    """The engine connection: the `SPEC_FIELDS` (their defaults are the spec's,
    `contract.defaults`) and this client's own."""

    health_timeout_s: float = _spec("health_timeout_s")
    generate_timeout_s: float = _spec("generate_timeout_s")
    http_retries: int = _spec("http_retries")
    retry_backoff_s: float = _spec("retry_backoff_s")
    group_retries: int = _spec("group_retries")
    max_backoff_s: float = 30.0
    connect_timeout_s: float = 10.0
    max_connections: int = 256

    @classmethod
    def from_contract(cls, runtime: RuntimeSection) -> ClientSettings:
        return cls(**{name: getattr(runtime, name) for name in SPEC_FIELDS})


@dataclass
class Sample:
    """One generated continuation, in the fields the rollout side needs."""

    prompt_ids: list[int]
    output_ids: list[int]
    text: str
    finish_reason: str  # "stop" | "length" | "abort"
    finish: dict[str, Any]
    logprobs: list[float] | None = None
    weight_version: str | None = None
    routed_experts: str | None = None  # SGLang wire form (base64 int32), when requested
    meta: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_response(cls, prompt_ids: Sequence[int], resp: Mapping[str, Any]) -> Sample:
        meta = dict(resp.get("meta_info") or {})
        finish = meta.get("finish_reason") or {}
        if isinstance(finish, str):
            finish = {"type": finish}
        lps = meta.get("output_token_logprobs")
        output_ids = resp.get("output_ids")
        if output_ids is None and lps is not None:
            output_ids = [int(item[1]) for item in lps]
        return cls(
            prompt_ids=list(prompt_ids),
            output_ids=[int(t) for t in (output_ids or [])],
            text=str(resp.get("text", "")),
            finish_reason=str(finish.get("type", "unknown")),
            finish=dict(finish),
            logprobs=None if lps is None else [float(item[0]) for item in lps],
            weight_version=meta.get("weight_version"),
            routed_experts=meta.get("routed_experts"),
            meta=meta,
        )


class EngineClient:
    """Talks to one base URL: an engine or the router."""

    def __init__(
        self,
        base_url: str,
        settings: ClientSettings | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
        health_transport: httpx.BaseTransport | None = None,
        rng: random.Random | None = None,
        on_retry: Callable[[], None] | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.settings = s = settings or ClientSettings()
        # runs before each HTTP-level retry: behind a router, the run drops a dead engine
        # there, so the retry reaches a live one instead of waiting out the backoff ladder
        # against a worker that is gone (the hook may raise: no engine is left)
        self._on_retry = on_retry
        self._rng = rng or random.Random()
        self._health = httpx.Client(
            base_url=self.base_url,
            timeout=httpx.Timeout(s.health_timeout_s),
            limits=httpx.Limits(max_connections=4, max_keepalive_connections=2),
            transport=health_transport or transport,
        )
        self._gen = httpx.Client(
            base_url=self.base_url,
            timeout=httpx.Timeout(s.generate_timeout_s, connect=s.connect_timeout_s),
            limits=httpx.Limits(
                max_connections=s.max_connections, max_keepalive_connections=s.max_connections
            ),
            transport=transport,
        )

    # ---- plumbing ------------------------------------------------------------------------

    def close(self) -> None:
        self._health.close()
        self._gen.close()

    def __enter__(self) -> EngineClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def backoff(self, attempt: int) -> float:
        """Delay before retry ``attempt`` (0-based): exponential, capped, with +-50% jitter."""
        base = min(self.settings.max_backoff_s, self.settings.retry_backoff_s * (2**attempt))
        return base * (0.5 + self._rng.random())

    def _request(self, method: str, path: str, *, json: Any = None) -> httpx.Response:
        last: str = ""
        for attempt in range(self.settings.http_retries + 1):
            try:
                resp = self._gen.request(method, path, json=json)
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if resp.status_code < 400:
                    return resp
                if resp.status_code not in RETRY_STATUS:
                    raise EngineRequestError(
                        f"{method} {self.base_url}{path} -> {resp.status_code}: {resp.text[:500]}"
                    )
                last = f"HTTP {resp.status_code}: {resp.text[:200]}"
            if attempt < self.settings.http_retries:
                if self._on_retry is not None:
                    self._on_retry()
                time.sleep(self.backoff(attempt))
        raise EngineFailure(
            f"{method} {self.base_url}{path} failed after "
            f"{self.settings.http_retries + 1} attempts: {last}"
        )

    # ---- health --------------------------------------------------------------------------

    def health(self) -> bool:
        """Cheap liveness on the health pool; never raises."""
        try:
            return self._health.get("/health").status_code == 200
        except httpx.HTTPError:
            return False

    def health_generate(self) -> bool:
        try:
            return self._health.get("/health_generate", timeout=30.0).status_code == 200
        except httpx.HTTPError:
            return False

    def wait_healthy(self, timeout: float, interval: float = 0.5) -> None:
        deadline = time.monotonic() + timeout
        while not self.health():
            if time.monotonic() >= deadline:
                raise EngineFailure(f"{self.base_url} not healthy after {timeout:.0f}s")
            time.sleep(interval)

    # ---- generation ----------------------------------------------------------------------

    def generate_raw(self, payload: Mapping[str, Any]) -> Any:
        """POST /generate with retries; returns the decoded JSON."""
        return self._request("POST", "/generate", json=dict(payload)).json()

    def generate(
        self,
        prompt_ids: Sequence[int],
        sampling: Mapping[str, Any],
        *,
        rid: str | None = None,
        return_logprob: bool = True,
        return_routed_experts: bool = False,
    ) -> Sample:
        payload: dict[str, Any] = {
            "input_ids": list(prompt_ids),
            "sampling_params": dict(sampling),
            "return_logprob": return_logprob,
        }
        if rid is not None:
            payload["rid"] = rid
        if return_routed_experts:
            payload["return_routed_experts"] = True
        return Sample.from_response(prompt_ids, self.generate_raw(payload))

    def generate_group(
        self,
        prompt_ids: Sequence[int],
        n: int,
        sampling: Mapping[str, Any],
        *,
        group_id: str | None = None,
        return_logprob: bool = True,
        return_routed_experts: bool = False,
    ) -> list[Sample]:
        """``n`` samples of one prompt; the whole group is retried if any sample fails.

        Without ``sampling_seed`` the group is one batched ``/generate`` call (one engine,
        shared prefix). With it, sample ``i`` uses ``sampling_seed + i`` on every attempt
        (so a retried group reproduces what the failed one would have made); the router
        only accepts one ``sampling_params`` object and no ``rid`` list per call, so
        seeded samples are sent as ``n`` concurrent single calls (each with its ``rid``).
        """
        if n < 1:
            raise ValueError("n must be >= 1")
        base = dict(sampling)
        base.pop("n", None)
        seed = base.get("sampling_seed")
        gid = group_id or f"g{self._rng.getrandbits(48):012x}"
        errors: list[str] = []
        for attempt in range(self.settings.group_retries + 1):
            rids = [f"{gid}-{i}-a{attempt}" for i in range(n)]
            try:
                if seed is None:
                    samples = self._batched(
                        prompt_ids, n, base, rids, return_logprob, return_routed_experts
                    )
                else:
                    samples = self._seeded(
                        prompt_ids, n, base, int(seed), rids, return_logprob, return_routed_experts
                    )
            except EngineRequestError:
                raise
            except EngineFailure as exc:
                errors.append(str(exc))
            else:
                bad = [s for s in samples if s.finish_reason == "abort"]
                if not bad:
                    return samples
                errors.append(f"{len(bad)}/{n} samples aborted: {bad[0].finish.get('message', '')}")
            if attempt < self.settings.group_retries:
                time.sleep(self.backoff(attempt))
        raise EngineFailure(
            f"group {gid} failed {self.settings.group_retries + 1} times at {self.base_url}; "
            f"last error: {errors[-1] if errors else 'unknown'}"
        )

    def _batched(
        self,
        prompt_ids: Sequence[int],
        n: int,
        sampling: dict[str, Any],
        rids: list[str],
        return_logprob: bool,
        return_routed_experts: bool,
    ) -> list[Sample]:
        payload: dict[str, Any] = {
            "input_ids": [list(prompt_ids)] * n,
            "sampling_params": sampling,
            "return_logprob": return_logprob,
        }
        del rids  # the router accepts neither per-item rids nor per-item sampling_params
        if return_routed_experts:
            payload["return_routed_experts"] = True
        data = self.generate_raw(payload)
        if not isinstance(data, list) or len(data) != n:
            raise EngineFailure(f"malformed group response ({type(data).__name__})")
        return [Sample.from_response(prompt_ids, d) for d in data]

    def _seeded(
        self,
        prompt_ids: Sequence[int],
        n: int,
        sampling: dict[str, Any],
        seed: int,
        rids: list[str],
        return_logprob: bool,
        return_routed_experts: bool,
    ) -> list[Sample]:
        def one(i: int) -> Sample:
            return self.generate(
                prompt_ids,
                {**sampling, "sampling_seed": seed + i},
                rid=rids[i],
                return_logprob=return_logprob,
                return_routed_experts=return_routed_experts,
            )

        if n == 1:
            return [one(0)]
        with ThreadPoolExecutor(max_workers=n) as pool:
            return list(pool.map(one, range(n)))

    def generate_groups(
        self,
        prompts: Sequence[Sequence[int]],
        n: int,
        sampling: Mapping[str, Any],
        *,
        max_concurrency: int = 64,
        **kwargs: Any,
    ) -> list[list[Sample]]:
        """``generate_group`` for many prompts concurrently (results in prompt order)."""
        with ThreadPoolExecutor(max_workers=max(1, min(max_concurrency, len(prompts)))) as pool:
            futures = [pool.submit(self.generate_group, p, n, sampling, **kwargs) for p in prompts]
            return [f.result() for f in futures]

    # ---- control ---------------------------------------------------------------------------

    def get_model_info(self) -> dict[str, Any]:
        return dict(self._request("GET", "/get_model_info").json())

    def get_server_info(self) -> dict[str, Any]:
        return dict(self._request("GET", "/get_server_info").json())

    def get_weight_checksum(self) -> str:
        return str(self._request("GET", "/get_weight_checksum").json()["checksum"])

    def update_weights_from_disk(
        self,
        model_path: str,
        *,
        weight_version: str | None = None,
        abort_all_requests: bool = False,
        load_format: str | None = None,
    ) -> dict[str, Any]:
        """Reload weights; raises ``EngineFailure`` when the engine reports failure."""
        body: dict[str, Any] = {"model_path": model_path, "abort_all_requests": abort_all_requests}
        if weight_version is not None:
            body["weight_version"] = weight_version
        if load_format is not None:
            body["load_format"] = load_format
        try:
            result = dict(self._request("POST", "/update_weights_from_disk", json=body).json())
        except EngineRequestError as exc:
            raise EngineFailure(f"weight update to {model_path} failed: {exc}") from exc
        if not result.get("success"):
            raise EngineFailure(f"weight update failed: {result.get('message')}")
        return result

    def flush_cache(self, retries: int = 60, interval: float = 1.0) -> None:
        """POST /flush_cache, retrying while requests are in flight (SGLang answers 400)."""
        for _ in range(retries):
            resp = self._gen.post("/flush_cache")
            if resp.status_code == 200:
                return
            time.sleep(interval)
        raise EngineFailure(f"{self.base_url} did not flush its cache")

    def abort(self, rid: str | None = None, *, abort_all: bool = False) -> None:
        body: dict[str, Any] = {"abort_all": abort_all}
        if rid is not None:
            body["rid"] = rid
        self._request("POST", "/abort_request", json=body)
