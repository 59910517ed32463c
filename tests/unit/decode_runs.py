"""Decode steps of the engine's forward under one decode attention, for the tests that
compare attentions (SDPA, FlexAttention, the split-KV Triton kernel) on the same model."""

from __future__ import annotations

from typing import Any

import torch

from runtime.engines.embedded.forward import InferenceModel

# ragged rows across 64- and 128-entry block edges: 200 and 131 tokens span two of each
PROMPT_LENS = (200, 5, 131, 127)


def _prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(3)
    return [torch.randint(1, 128, (n,), generator=g).tolist() for n in PROMPT_LENS]


def decode_logits(
    loaded: Any,
    attention: str,
    *,
    compile_backend: Any = None,
    steps: int = 5,
    kv_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, InferenceModel]:
    """Greedy decode steps after a batched prefill, on the CPU: ``(steps, B, V)`` logits."""
    prompts = _prompts()
    im = InferenceModel(
        loaded.model, max_slots=4, capacity=300, decode_attention=attention, kv_dtype=kv_dtype
    )
    if compile_backend is not None:
        im.enable_compile(backend=compile_backend)
    im.prefill_batch(prompts, list(range(len(prompts))))
    tok = torch.tensor([p[-1] for p in prompts])
    pos = torch.tensor([len(p) for p in prompts])
    out = []
    for _ in range(steps):
        logits, _ = im.decode(tok, pos)
        out.append(logits)
        tok, pos = logits.argmax(-1), pos + 1
    return torch.stack(out), im


def captured_logits(
    loaded: Any, attention: str, steps: int, kv_dtype: torch.dtype | None = None
) -> tuple[torch.Tensor, InferenceModel]:
    """The same on a GPU, through the compiled regions and CUDA graphs (float32 logits)."""
    prompts = _prompts()
    im = InferenceModel(
        loaded.model,
        max_slots=4,
        capacity=300,
        device="cuda",
        decode_attention=attention,
        kv_dtype=kv_dtype,
    )
    im.enable_compile()
    im.enable_cuda_graphs()
    im.prefill_batch(prompts, list(range(len(prompts))))
    tok = torch.tensor([p[-1] for p in prompts], device="cuda")
    pos = torch.tensor([len(p) for p in prompts], device="cuda")
    out = []
    for _ in range(steps):
        logits, _ = im.decode_step(tok, pos)
        out.append(logits.float())
        tok, pos = logits.argmax(-1), pos + 1
    assert im.compiled and im.captured_graphs() > 0
    return torch.stack(out), im
