"""The engine-backend seam: what differs between the embedded engine and SGLang, in one place.

The runtime picks the backend once, from ``inference.engine`` (``backend_for``), and asks it
instead of comparing engine names: the environment an evaluator's engine gets, the weight
names and snapshot format it loads, how many ranks of a distributed weight-update group one
engine holds, and how the start-up weight audit reads its weights back. The command line
itself is the manifest's (``runtime.node.launch_argv``); each backend's module documents the
options its server honours. One module per backend: ``runtime.engines.embedded.backend``
and ``runtime.engines.sglang``.
"""

from __future__ import annotations

from typing import Literal, Protocol

from contract.spec.evaluation import EvaluationSection
from contract.spec.inference import InferenceSection


class EngineBackend(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def snapshot_format(self) -> Literal["native", "hf"]:
        """The checkpoint layout a snapshot for this engine is written in (disk
        publication, milestone snapshots for evaluators): OLMo-core's names or an HF
        directory."""
        ...

    @property
    def hf_weight_names(self) -> bool:
        """Weights travel under HF names in a tensor / distributed update."""
        ...

    @property
    def checksum_audit(self) -> bool:
        """The audit reads a device checksum (``/get_weight_checksum``); else a few tensors
        by name plus the engine's logprobs of its own greedy continuation."""
        ...

    @property
    def pool_from_own_memory(self) -> bool:
        """The KV pool is sized from the engine's own memory, so a trainer starting beside
        it on the same GPU leaves the pool as it would be alone; else from the device's
        free memory, and the trainer starts after it."""
        ...

    def env(self) -> dict[str, str]:
        """The server's own switches, for an evaluator's engine (rollout engines run the
        compiled ``commands.engine_env``)."""
        ...

    def ranks_per_engine(self, inference: InferenceSection) -> int:
        """Ranks one engine holds in a distributed weight-update group."""
        ...

    def eval_server_args(self, evaluation: EvaluationSection) -> list[str]:
        """Extra server flags of an evaluator engine (``evaluation.server_args``)."""
        ...


def backend_for(engine: str) -> EngineBackend:
    """The backend of ``inference.engine``."""
    if engine == "sglang":
        from runtime.engines.sglang import SGLANG

        return SGLANG
    if engine == "embedded":
        from runtime.engines.embedded.backend import EMBEDDED

        return EMBEDDED
    raise ValueError(f"inference.engine = {engine!r} is not one of 'embedded', 'sglang'")
