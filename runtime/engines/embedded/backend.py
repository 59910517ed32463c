"""The embedded engine as a backend (``runtime.engines.backend``).

Its server (``python -m runtime.engines.embedded``) honours every option the compiler emits
for it: ``--random-seed``, ``--init-seed``, ``--max-total-tokens`` and, on a GPU,
``--mem-fraction-static`` (the KV pool), ``--chunked-prefill-size``, ``--cuda-graph-max-bs``,
``--disable-cuda-graph``, ``--disable-radix-cache`` (the radix prefix cache, ``radix.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from contract.spec.evaluation import EvaluationSection
from contract.spec.inference import InferenceSection


@dataclass(frozen=True)
class EmbeddedBackend:
    name: str = "embedded"
    snapshot_format: Literal["native", "hf"] = "native"
    hf_weight_names: bool = False
    checksum_audit: bool = True
    pool_from_own_memory: bool = True

    def env(self) -> dict[str, str]:
        """None of its own (an evaluator's engine; rollout engines run the compiled env)."""
        return {}

    def ranks_per_engine(self, inference: InferenceSection) -> int:
        return 1  # TP1 only (rule embedded-engine-gpu-tp)

    def eval_server_args(self, evaluation: EvaluationSection) -> list[str]:
        return []  # evaluation.server_args are SGLang flags (background evaluators)


EMBEDDED = EmbeddedBackend()
