"""The embedded engine as a backend (``runtime.engines.backend``).

Its server (``python -m runtime.engines.embedded``) honours every option the compiler emits
for it: ``--random-seed``, ``--init-seed``, ``--max-total-tokens`` and, on a GPU,
``--mem-fraction-static`` (the KV pool), ``--chunked-prefill-size``, ``--cuda-graph-max-bs``,
``--disable-cuda-graph``, ``--disable-radix-cache`` (the radix prefix cache, ``radix.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from contract.spec.evaluation import EvaluationSection
from contract.spec.inference import InferenceSection
from runtime.node.placement import engine_env


@dataclass(frozen=True)
class EmbeddedBackend:
    name: str = "embedded"
    snapshot_format: Literal["native", "hf"] = "native"
    hf_weight_names: bool = False
    checksum_audit: bool = True

    def env(self, engine: Any) -> dict[str, str]:
        """The plan's GPUs of the engine (none without a placement: an evaluator's)."""
        return {} if engine is None else engine_env(engine)

    def ranks_per_engine(self, inference: InferenceSection) -> int:
        return 1  # TP1 only (rule embedded-engine-gpu-tp)

    def eval_server_args(self, evaluation: EvaluationSection) -> list[str]:
        return []  # evaluation.server_args are SGLang flags (background evaluators)


EMBEDDED = EmbeddedBackend()
