"""The plan's per-GPU memory estimate, with its parts (bytes counted, GiB reported).

Trainer peak = fp32 weights and Adam states (sharded as the trainer's mesh shards them) +
the reference model (sharded too) + the largest of three phases of a step, which are never
alive together. The mesh is ``runtime.trainer.parallel.plan_mesh``'s: FSDP over the world on
one node; HSDP across trainer nodes (a parameter is split over the GPUs of one node and
replicated across nodes); with ``trainer.expert_parallel = E`` HSDP with shards of ``E``
ranks, where the routed experts are split over the whole world (EP over the shard
dimension, FSDP over the replicas) and every other parameter over ``E`` ranks only. Where
the experts' share of the parameters is not known, all are counted as split over the shard:


- the LM head's backward: everything the forward saved (activations; under bf16 autocast
  the bf16 weight copies the matmuls keep), the head's weight gradient, the saved logits
  (the forward computes all ``T x V`` of them; ``runtime.trainer.logprobs`` chunks only
  their fp32 softmax), their gradient and the log-prob chunk scratch; no other gradient
  exists yet (the trainer zeroes them to None);
- the blocks' backward: all weight gradients, one block rebuilt at a time under recompute,
  and of the saved block inputs only those of the blocks not yet done: block ``k``'s
  backward holds the inputs of blocks ``0..k`` and the gradients of blocks ``k..L-1``,
  a sum linear in ``k`` whose larger end is every gradient + one input, or (an input
  larger than a block's gradients) every input + one block's gradients;
- the optimizer step: every gradient, plus on CUDA the multi-tensor (``foreach``) AdamW's
  ``sqrt(v)`` temporary, one fp32 tensor per parameter, all at once (the Adam states are
  allocated inside the first step).

Engine = bf16 weights + its KV cache (+ the GatedDeltaNet layers' per-sequence state of an
olmo_hybrid model: fp32 recurrent state and bf16 convolution tails) + the prefill's transient (one prompt is never split:
a prefill forward spans up to a whole context, and builds a ``T x T`` int64 position grid)
+ the sampler's logits. Colocated, the trainer steps while the engine's weights and KV stay
resident, and the engine prefills while the trainer holds its weights and Adam states
(gradients are None between steps): the larger of the two.

Per-token activation bytes of one block were counted on the CPU with
``torch.autograd.graph.saved_tensors_hooks`` on builtin models under bf16 autocast
(``tests/unit/test_memory_estimate.py`` re-measures them): ``52 d + 8 f`` bytes with
``d`` the width and ``f`` the MLP width (norms and RoPE keep fp32 copies of the residual,
autocast keeps a bf16 copy of each matmul input, SwiGLU keeps four ``f``-wide tensors),
``59 d + 16 f`` in fp32; with full recompute a block keeps only its fp32 input (``4 d``).
FlexAttention keeps no ``T x T`` mask; the dense-mask ``sdpa`` backend keeps one per block.
"""

from __future__ import annotations

from typing import Any

GIB = 1024**3
LOGPROB_CHUNK_ROWS = 1024  # runtime.trainer.logprobs.CHUNK_ROWS (a test keeps them equal)
ENGINE_PREFILL_TOKENS = 16384  # the embedded engine's default prefill chunk
KV_ROW_ALIGN = 64  # the embedded engine rounds each slot's cache rows up to this

# saved-for-backward bytes per token: (per width d, per MLP width f) of one block, and the
# embedding/final-norm/LM-head input (per width d), by compute precision
_BLOCK = {"bf16": (52, 8), "fp32": (59, 16)}
_OUTSIDE = {"bf16": 10, "fp32": 12}
_LOGPROB_FP32_CHUNKS = 4  # backward: log-softmax, softmax, gradient, one product


def _shape(source: str, info: dict[str, Any]) -> dict[str, int]:
    d = int(info.get("hidden", 0))
    vocab = int(info.get("vocab", 0))
    if source.startswith("builtin:") and "vocab_size=" in source:
        for part in source.partition("?")[2].split("&"):
            key, _, val = part.partition("=")
            if key == "vocab_size" and val.isdigit():
                vocab = int(val)
    layers = int(info.get("layers", 0))
    return {
        "layers": layers,
        # olmo_hybrid: only the attention layers keep KV rows; the GatedDeltaNet layers keep
        # a fixed-size state per sequence instead
        "kv_layers": int(info.get("kv_layers", layers)),
        "recurrent_bytes": int(info.get("recurrent_state_bytes", 0)),
        "d": d,
        "f": int(info.get("ffn_hidden", 0)) or 4 * d,
        "kv": int(info.get("kv_heads", 0)) * int(info.get("head_dim", 0)),
        "vocab": vocab,
    }


def shard_degree(world: int, nodes: int, expert_parallel: int) -> int:
    """Ranks a non-expert parameter is split over (``runtime.trainer.parallel.plan_mesh``;
    a test keeps the two equal)."""
    if expert_parallel > 1:
        return expert_parallel
    if nodes > 1 and world % nodes == 0:
        return world // nodes
    return max(world, 1)


def params_per_rank(c: dict[str, Any], info: dict[str, Any], world: int) -> float:
    """Parameters one trainer rank holds the shards of: the experts over the world, the
    rest over the shard degree (all over the shard degree where the split is unknown)."""
    params = int(c["model"]["num_params"])
    tr = c["trainer"]
    nodes = int(tr.get("nodes", 1) or 1)
    shard = shard_degree(max(world, 1), nodes, int(tr.get("expert_parallel", 1) or 1))
    if shard == max(world, 1):
        return params / shard
    experts = min(int(info.get("expert_params") or 0), params)
    return experts / max(world, 1) + (params - experts) / shard


def trainer_parts(c: dict[str, Any], info: dict[str, Any], world: int) -> dict[str, float]:
    """Bytes per trainer GPU by part (see the module docstring for the model)."""
    params = int(c["model"]["num_params"])
    tr, opt = c["trainer"], c["optimizer"]
    mine = params_per_rank(c, info, world)  # parameters whose shards this rank holds
    # the LM head and embedding are not experts: split over the shard degree
    shard = shard_degree(
        max(world, 1), int(tr.get("nodes", 1) or 1), int(tr.get("expert_parallel", 1) or 1)
    )
    s = _shape(c["model"]["source"], info)
    tokens = int(tr["packing_max_tokens"] or c["inference"]["max_context_length"])
    gpu = tr.get("device", "cpu") == "cuda"
    prec = "bf16" if gpu else "fp32"
    logit_bytes = 4 if (tr.get("fp32_lm_head") or not gpu) else 2
    per_d, per_f = _BLOCK[prec]
    block = tokens * (per_d * s["d"] + per_f * s["f"])
    outside = tokens * _OUTSIDE[prec] * s["d"]
    recompute = bool(tr["activation_recompute"])
    saved = s["layers"] * (tokens * 4 * s["d"] if recompute else block) + outside
    if tr.get("attention_backend") == "sdpa":
        saved += s["layers"] * tokens * tokens * (2 if gpu else 4)
    logits = tokens * s["vocab"] * logit_bytes
    rows = min(LOGPROB_CHUNK_ROWS, tokens)
    chunks = rows * s["vocab"] * (_LOGPROB_FP32_CHUNKS * 4 + logit_bytes)
    head_weight = s["vocab"] * s["d"]
    # autocast's bf16 weight copies saved for backward: every matmul weight (the embedding
    # table is looked up, not multiplied), or only the LM head's when blocks are recomputed
    copies = 0 if not gpu else 2 * (head_weight if recompute else max(params - head_weight, 0))
    # blocks' backward: one block's saved input (or activations) against its gradients
    per_input = tokens * 4 * s["d"] if recompute else block
    per_grads = max(mine - 2 * head_weight / shard, 0) * 4 / max(s["layers"], 1)
    held = per_input + max(s["layers"] - 1, 0) * max(per_input - per_grads, 0.0) + outside
    if tr.get("attention_backend") == "sdpa":
        held += tokens * tokens * (2 if gpu else 4)
    # AdamW(foreach=True) on CUDA unless experts are sharded apart (runtime.trainer.trainer)
    foreach = gpu and int(tr.get("expert_parallel", 1) or 1) == 1
    return {
        "weights_adam": mine * 12,
        "grads": mine * 4,
        # the frozen KL reference is sharded like the policy (fp32 weights, no states)
        "reference_model": mine * 4.0 if float(opt.get("kl_coef", 0.0)) > 0 else 0.0,
        "activations": float(saved),
        "autocast_weight_copies": float(copies),
        "head_grad": head_weight * 4 / shard,
        "logits": float(logits),
        "logits_grad": float(logits),
        "logprob_chunks": float(chunks),
        "recompute_block": float(block if recompute else 0),
        "saved_at_blocks_backward": float(held),
        "optimizer_step_temp": mine * 4 if foreach else 0.0,
    }


def trainer_resident(parts: dict[str, float]) -> float:
    """What the trainer holds between steps: weights, Adam states, the reference."""
    return parts["weights_adam"] + parts["reference_model"]


def trainer_peak(parts: dict[str, float]) -> float:
    """The resident part + the largest of the head's backward, the blocks' backward and
    the optimizer step (see the module docstring)."""
    head = (
        parts["activations"]
        + parts["autocast_weight_copies"]
        + parts["head_grad"]
        + parts["logits"]
        + parts["logits_grad"]
        + parts["logprob_chunks"]
    )
    blocks = (
        parts["grads"]
        + parts["autocast_weight_copies"]
        + parts["saved_at_blocks_backward"]
        + parts["recompute_block"]
    )
    step = parts["grads"] + parts["optimizer_step_temp"]
    return trainer_resident(parts) + max(head, blocks, step)


def kv_entry_bytes(c: dict[str, Any]) -> int:
    """Bytes of one cached K or V element: 1 for an FP8 cache, else the model's dtype's
    (``inference.kv_cache_dtype``; bf16 for the GPU runs this plan sizes)."""
    kv_dtype = str(c["inference"].get("kv_cache_dtype", "auto"))
    if kv_dtype.startswith("fp8"):
        return 1
    if kv_dtype == "auto" and c["model"].get("dtype") == "float32":
        return 4
    return 2


def engine_parts(c: dict[str, Any], info: dict[str, Any]) -> dict[str, float]:
    """Bytes per engine GPU: bf16 weights, the KV cache the engine allocates, transients."""
    inf = c["inference"]
    s = _shape(c["model"]["source"], info)
    tp = max(int(inf["tensor_parallel"]), 1)
    ctx = int(inf["max_context_length"])
    slots = int(inf["max_running_requests"])
    if inf.get("engine", "embedded") == "embedded":  # slots x context rows, rounded up
        kv_tokens = slots * (-(-ctx // KV_ROW_ALIGN) * KV_ROW_ALIGN)
    else:  # SGLang sizes its token pool
        kv_tokens = int(inf["max_total_tokens"])
    kv = kv_tokens * s["kv_layers"] * 2 * s["kv"] * kv_entry_bytes(c)
    # a prefill chunk holds up to ENGINE_PREFILL_TOKENS padded tokens, but one prompt is
    # never split: up to a whole context in one forward
    rows = min(max(ENGINE_PREFILL_TOKENS, ctx), slots * ctx)
    prefill = rows * (3 * s["f"] + 6 * s["d"]) * 2
    parts = {
        "weights": int(c["model"]["num_params"]) * 2 / tp,
        "kv_cache": kv / tp,
        "prefill_transient": prefill / tp,
        # forward.prefill_batch: the (T, T) int64 query-key distance grid, T the longest prompt
        "prefill_position_grid": float(ctx * ctx * 8),
        "sampler_logits": float(slots * s["vocab"] * (2 + 3 * 4)),
    }
    if s["recurrent_bytes"]:  # one state per sequence that holds one (max_mamba_cache_size)
        states = int(inf.get("max_mamba_cache_size", slots))
        if inf.get("engine", "embedded") == "embedded":
            states = min(states, slots)
        parts["recurrent_state"] = states * s["recurrent_bytes"] / tp
    return parts


def teacher_parts(c: dict[str, Any], info: dict[str, Any]) -> dict[str, float]:
    """Bytes per GPU of the distillation teacher's server: the engine estimate for the
    teacher's model, context and slots (it only prefills, but holds KV for its slots)."""
    t = c["teacher"]
    as_engine = {
        "model": {"source": t["source"], "num_params": t["num_params"]},
        "inference": {
            "engine": t["engine"],
            "tensor_parallel": max(int(t["gpus"] or 1), 1),
            "max_context_length": t["max_context_length"],
            "max_running_requests": t["max_running_requests"],
            "max_total_tokens": int(t["max_running_requests"]) * int(t["max_context_length"]),
        },
    }
    return engine_parts(as_engine, info)


def estimate(
    c: dict[str, Any],
    info: dict[str, Any],
    placement: dict[str, Any],
    teacher_info: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``plan.memory``: per-GPU totals (GiB) and their parts."""
    params = c["model"]["num_params"]
    out: dict[str, Any] = {
        "known": params is not None,
        "gpu_memory_gib": c["launch"]["gpu_memory_gib"],
        "trainer_gib_per_gpu": None,
        "engine_gib_per_gpu": None,
        "colocated_gib_per_gpu": None,
        "engine_budget_gib": None,
        "trainer_parts_gib": {},
        "engine_parts_gib": {},
        "teacher_gib_per_gpu": None,
        "teacher_budget_gib": None,
        "teacher_parts_gib": {},
        "formula": "trainer = P*12B + reference (P*4B with a KL term) + "
        "max(head backward: saved activations (recompute: layers*T*4d, else "
        "layers*T*(52d+8f) bf16) + bf16 weight copies + head grad + logits + logits grad + "
        "log-prob chunks; blocks backward: P*4B grads + the block inputs not yet "
        "done + one recomputed block; optimizer step: grads + P*4B foreach "
        "temporary); P = the parameters one rank holds shards of: params/world on one "
        "node, params/(GPUs per node) across nodes (HSDP), with expert_parallel E "
        "experts/world + the rest/E; engine = params*2B/tp + KV + prefill transients; "
        "colocated = max(trainer + engine weights and KV, trainer weights and Adam + engine)",
    }
    _teacher_memory(out, c, placement, teacher_info or {})
    if params is None:
        return out
    # without the model's shape (a checkpoint not readable at compile time) only the
    # parameter-sized parts are known
    out["shape_known"] = bool(info.get("layers")) and bool(info.get("hidden"))
    world = max(int(placement["trainer"]["world_size"]), 1)
    tp = trainer_parts(c, info, world)
    ep = engine_parts(c, info)
    trainer = trainer_peak(tp) / GIB
    engine = sum(ep.values()) / GIB
    out["trainer_parts_gib"] = {k: round(v / GIB, 3) for k, v in tp.items()}
    out["engine_parts_gib"] = {k: round(v / GIB, 3) for k, v in ep.items()}
    out["trainer_gib_per_gpu"] = round(trainer, 3)
    out["engine_gib_per_gpu"] = round(engine, 3) if ep["kv_cache"] else None
    # colocated: the trainer's step beside the engine's weights + KV, or the engine's
    # prefill beside the trainer's weights + Adam states, whichever is larger
    colocated = max(
        trainer + (ep["weights"] + ep["kv_cache"] + ep.get("recurrent_state", 0.0)) / GIB,
        trainer_resident(tp) / GIB + engine,
    )
    out["colocated_gib_per_gpu"] = (
        round(colocated, 3) if c["inference"]["placement"] == "colocated" else None
    )
    out["engine_budget_gib"] = round(
        c["inference"]["mem_fraction_static"] * c["launch"]["gpu_memory_gib"], 3
    )
    return out


def _teacher_memory(
    out: dict[str, Any], c: dict[str, Any], placement: dict[str, Any], info: dict[str, Any]
) -> None:
    """``teacher_gib_per_gpu`` (+ parts and budget) when the plan places a teacher whose
    size is known; on the CPU the figure is host memory."""
    placed = placement.get("teacher")
    if placed is None or not (c.get("teacher") or {}).get("num_params"):
        return
    parts = teacher_parts(c, info)
    out["teacher_parts_gib"] = {k: round(v / GIB, 3) for k, v in parts.items()}
    out["teacher_gib_per_gpu"] = round(sum(parts.values()) / GIB, 3)
    out["teacher_budget_gib"] = (
        round(float(c["teacher"]["mem_fraction_static"]) * c["launch"]["gpu_memory_gib"], 3)
        if placed["device"] == "cuda"
        else None
    )
