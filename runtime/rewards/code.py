"""Code-execution rewards: run the response's code against tests in the executor service.

Spec settings (``[rewards.code]``, as compiled into the manifest) are one
`runtime.executor.settings.ExecutorSettings` (built once by `runtime.config.RunConfig.executor`
and handed over by `RunVerifiers`, or built here from the settings mapping): ``endpoint``
(an external executor's URL; unset: start the in-package executor as a local subprocess on
first use), the per-run limits ``time_limit_s``, ``memory_limit_mb``, ``max_processes``,
``network``, ``allow_unsandboxed`` and ``concurrency`` (requests in flight).

Further settings for programmatic use: ``executor_url`` (same as ``endpoint``), ``workers``,
``isolation`` and ``site`` (the local executor's; see `ExecutorSettings`), ``timeout_s``
(per request, 120), ``retries`` (2, on connection errors and 5xx), ``backoff_s`` (0.5),
``scoring`` (``all_or_nothing`` | ``fraction``), ``failure_policy`` (``zero`` | ``fail``).

Targets: ``{"mode": "function", "test": <HumanEval test code>, "entry_point": name}`` or
``{"mode": "stdio", "tests": [{"input": .., "output": ..}]}``; HumanEval's own record keys
(``test``, ``entry_point``, ``prompt``) work as target or metadata. A wrong program is
``ok=True, score=0``; only an unreachable or failing executor gives ``ok=False``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from contract.spec.rewards import CodeReward
from runtime.executor.client import ExecutorEndpoint, run_request
from runtime.executor.settings import ExecutorSettings
from runtime.rewards.base import (
    RewardResult,
    ScoreItem,
    Verifier,
    VerifierFailure,
    apply_failure_policy,
    register,
)

_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_PY_LANGS = {"python", "python3", "py", "py3"}
SCORINGS = ("all_or_nothing", "fraction")


def _defines(code: str, name: str) -> bool:
    return re.search(rf"^\s*def\s+{re.escape(name)}\s*\(", code, re.MULTILINE) is not None


def _is_python(text: str) -> bool:
    try:
        compile(text, "<prompt>", "exec")
    except (SyntaxError, ValueError):
        return False
    return True


def extract_code(response: str, prompt: str | None = None, entry_point: str | None = None) -> str:
    """The program to run for ``response``.

    Fenced blocks win (python-tagged first; the last one that defines ``entry_point``, else
    the last one). Without fences the response is the raw completion of the prompt
    (HumanEval style) and is appended to it. A block or completion that restates the whole
    function is placed after the prompt when the prompt is itself valid Python, so the
    prompt's imports and helper functions stay defined and the restated function wins.
    """
    blocks = [(lang.lower(), body) for lang, body in _FENCE_RE.findall(response)]
    if blocks:
        python_blocks = [b for lang, b in blocks if lang in _PY_LANGS] or [b for _, b in blocks]
        code = python_blocks[-1]
        if entry_point:
            defining = [b for b in python_blocks if _defines(b, entry_point)]
            code = defining[-1] if defining else code
    elif prompt and not (entry_point and _defines(response, entry_point)):
        return prompt + response
    else:
        code = response
    if prompt and entry_point and not _defines(code, entry_point):
        return prompt + code
    if prompt and _is_python(prompt):
        return prompt.rstrip("\n") + "\n\n\n" + code
    return code


def build_payload(
    response: str,
    target: Any,
    metadata: Mapping[str, Any],
    limits: Mapping[str, Any] | None,
    network: bool = False,
) -> dict[str, Any]:
    """The executor request for one item; raises ValueError for a malformed target."""
    meta = dict(metadata or {})
    tgt: dict[str, Any] = dict(target) if isinstance(target, Mapping) else {}
    if isinstance(target, list):
        tgt = {"mode": "stdio", "tests": target}
    elif isinstance(target, str):
        tgt = {"mode": "function", "test": target}
    mode = tgt.get("mode") or meta.get("mode") or ("stdio" if "tests" in tgt else "function")
    prompt = tgt.get("prompt", meta.get("prompt"))
    entry = tgt.get("entry_point", meta.get("entry_point"))
    payload: dict[str, Any] = {"language": "python", "mode": mode}
    if limits:
        payload["limits"] = dict(limits)
    if network:
        payload["network"] = True
    if mode == "function":
        test = tgt.get("test", tgt.get("tests", meta.get("test")))
        if not isinstance(test, str) or not isinstance(entry, str):
            raise ValueError("function-mode target needs 'test' code and an 'entry_point'")
        payload.update(code=extract_code(response, prompt, entry), tests=test, entry_point=entry)
        if isinstance(prompt, str) and _is_python(prompt):
            # The judge runs the tests with the (trusted) prompt's definitions in scope:
            # HumanEval's tests call helpers such as ``poly`` that only the prompt defines.
            payload["context"] = prompt
    elif mode == "stdio":
        tests = tgt.get("tests", meta.get("tests"))
        if not isinstance(tests, list) or not tests:
            raise ValueError("stdio target needs a non-empty 'tests' list of {input, output}")
        payload.update(code=extract_code(response, prompt, None), tests=tests)
    else:
        raise ValueError(f"unknown code target mode {mode!r}")
    return payload


def humaneval_target(record: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(target, metadata) for one HumanEval record (prompt, test, entry_point, task_id)."""
    target = {"mode": "function", "test": record["test"], "entry_point": record["entry_point"]}
    meta = {"prompt": record["prompt"], "task_id": record.get("task_id")}
    return target, meta


@register("code")
class CodeVerifier(Verifier):
    """Scores code by running it in the sandboxed executor service."""

    settings_type = CodeReward

    def __init__(
        self,
        config: Mapping[str, Any] | CodeReward | None = None,
        settings: ExecutorSettings | None = None,
    ) -> None:
        super().__init__(config)
        cfg = self.config
        self.scoring = str(cfg.get("scoring", "all_or_nothing"))
        if self.scoring not in SCORINGS:
            raise ValueError(f"rewards.code.scoring must be one of {SCORINGS}")
        if settings is None and isinstance(config, CodeReward):
            settings = ExecutorSettings.from_contract(config)
        self.settings = settings or ExecutorSettings.from_config(cfg)
        self.concurrency = self.settings.concurrency
        self.timeout_s = float(cfg.get("timeout_s", 120.0))
        self.retries = max(0, int(cfg.get("retries", 2)))
        self.backoff_s = float(cfg.get("backoff_s", 0.5))
        self.limits = self.settings.limits()
        self.network = self.settings.network
        self.failure_policy = str(cfg.get("failure_policy", "zero"))
        self._executor = ExecutorEndpoint(self.settings)
        self._client = httpx.Client(
            limits=httpx.Limits(max_connections=self.concurrency), trust_env=False
        )

    @property
    def url(self) -> str:
        """The executor URL, starting a local executor the first time if none is set."""
        return self._executor.url

    def score(self, response: str, target: Any, metadata: Mapping[str, Any]) -> RewardResult:
        try:
            payload = build_payload(response, target, metadata, self.limits, self.network)
        except ValueError as exc:
            return self._policy(RewardResult(0.0, ok=False, failure=f"bad target: {exc}"))
        return self._policy(self._run(payload))

    def score_batch(self, items: Sequence[ScoreItem]) -> list[RewardResult]:
        if not items:
            return []
        _ = self.url  # start a local executor once, not in every thread
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(items))) as pool:
            return list(pool.map(self._safe, items))

    def _safe(self, item: ScoreItem) -> RewardResult:
        # Like safe_score, but a VerifierFailure from policy "fail" must propagate.
        try:
            return self.score(item.response, item.target, item.metadata)
        except VerifierFailure:
            raise
        except Exception as exc:
            failure = f"{type(exc).__name__}: {exc}"
            return self._policy(RewardResult(0.0, ok=False, failure=failure))

    def _policy(self, result: RewardResult) -> RewardResult:
        return apply_failure_policy(result, self.failure_policy, self.name)

    def _request_timeout(self, payload: Mapping[str, Any]) -> float:
        """At least ``timeout_s``, and enough for every test to use its whole time limit
        one after another (the executor may have a single free slot)."""
        tests = payload.get("tests")
        count = len(tests) if isinstance(tests, list) else 1
        wall = float((payload.get("limits") or self.limits)["wall_s"])
        return max(self.timeout_s, count * (wall + 5.0) + 30.0)

    def _run(self, payload: dict[str, Any]) -> RewardResult:
        last = "no attempt"
        timeout_s = self._request_timeout(payload)
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                data = run_request(self._client, self.url, payload, timeout_s)
            except ValueError as exc:
                return RewardResult(0.0, ok=False, failure=f"executor rejected request: {exc}")
            except httpx.TimeoutException:
                last = f"executor timeout after {timeout_s}s"
                continue
            except httpx.HTTPStatusError as exc:
                last = f"executor HTTP {exc.response.status_code}"
                if exc.response.status_code < 500:
                    break
                continue
            except httpx.TransportError as exc:
                last = f"executor unreachable: {type(exc).__name__}: {exc}"
                continue
            return self._result(data)
        return RewardResult(0.0, ok=False, failure=last)

    def _result(self, data: Mapping[str, Any]) -> RewardResult:
        results = data.get("results") or []
        total = len(results)
        passed = sum(1 for r in results if r.get("passed"))
        statuses = [r.get("status") for r in results]
        detail = {
            "passed": passed,
            "total": total,
            "statuses": statuses,
            "status": data.get("status"),
            "details": [r.get("detail", "") for r in results if not r.get("passed")][:4],
        }
        infra = [r for r in results if str(r.get("detail", "")).startswith("sandbox start failed")]
        if infra or total == 0:
            why = infra[0]["detail"] if infra else "executor returned no results"
            return RewardResult(0.0, ok=False, failure=why, detail=detail)
        if self.scoring == "fraction":
            score = passed / total
        else:
            score = 1.0 if passed == total else 0.0
        return RewardResult(score, detail=detail)

    def close(self) -> None:
        self._client.close()
        self._executor.close()
