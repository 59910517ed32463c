"""Model-judged rewards: named rubric profiles over an OpenAI-compatible chat endpoint.

A rubric is a system prompt with the criteria, a user template (``{prompt}``,
``{response}``, ``{reference}`` are filled in), a score range and a parse pattern whose
first group is the score (the last match wins; a JSON object with a ``score`` key is the
fallback). Scores are normalised to [0, 1].

Settings (``[rewards.judge]``): ``url`` (base URL of the judge, with or without ``/v1``),
``model``, ``rubric`` (default rubric name; an item's ``metadata["rubric"]`` overrides it),
``rubrics`` (extra or replaced profiles: ``{name: {system, template, min_score, max_score,
pattern}}``), ``concurrency`` (4), ``timeout_s`` (60), ``retries`` (2; timeouts, connection
errors, 429 and 5xx are retried), ``backoff_s`` (0.5), ``temperature`` (0.0),
``max_tokens`` (256), ``api_key_env`` (name of an environment variable holding a bearer
token), ``failure_policy`` (``zero`` | ``fail``).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx

from runtime.rewards.base import (
    RewardResult,
    ScoreItem,
    Verifier,
    VerifierFailure,
    apply_failure_policy,
    register,
)

DEFAULT_PATTERN = r"SCORE\s*[:=]\s*\**\s*(-?\d+(?:\.\d+)?)"
_JSON_RE = re.compile(r"\{[^{}]*\}")


@dataclass(frozen=True)
class Rubric:
    """One judging profile."""

    name: str
    system: str
    template: str
    min_score: float = 1.0
    max_score: float = 10.0
    pattern: str = DEFAULT_PATTERN
    description: str = ""
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.max_score > self.min_score:
            raise ValueError(f"rubric {self.name!r}: max_score must exceed min_score")
        regex = re.compile(self.pattern, re.IGNORECASE)
        if regex.groups < 1:
            raise ValueError(f"rubric {self.name!r}: pattern needs a group for the score")
        object.__setattr__(self, "_regex", regex)

    def messages(self, prompt: str, response: str, reference: str) -> list[dict[str, str]]:
        user = (
            self.template.replace("{prompt}", prompt)
            .replace("{response}", response)
            .replace("{reference}", reference)
        )
        return [{"role": "system", "content": self.system}, {"role": "user", "content": user}]

    def parse(self, text: str) -> float | None:
        """The normalised score in [0, 1], or None when the output holds no valid score."""
        raw: float | None = None
        found = self._regex.findall(text)
        if found:
            last = found[-1]
            raw = _to_float(last[0] if isinstance(last, tuple) else last)
        if raw is None:
            for blob in reversed(_JSON_RE.findall(text)):
                try:
                    obj = json.loads(blob)
                except ValueError:
                    continue
                if isinstance(obj, dict) and "score" in obj:
                    raw = _to_float(obj["score"])
                    break
        if raw is None or not self.min_score <= raw <= self.max_score:
            return None
        return (raw - self.min_score) / (self.max_score - self.min_score)


def _to_float(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if out == out else None  # NaN is not a score


_FORMAT = "End your answer with a final line of the form `SCORE: <number>`."

RUBRICS: dict[str, Rubric] = {
    r.name: r
    for r in (
        Rubric(
            name="helpfulness",
            description="overall helpfulness, 1-10",
            system=(
                "You are a strict grader. Rate how helpful, correct and clear the assistant's "
                "response is for the user's request, from 1 (useless or wrong) to 10 "
                f"(excellent). Briefly justify. {_FORMAT}"
            ),
            template="[Request]\n{prompt}\n\n[Response]\n{response}",
        ),
        Rubric(
            name="correctness",
            description="agreement with a reference answer, 0-10",
            system=(
                "You compare a response with a reference answer. Score 10 when the final "
                "answer is equivalent to the reference, 0 when it contradicts it or is "
                f"missing, in between for partially correct answers. {_FORMAT}"
            ),
            template=(
                "[Question]\n{prompt}\n\n[Reference answer]\n{reference}\n\n[Response]\n{response}"
            ),
            min_score=0.0,
            max_score=10.0,
        ),
        Rubric(
            name="instruction_following",
            description="adherence to every instruction in the prompt, 1-10",
            system=(
                "Check whether the response follows every explicit instruction in the "
                "prompt (format, length, content constraints). 10 means all are followed, "
                f"1 means none. {_FORMAT}"
            ),
            template="[Instructions]\n{prompt}\n\n[Response]\n{response}",
        ),
        Rubric(
            name="binary",
            description="acceptable (1) or not (0)",
            system=(
                "Decide whether the response is an acceptable answer to the request. "
                "Answer with a final line `SCORE: 1` for acceptable or `SCORE: 0` otherwise."
            ),
            template="[Request]\n{prompt}\n\n[Reference, may be empty]\n{reference}\n\n"
            "[Response]\n{response}",
            min_score=0.0,
            max_score=1.0,
        ),
        # The spec's [rubrics.NAME] profiles (compiler/spec/judges.py), by their names.
        Rubric(
            name="open-instruct/general-quality",
            description="general response quality without a reference, 1-10",
            system=(
                "You are an impartial grader of assistant responses. Judge the response on "
                "correctness, helpfulness, completeness, clarity and safety for the user's "
                "request. Do not reward length for its own sake. Give a score from 1 (very "
                f"poor) to 10 (excellent) after a short justification. {_FORMAT}"
            ),
            template="[User request]\n{prompt}\n\n[Assistant response]\n{response}",
        ),
        Rubric(
            name="open-instruct/general-quality_ref",
            description="general response quality against a reference answer, 1-10",
            system=(
                "You are an impartial grader of assistant responses. A reference response is "
                "given: use it to judge correctness and completeness, but do not require the "
                "same wording. Give a score from 1 (wrong or unhelpful) to 10 (as good as or "
                f"better than the reference) after a short justification. {_FORMAT}"
            ),
            template=(
                "[User request]\n{prompt}\n\n[Reference response]\n{reference}\n\n"
                "[Assistant response]\n{response}"
            ),
        ),
        Rubric(
            name="open-instruct/general-web_instruct_general_verifier",
            description="final answer matches the reference answer (1) or not (0)",
            system=(
                "You verify answers. Compare the final answer in the response with the "
                "reference answer; ignore the reasoning and formatting differences that do not "
                "change the answer. Answer with a final line `SCORE: 1` when they agree and "
                "`SCORE: 0` otherwise."
            ),
            template=(
                "[Question]\n{prompt}\n\n[Reference answer]\n{reference}\n\n[Response]\n{response}"
            ),
            min_score=0.0,
            max_score=1.0,
        ),
    )
}


def rubric_from_config(name: str, raw: Mapping[str, Any], base: Rubric | None = None) -> Rubric:
    """A rubric from ``[rubrics.NAME]``-style settings, layered over ``base`` if given."""
    known = {"system", "template", "min_score", "max_score", "pattern", "description"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"rubric {name!r}: unknown keys {', '.join(unknown)}")
    if base is None and not {"system", "template"} <= set(raw):
        raise ValueError(f"rubric {name!r} needs 'system' and 'template'")
    values: dict[str, Any] = {}
    if base is not None:
        values = {k: getattr(base, k) for k in known}
    values.update(raw)
    for key in ("min_score", "max_score"):
        if key in values:
            values[key] = float(values[key])
    return Rubric(name=name, **values)


def judge_url(base: str) -> str:
    """The chat-completions URL for a base URL given with or without ``/v1``."""
    base = base.rstrip("/")
    if base.endswith("/chat/completions"):
        return base
    if not base.endswith("/v1"):
        base += "/v1"
    return base + "/chat/completions"


@register("judge")
class JudgeVerifier(Verifier):
    """Asks a judge model to grade a response with a rubric."""

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__(config)
        cfg = self.config
        url = cfg.get("url") or cfg.get("base_url")
        if not url:
            raise ValueError("rewards.judge.url is required (an OpenAI-compatible endpoint)")
        self.url = judge_url(str(url))
        self.model = str(cfg.get("model", "judge"))
        self.rubrics = dict(RUBRICS)
        for name, raw in (cfg.get("rubrics") or {}).items():
            self.rubrics[name] = rubric_from_config(name, raw, self.rubrics.get(name))
        self.default_rubric = str(cfg.get("rubric", "helpfulness"))
        if self.default_rubric not in self.rubrics:
            raise ValueError(
                f"unknown rubric {self.default_rubric!r}; known: {', '.join(sorted(self.rubrics))}"
            )
        self.concurrency = max(1, int(cfg.get("concurrency", 4)))
        self.timeout_s = float(cfg.get("timeout_s", 60.0))
        self.retries = max(0, int(cfg.get("retries", 2)))
        self.backoff_s = float(cfg.get("backoff_s", 0.5))
        self.temperature = float(cfg.get("temperature", 0.0))
        self.max_tokens = int(cfg.get("max_tokens", 256))
        # managed judges' chat_template: "qwen3-no-thinking" turns Qwen3's thinking off
        self.chat_template = cfg.get("chat_template")
        self.failure_policy = str(cfg.get("failure_policy", "zero"))
        headers = {}
        key_env = cfg.get("api_key_env")
        if key_env and os.environ.get(str(key_env)):
            headers["Authorization"] = f"Bearer {os.environ[str(key_env)]}"
        self._client = httpx.Client(
            headers=headers,
            limits=httpx.Limits(max_connections=self.concurrency),
            trust_env=False,
        )

    def rubric_for(self, metadata: Mapping[str, Any]) -> Rubric:
        name = str(metadata.get("rubric") or self.default_rubric)
        if name not in self.rubrics:
            raise ValueError(f"unknown rubric {name!r}")
        return self.rubrics[name]

    def score(self, response: str, target: Any, metadata: Mapping[str, Any]) -> RewardResult:
        meta = metadata or {}
        try:
            rubric = self.rubric_for(meta)
        except ValueError as exc:
            return self._policy(RewardResult(0.0, ok=False, failure=str(exc)))
        reference = target.get("reference", "") if isinstance(target, Mapping) else target
        messages = rubric.messages(
            str(meta.get("prompt", "")), response, "" if reference is None else str(reference)
        )
        text, failure = self._complete(messages)
        if text is None:
            return self._policy(RewardResult(0.0, ok=False, failure=failure))
        value = rubric.parse(text)
        detail = {"rubric": rubric.name, "judge_output": text[-2000:]}
        if value is None:
            failure = f"unparsable judge output for rubric {rubric.name!r}"
            return self._policy(RewardResult(0.0, ok=False, failure=failure, detail=detail))
        return RewardResult(value, detail=detail)

    def score_batch(self, items: Sequence[ScoreItem]) -> list[RewardResult]:
        if not items:
            return []
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(items))) as pool:
            return list(pool.map(self._safe, items))

    def _safe(self, item: ScoreItem) -> RewardResult:
        # Like safe_score, but a VerifierFailure from policy "fail" must propagate.
        try:
            return self.score(item.response, item.target, item.metadata)
        except VerifierFailure:
            raise
        except Exception as exc:
            return self._policy(RewardResult(0.0, ok=False, failure=f"{type(exc).__name__}: {exc}"))

    def _policy(self, result: RewardResult) -> RewardResult:
        return apply_failure_policy(result, self.failure_policy, self.name)

    def _complete(self, messages: list[dict[str, str]]) -> tuple[str | None, str]:
        body = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        if self.chat_template == "qwen3-no-thinking":
            body["chat_template_kwargs"] = {"enable_thinking": False}
        last = "no attempt"
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                resp = self._client.post(self.url, json=body, timeout=self.timeout_s)
            except httpx.TimeoutException:
                last = f"judge timeout after {self.timeout_s}s"
                continue
            except httpx.TransportError as exc:
                last = f"judge unreachable: {type(exc).__name__}: {exc}"
                continue
            if resp.status_code == 429 or resp.status_code >= 500:
                last = f"judge HTTP {resp.status_code}"
                continue
            if resp.status_code != 200:
                return None, f"judge HTTP {resp.status_code}: {resp.text[:200]}"
            try:
                content = resp.json()["choices"][0]["message"]["content"]
            except (ValueError, KeyError, IndexError, TypeError):
                return None, "judge answered without choices[0].message.content"
            return str(content or ""), ""
        return None, f"{last} (after {self.retries + 1} attempts)"

    def close(self) -> None:
        self._client.close()
