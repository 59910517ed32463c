"""[judges.NAME], [rubrics.NAME], [judging.bindings.VERIFIER]: LLM judges."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from contract.spec._base import Section, fld

JudgeName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_-]*$")]


class _JudgeCommon(Section):
    model: str = fld(description="judge model id", min_length=1)
    max_context_length: int = fld(40960, description="judge context window", ge=1)
    max_concurrent_calls: int = fld(16, description="client concurrency to the judge", ge=1)
    timeout: int = fld(120, description="seconds per judge request", ge=1)


class ManagedJudge(_JudgeCommon):
    mode: Literal["managed"] = fld(description="managed: rlc places an SGLang judge on GPUs")
    gpus: int = fld(1, description="GPUs of the judge server (its tensor parallelism)", ge=1, le=8)
    engine: Literal["embedded", "sglang"] | None = fld(
        None,
        description="the judge's server: sglang, or the embedded engine (one device)",
        derived="'sglang' on a GPU run, 'embedded' on a CPU run",
    )
    revision: str = fld(description="model revision (40 lowercase hex)", pattern=r"^[0-9a-f]{40}$")
    prepared_dir: str = fld(description="absolute path of the pre-cached weights", pattern=r"^/")
    chat_template: Literal["qwen3-no-thinking"] = fld(
        "qwen3-no-thinking", description="judge chat template"
    )
    context_extension: Literal["none", "qwen3-yarn-128k"] = fld(
        "none", description="context extension (qwen3-yarn-128k needs Qwen/Qwen3-32B)"
    )


class ExternalJudge(_JudgeCommon):
    mode: Literal["external"] = fld(description="external: an OpenAI-compatible service")
    endpoint: str = fld(
        description="http(s) URL without embedded credentials",
        pattern=r"^https?://[^/@\s:]+(:[0-9]+)?(/.*)?$",
    )


Judge = Annotated[ManagedJudge | ExternalJudge, Field(discriminator="mode")]


class Rubric(Section):
    profile: Literal[
        "open-instruct/general-quality",
        "open-instruct/general-quality_ref",
        "open-instruct/general-web_instruct_general_verifier",
    ] = fld(description="rubric profile")
    max_response_tokens: int = fld(2048, description="judge response budget", ge=1)
    temperature: float = fld(1.0, description="judge sampling temperature", ge=0.0)


class Binding(Section):
    judge: str = fld(description="a [judges.NAME] entry", min_length=1)
    rubric: str = fld(description="a [rubrics.NAME] entry", min_length=1)


class JudgingSection(Section):
    bindings: dict[str, Binding] = Field(default={}, description="verifier name -> judge + rubric")
