"""The verifier interface every reward function implements.

Verifiers are looked up by name (the `verifier` field of a prompt record) in a registry so
that the data layer, the rollout orchestration and the executor/judge services agree on
one contract: a verifier turns (response, target, metadata) into a `RewardResult`. A
verifier never raises for a bad response; it reports ``ok=False`` with a failure reason,
and `apply_failure_policy` decides whether that becomes a zero reward or a hard error.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import BaseModel

FailurePolicy = Literal["zero", "fail"]
FAILURE_POLICIES: tuple[str, ...] = ("zero", "fail")


@dataclass(frozen=True)
class RewardResult:
    """One scored response.

    ``ok`` is False when the verifier itself could not decide (timeout, executor down,
    judge unreachable, malformed target); a wrong answer is ``ok=True, score=0.0``.
    """

    score: float
    ok: bool = True
    failure: str | None = None
    detail: dict[str, Any] | None = None


@dataclass(frozen=True)
class ScoreItem:
    """One unit of work for `Verifier.score_batch`."""

    response: str
    target: Any
    metadata: Mapping[str, Any] = field(default_factory=dict)


class VerifierFailure(RuntimeError):
    """Raised by `apply_failure_policy` under policy ``fail`` for a result with ok=False."""

    def __init__(self, verifier: str, failure: str | None) -> None:
        super().__init__(f"verifier {verifier!r} failed: {failure or 'unknown failure'}")
        self.verifier = verifier
        self.failure = failure


class UnknownVerifier(KeyError):
    """Raised by `get_verifier` for a name that is not registered."""


class Verifier(abc.ABC):
    """Base class of all verifiers.

    Subclasses set ``name`` (by `register`) and implement `score`. A verifier with
    ``[rewards.*]`` settings names their contract type in ``settings_type``
    (`contract.tasks.VERIFIER_SETTINGS` says which table, by verifier name) and reads them,
    typed and with the spec's defaults, from ``self.settings_model``; the run hands that
    model in directly. A mapping (a prepared data set's verifier registry, a test, a
    benchmark) is validated into it; its other keys are the verifier's own knobs, in
    ``self.config``. Verifiers that can run items concurrently (code executor, judges)
    override `score_batch`.
    """

    name: str = ""
    settings_type: ClassVar[type[BaseModel] | None] = None

    def __init__(self, config: Mapping[str, Any] | BaseModel | None = None) -> None:
        if isinstance(config, BaseModel):
            if self.settings_type is None or not isinstance(config, self.settings_type):
                raise TypeError(f"verifier {self.name!r} does not take {type(config).__name__}")
            self.settings_model: BaseModel | None = config
            self.config: Mapping[str, Any] = {}
            return
        self.config = dict(config or {})
        self.settings_model = None
        if self.settings_type is not None:
            known = self.settings_type.model_fields
            self.settings_model = self.settings_type.model_validate(
                {k: v for k, v in self.config.items() if k in known}
            )

    @abc.abstractmethod
    def score(self, response: str, target: Any, metadata: Mapping[str, Any]) -> RewardResult:
        """Score one response against its target."""

    def score_batch(self, items: Sequence[ScoreItem]) -> list[RewardResult]:
        """Score many items; the default loops and turns exceptions into failures."""
        out: list[RewardResult] = []
        for item in items:
            out.append(self.safe_score(item.response, item.target, item.metadata))
        return out

    def safe_score(self, response: str, target: Any, metadata: Mapping[str, Any]) -> RewardResult:
        """`score`, but an unexpected exception becomes ``ok=False`` instead of propagating."""
        try:
            return self.score(response, target, metadata)
        except Exception as exc:  # a verifier bug must not kill a rollout
            return RewardResult(0.0, ok=False, failure=f"{type(exc).__name__}: {exc}")

    def close(self) -> None:  # noqa: B027 - optional hook, not abstract
        """Release workers, pools or connections (no-op by default)."""


_REGISTRY: dict[str, type[Verifier]] = {}

# Modules that register the built-in verifiers, imported lazily on first lookup so that
# importing this interface stays cheap (and so F's code/judge modules are optional).
_BUILTIN_MODULES: tuple[str, ...] = (
    "runtime.rewards.arithmetic",
    "runtime.rewards.gsm8k",
    "runtime.rewards.math_answer",
    "runtime.rewards.ifeval",
    "runtime.rewards.code",
    "runtime.rewards.judge",
)
_loaded_builtins = False


def register(name: str) -> Callable[[type[Verifier]], type[Verifier]]:
    """Class decorator: register a `Verifier` subclass under ``name``."""

    def deco(cls: type[Verifier]) -> type[Verifier]:
        existing = _REGISTRY.get(name)
        same = existing is not None and (existing.__module__, existing.__qualname__) == (
            cls.__module__,
            cls.__qualname__,
        )
        if existing is not None and existing is not cls and not same:
            raise ValueError(f"verifier {name!r} is already registered by {existing!r}")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def _load_builtins() -> None:
    global _loaded_builtins
    if _loaded_builtins:
        return
    import importlib

    for mod in _BUILTIN_MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            # Only tolerate the verifier module itself missing, not its broken imports.
            if exc.name != mod:
                raise
    _loaded_builtins = True


def available_verifiers() -> list[str]:
    """Names of all registered verifiers, sorted."""
    _load_builtins()
    return sorted(_REGISTRY)


def verifier_class(name: str) -> type[Verifier]:
    """The registered class for ``name`` (raises `UnknownVerifier`)."""
    _load_builtins()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownVerifier(
            f"unknown verifier {name!r}; available: {', '.join(sorted(_REGISTRY))}"
        ) from None


def get_verifier(name: str, config: Mapping[str, Any] | BaseModel | None = None) -> Verifier:
    """Instantiate the verifier registered as ``name`` with its settings (typed or a
    mapping, see `Verifier`)."""
    return verifier_class(name)(config or {})


def apply_failure_policy(
    result: RewardResult, policy: str = "zero", verifier: str = "?"
) -> RewardResult:
    """Turn a verifier failure into a zero reward (``zero``) or raise (``fail``).

    Successful results pass through unchanged. The caller counts failures
    (``result.ok is False``) in its metrics either way.
    """
    if policy not in FAILURE_POLICIES:
        raise ValueError(f"failure policy must be one of {FAILURE_POLICIES}, got {policy!r}")
    if result.ok:
        return result
    if policy == "fail":
        raise VerifierFailure(verifier, result.failure)
    return RewardResult(0.0, ok=False, failure=result.failure, detail=result.detail)


@dataclass
class FailureCounter:
    """Counts verifier failures per verifier and reason, for the metrics log."""

    counts: dict[str, int] = field(default_factory=dict)
    scored: dict[str, int] = field(default_factory=dict)

    def record(self, verifier: str, result: RewardResult) -> None:
        self.scored[verifier] = self.scored.get(verifier, 0) + 1
        if not result.ok:
            self.counts[verifier] = self.counts.get(verifier, 0) + 1

    def as_metrics(self, prefix: str = "rewards") -> dict[str, int]:
        out: dict[str, int] = {}
        for name, n in sorted(self.scored.items()):
            out[f"{prefix}/{name}/scored"] = n
            out[f"{prefix}/{name}/failures"] = self.counts.get(name, 0)
        return out
