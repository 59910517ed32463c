"""The managed teacher of on-policy distillation (``training.algorithm = "opd"``).

Its node starts it from the compiled command line (``commands.teacher_argv``: the embedded
engine, or SGLang on the planned GPUs) on a port free now, like the rollout engines, and
waits until it answers ``/health``. After each collection `TeacherScorer` asks it for the
log-probability of every token the student sampled: one ``/generate`` per sample with the
whole sequence as ``input_ids``, ``max_new_tokens = 0``, ``return_logprob`` and
``logprob_start_len`` at the first response token (SGLang's native API; the embedded
engine answers the same request). The teacher is never published to: it stays frozen.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from runtime.node.launch_argv import substitute, substitute_env

if TYPE_CHECKING:
    from runtime.config import TeacherConfig
    from runtime.engines.client import ClientSettings
    from runtime.node.protocol import Node
    from runtime.rollout.types import Sample


class TeacherError(RuntimeError):
    """The teacher's answer cannot be used (wrong length, missing log-probs)."""


def teacher_command(teacher: TeacherConfig, port: int, host: str = "127.0.0.1") -> list[str]:
    """The compiled argv with this interpreter and the host/port this node gave it."""
    return substitute(teacher.argv, values={"--host": host, "--port": str(port)})


def teacher_env(teacher: TeacherConfig) -> dict[str, str]:
    """The compiled environment (the teacher sees only its planned GPUs)."""
    return substitute_env(dict(teacher.env))


def start_teacher(runner: Node) -> str | None:
    """Start this node's teacher (if the plan put one here), wait for ``/health``, register
    it; returns its URL (None when the run has no teacher on this node)."""
    from runtime.engines.process import free_port

    cfg = runner.cfg
    teacher = cfg.teacher
    if teacher is None or teacher.node != runner.ident.rank:
        return None
    port = free_port("127.0.0.1")
    server = ("teacher", teacher_command(teacher, port), teacher_env(teacher), port)
    (url,) = runner.sup.start_servers(
        [server], cfg.runtime.health_timeout_s, cfg.runtime.startup_timeout_s
    )
    return url


def scoring_payload(prompt_ids: Sequence[int], response_ids: Sequence[int]) -> dict[str, Any]:
    """The ``/generate`` body that returns the teacher's log-prob of every response token."""
    return {
        "input_ids": [*map(int, prompt_ids), *map(int, response_ids)],
        "sampling_params": {"max_new_tokens": 0, "temperature": 1.0},
        "return_logprob": True,
        "logprob_start_len": len(prompt_ids),
    }


def response_logprobs(answer: Any, response_ids: Sequence[int]) -> list[float]:
    """The teacher's log-probs of ``response_ids`` from a scoring answer (SGLang's
    ``meta_info.input_token_logprobs``: ``[logprob, token_id, text]`` per input token from
    ``logprob_start_len``)."""
    if isinstance(answer, list):
        answer = answer[0] if len(answer) == 1 else None
    meta = (answer or {}).get("meta_info") if isinstance(answer, dict) else None
    entries = (meta or {}).get("input_token_logprobs")
    if not isinstance(entries, list):
        raise TeacherError("the teacher's answer has no meta_info.input_token_logprobs")
    n = len(response_ids)
    if len(entries) < n:
        raise TeacherError(f"the teacher returned {len(entries)} log-probs for {n} tokens")
    tail = entries[len(entries) - n :] if n else []
    out = []
    for (lp, tok, *_), want in zip(tail, response_ids, strict=True):
        if tok is not None and int(tok) != int(want):
            raise TeacherError(f"the teacher scored token {tok} where the sample has {want}")
        out.append(float("nan") if lp is None else float(lp))
    return out


class TeacherScorer:
    """Fetches the teacher's per-token log-probs of the student's samples (sets
    ``Sample.teacher_logprobs``) and measures the student-teacher KL of the collection."""

    def __init__(self, url: str, settings: ClientSettings, concurrency: int = 16) -> None:
        from runtime.engines.client import EngineClient

        self.url = url
        self.client = EngineClient(url, settings)
        self.concurrency = max(1, int(concurrency))

    def _one(self, sample: Sample) -> list[float]:
        if not sample.response_ids:
            return []
        answer = self.client.generate_raw(scoring_payload(sample.prompt_ids, sample.response_ids))
        return response_logprobs(answer, sample.response_ids)

    def score(self, samples: Sequence[Sample]) -> dict[str, float]:
        """Score ``samples`` in place; returns the collection's ``opd/*`` metrics: the mean
        per-token reverse KL estimate ``log p_student - log p_teacher`` of the sampled tokens
        (student log-probs as the engines sampled them) and the teacher's mean log-prob."""
        if not samples:
            return {}
        with ThreadPoolExecutor(self.concurrency, thread_name_prefix="teacher") as pool:
            scored = list(pool.map(self._one, samples))
        kl = teacher_lp = 0.0
        tokens = 0
        for s, lps in zip(samples, scored, strict=True):
            s.teacher_logprobs = lps
            for student, teacher in zip(s.logprobs, lps, strict=True):
                if math.isnan(teacher) or student is None:
                    continue
                kl += float(student) - teacher
                teacher_lp += teacher
                tokens += 1
        denom = max(tokens, 1)
        return {
            "opd/kl": kl / denom,
            "opd/teacher_logprob": teacher_lp / denom,
            "opd/scored_tokens": float(tokens),
        }

    def close(self) -> None:
        self.client.close()
