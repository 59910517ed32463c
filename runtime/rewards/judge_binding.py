"""The verifiers of one run: registry verifiers, and the spec's judge bindings over them.

``[judging.bindings.VERIFIER]`` makes prompts whose verifier is VERIFIER (a task's, or
a prepared prompt's) be scored by the bound judge with the bound rubric profile; the
compiled settings arrive as `runtime.config.JudgeBinding`. A judge sees the prompt text,
so `attach_prompt_text` copies it into the metadata of prompts scored by a judge.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from pydantic import BaseModel

from contract.spec.rewards import RewardsSection
from contract.tasks import verifier_settings
from runtime.executor.settings import ExecutorSettings
from runtime.rewards.base import Verifier, get_verifier


class BindingLike(Protocol):
    def verifier_settings(self, failure_policy: str) -> dict[str, Any]: ...


class RunVerifiers:
    """``verifiers(name)`` -> the verifier for ``name``, created once; ``close()`` them all.

    A built-in verifier gets its typed ``[rewards.*]`` settings, chosen by name
    (`contract.tasks.verifier_settings`); ``overrides`` (an evaluation task's ``scoring``
    table) are laid over them. ``executor``: the run's code executor settings
    (`RunConfig.executor`), given to the ``code`` verifier as they are."""

    def __init__(
        self,
        rewards: RewardsSection,
        bindings: Mapping[str, BindingLike],
        failure_policy: str = "zero",
        executor: ExecutorSettings | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> None:
        self.rewards = rewards
        self.bindings = dict(bindings)
        self.failure_policy = failure_policy
        self.executor = executor
        self.overrides = dict(overrides or {})
        self._made: dict[str, Verifier] = {}
        self._lock = threading.Lock()

    def __call__(self, name: str) -> Verifier:
        with self._lock:
            if name not in self._made:
                self._made[name] = self._make(name)
            return self._made[name]

    def _make(self, name: str) -> Verifier:
        binding = self.bindings.get(name)
        if binding is not None:
            # the judge applies the policy itself; "fail" must still reach the loop
            return get_verifier("judge", binding.verifier_settings(self.failure_policy))
        typed = verifier_settings(self.rewards, name)
        settings: BaseModel | dict[str, Any] | None = typed
        if self.overrides:
            settings = {**({} if typed is None else typed.model_dump()), **self.overrides}
        if name == "code" and self.executor is not None:
            from runtime.rewards.code import CodeVerifier

            return CodeVerifier(settings, settings=self.executor)  # type: ignore[arg-type]
        return get_verifier(name, settings)

    def close(self) -> None:
        with self._lock:
            for v in self._made.values():
                v.close()
            self._made.clear()


def attach_prompt_text(prompts: Iterable[Any], judged: Iterable[str]) -> None:
    """Give judged prompts their text as ``metadata["prompt"]`` (the rubric's ``{prompt}``)."""
    names = set(judged)
    if not names:
        return
    for p in prompts:
        if p.verifier in names and "prompt" not in p.metadata:
            p.metadata["prompt"] = p.text
