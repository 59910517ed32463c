"""When to evaluate, and shared evaluation on the rollout engines.

The GRPO loop calls an evaluator at update boundaries: ``due(update, final)`` decides,
``evaluator(update)`` runs (or submits) the evaluation and returns flat metrics that go
into that collection's metrics record. Shared evaluation generates on the rollout
engines with the weights just published, between updates; its prompts never come from
the training sampler, so the training stream (and the async buffer) is untouched.
Background evaluation (`runtime.launch.evaluator`) implements the same interface.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from runtime.data.eval_tasks import pools
from runtime.metrics import MetricsWriter
from runtime.rewards.base import Verifier
from runtime.rollout.collect import GroupGenerator
from runtime.rollout.evaluation import EvalSampling, evaluate_pool, macro_score


class EvaluatorLike(Protocol):
    def due(self, update: int, final: bool) -> bool: ...

    def __call__(self, update: int) -> dict[str, Any]: ...

    def close(self) -> dict[str, Any]: ...


def milestone_due(
    update: int, final: bool, interval: int | None, initial: bool, at_final: bool
) -> bool:
    """Update 0 (when ``initial``), every ``interval`` updates, and the final one."""
    if update == 0:
        return initial
    if final and at_final:
        return True
    return interval is not None and interval > 0 and update % interval == 0


class SharedEvaluator:
    """Evaluates the held-out pools on the rollout engines; logs ``eval/metrics.jsonl``."""

    def __init__(
        self,
        generate: GroupGenerator,
        render: Callable[[Any], list[int]],
        verifier_for: Callable[[str], Verifier],
        prompts: Sequence[Any],
        sampling: EvalSampling,
        log: MetricsWriter,
        *,
        interval: int | None,
        initial: bool,
        final: bool,
        run_seed: int,
        stop_token_ids: Sequence[int] = (),
        concurrency: int = 8,
    ) -> None:
        if not prompts:
            raise ValueError("shared evaluation needs held-out prompts (data.tasks eval_count)")
        self.generate = generate
        self.render = render
        self.verifier_for = verifier_for
        self.sampling = sampling
        self.log = log
        self.interval = interval
        self.initial = initial
        self.final = final
        self.run_seed = run_seed
        self.stop_token_ids = list(stop_token_ids)
        self.concurrency = concurrency
        self.names = pools(prompts)
        self.by_pool = {
            n: [p for p in prompts if str(p.metadata.get("pool", p.task)) == n] for n in self.names
        }
        self.last: dict[str, Any] = {}

    def due(self, update: int, final: bool) -> bool:
        return milestone_due(update, final, self.interval, self.initial, self.final)

    def __call__(self, update: int) -> dict[str, Any]:
        t0 = time.monotonic()
        metrics: dict[str, Any] = {}
        for name in self.names:
            res = evaluate_pool(
                self.generate,
                self.render,
                self.verifier_for,
                self.by_pool[name],
                self.sampling,
                run_seed=self.run_seed,
                version=update,
                stop_token_ids=self.stop_token_ids,
                concurrency=self.concurrency,
                prefix=f"eval/{name}",
            )
            metrics.update(res.metrics)
        metrics["eval/score"] = macro_score(metrics, self.names)
        metrics["eval/update"] = update
        metrics["time/eval_s"] = time.monotonic() - t0
        self.log.write({"update": update, "mode": "shared", **metrics})
        self.last = metrics
        return metrics

    def close(self) -> dict[str, Any]:
        """The last evaluation's headline numbers, for the end-of-run summary."""
        if not self.last:
            return {}
        return {
            "eval_update": self.last["eval/update"],
            "eval_score": self.last["eval/score"],
        }
