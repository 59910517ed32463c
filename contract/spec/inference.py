"""[inference]: rollout engines, sampling and serving capacity."""

from __future__ import annotations

from typing import Literal

from contract.spec._base import Section, fld


class InferenceSection(Section):
    engine: Literal["embedded", "sglang"] = fld(
        "embedded",
        description="rollout server: embedded (our torch server, CPU or GPU) or sglang",
    )
    placement: Literal["colocated", "disaggregated"] | None = fld(
        None,
        description="engines share the trainer GPUs (colocated) or have their own",
        aliases=("inference.placement_mode",),
        derived="'disaggregated' if async.enabled else 'colocated'",
    )
    gpus: int | None = fld(
        None,
        description="total inference GPUs",
        derived="trainer world when colocated on GPUs; 1 when disaggregated on GPUs; 0 on CPU",
        ge=0,
        le=2048,
    )
    tensor_parallel: int = fld(
        1,
        description="GPUs per engine",
        aliases=("inference.rollout_tensor_parallel_size",),
        ge=1,
        le=8,
    )
    num_engines: int | None = fld(
        None,
        description="rollout engines",
        derived="inference.gpus / inference.tensor_parallel, or 1 for a CPU embedded engine",
        ge=1,
        le=2048,
    )
    nodes: int = fld(
        0,
        description="nodes that run only engines on a CPU run (0: the engines share node 0); "
        "GPU runs derive engine nodes from inference.gpus",
        ge=0,
        le=64,
    )
    router: bool = fld(True, description="put the engines behind sglang-router")
    router_policy: Literal["cache_aware", "round_robin", "random", "power_of_two"] = fld(
        "cache_aware", description="sglang-router load-balancing policy"
    )
    router_cache_threshold: float = fld(
        0.5,
        description="cache-aware policy: prefix-match ratio to prefer a cached worker",
        ge=0.0,
        le=1.0,
    )
    router_balance_abs_threshold: int = fld(
        32, description="cache-aware policy: absolute load gap that forces balancing", ge=0
    )
    router_balance_rel_threshold: float = fld(
        1.0001, description="cache-aware policy: relative load gap that forces balancing", ge=1.0
    )
    prompts_per_collection: int = fld(
        8,
        description="prompts per rollout collection",
        aliases=("inference.rollout_batch_size",),
        ge=1,
        le=65536,
    )
    samples_per_prompt: int = fld(
        8,
        description="responses sampled per prompt (group size)",
        aliases=("inference.n_samples_per_prompt",),
        ge=1,
        le=1024,
    )
    global_batch_size: int | None = fld(
        None,
        description="samples per optimizer update",
        derived="prompts_per_collection * samples_per_prompt",
        ge=1,
        le=2**26,
    )
    max_context_length: int = fld(
        6144, description="prompt + response token budget (trainer and engines)", ge=2, le=1048576
    )
    max_response_length: int | None = fld(
        None,
        description="response token cap",
        derived="min(4096, max_context_length // 2)",
        ge=1,
        le=1048576,
    )
    max_prompt_length: int | None = fld(
        None,
        description="prompt token cap (longer prompts are rejected, never truncated)",
        derived="max_context_length - max_response_length",
        ge=1,
        le=1048576,
    )
    temperature: float = fld(1.0, description="sampling temperature", ge=0.0)
    top_p: float = fld(1.0, description="nucleus sampling", gt=0.0, le=1.0)
    top_k: int = fld(-1, description="top-k sampling (-1: off)", ge=-1)
    max_running_requests: int = fld(
        64,
        description="engine admission: concurrent requests per engine",
        aliases=("inference.sglang_max_running_requests",),
        ge=1,
        le=65536,
    )
    server_concurrency: int = fld(
        64,
        description="client HTTP slots per engine",
        aliases=("inference.sglang_server_concurrency",),
        ge=1,
        le=65536,
    )
    max_total_tokens: int | None = fld(
        None,
        description="KV-cache token pool per engine",
        aliases=("inference.sglang_max_total_tokens",),
        derived="max(524288, max_running_requests * max_context_length)",
        ge=1,
        le=2**36,
    )
    mem_fraction_static: float | None = fld(
        None,
        description="fraction of GPU memory an engine reserves for weights + KV (SGLang "
        "subtracts all the memory in use on its GPUs when it sizes the pool; the embedded "
        "engine only its own, so a trainer starting beside it leaves its pool unchanged)",
        aliases=("inference.sglang_mem_fraction_static",),
        derived="0.4 colocated, 0.6 disaggregated",
        gt=0.0,
        le=1.0,
    )
    radix_cache: bool = fld(
        False,
        description="prefix cache: SGLang's radix cache; the embedded engine's radix tree "
        "reuses the longest cached prefix of each prompt (LRU-evicted, flushed on weight "
        "updates)",
    )
    kv_cache_dtype: Literal["auto", "bf16", "fp8_e4m3", "fp8_e5m2"] = fld(
        "auto",
        description="KV cache storage type (SGLang's --kv-cache-dtype): auto = the model's "
        "dtype; fp8_e4m3 / fp8_e5m2 hold twice the tokens in the same memory and halve what "
        "a decode step reads of them, at a larger train/inference log-prob gap (values kept "
        "with a scale of 1)",
    )
    max_mamba_cache_size: int = fld(
        128,
        description="recurrent states per engine for GatedDeltaNet (olmo_hybrid) models: one per "
        "running sequence, so at most this many run at once",
        aliases=("inference.sglang_max_mamba_cache_size",),
        ge=1,
    )
    cuda_graph_decode: bool = fld(True, description="CUDA graphs for decode")
    cuda_graph_max_bs: int = fld(
        64,
        description="largest decode batch captured in CUDA graphs",
        aliases=("inference.sglang_cuda_graph_max_bs_decode",),
        ge=1,
    )
    chunked_prefill_size: int | None = fld(
        None, description="SGLang chunked prefill size (-1: off)", ge=-1
    )
    seed: int | None = fld(None, description="sampling seed", derived="data.seed")
