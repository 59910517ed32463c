"""The GRPO trainer: one optimizer step over a list of scored samples.

Microbatch is one packed row; gradients accumulate over all rows of the local share of the
global batch, are summed over data-parallel ranks, clipped, and applied with AdamW. Weights
and optimizer state stay fp32 (the master copy); on CUDA the forward runs under bf16 autocast.

With several ranks the model is sharded by OLMo-core (FSDP2/HSDP, expert parallelism; see
``runtime.trainer.parallel``). Rank 0 drives: each public method that needs every rank is a
*collective op* that rank 0 first announces over a gloo control group; the other ranks sit
in ``follow()`` and run the same method (``runtime.trainer.ranks`` starts them). Each rank
takes its share of the batch (``runtime.trainer.split``) and runs as many rows as the busiest
rank, padding with zero-weight rows, because every sharded forward is a collective.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import math
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from olmo_core.nn.transformer import TransformerActivationCheckpointingMode

from runtime.models import LoadedModel, load_model, state_checksum
from runtime.models.attention import set_attention_backend

from .distill import DISTILL_SUMS, opd_loss
from .distributed import (
    DistInfo,
    Rendezvous,
    all_reduce_grads_,
    all_reduce_scalars,
    all_reduce_sum_,
    await_ranks,
    init_distributed,
    shutdown_distributed,
)
from .grpo import METRIC_SUMS, grpo_loss
from .logprobs import token_logprobs
from .packing import IGNORE, PackedRow, pack_samples, pad_row
from .parallel import (
    clip_grad_norm_,
    full_tensor,
    local_param_bytes,
    parallelize,
    plan_mesh,
    reshard,
)
from .publish import PublishedState
from .replay import (
    REDUCTIONS,
    as_routed_experts,
    batch_load_balancing_loss,
    expert_counts,
    moe_routers,
    router_losses,
    router_tap,
)
from .schedule import lr_multiplier
from .settings import (  # noqa: F401  (re-exported: the trainer's settings live there)
    DEFAULT_PACKING_MAX_TOKENS,
    DistillConfig,
    GRPOConfig,
    TrainerConfig,
    contract_settings,
)
from .split import split_indices
from .types import Sample

log = logging.getLogger(__name__)


def _fp32_lm_head(model: torch.nn.Module) -> None:
    """Run the model's LM head (final norm + vocabulary projection) in float32.

    Under bf16 autocast the projection would otherwise produce bf16 logits; the logprobs
    of a large vocabulary lose precision there (the trainer/engine mismatch grows).
    """
    head = getattr(model, "lm_head", None)
    if head is None:
        raise ValueError("trainer.fp32_lm_head: the model has no lm_head")
    inner = head.forward

    def forward(x: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        with torch.autocast(x.device.type, enabled=False):
            return inner(x.float(), *args, **kwargs)

    head.forward = forward


# OLMo-core's activation memory budget under compiled blocks: 0 is the memory of recomputing
# every activation the partitioner can (the compiled counterpart of full recompute)
RECOMPUTE_MEMORY_BUDGET = 0.0
# the warm-up's dynamic row lengths: a doubling ladder from the first row to the longest
# the run can meet. The first compiles a static graph, the second the shape-dynamic one;
# a later length compiles again only where Inductor specialized the graph before it, and
# it does: a buffer indexed in 32 bits at the compile's length is guarded to still fit
# (bounded at 2559 tokens on an H200 with a 100k vocabulary), and the graphs compiled at
# 8192 tokens were guarded ``4096 <= T``, so a short row compiled again in the first
# update. A rung lands in each regime seen (up to 2559 tokens, 2560-4095, 4096 and up), so
# each is compiled before the first update; a regime narrower than a doubling could still
# fall between two rungs. Lengths inside a compiled regime only run the rows. The first
# row spans two of FlexAttention's 128-token blocks.
WARM_UP_FIRST_ROW = 192
WARM_UP_MIN_LONGEST_ROW = 320  # the ladder's top at least: the block-mask sizes vary too
# Before the ladder, one row of a sentinel length: torch marks every dim and int equal to
# it, its longest document or its count of 128-token blocks dynamic
# (``torch.compiler.config.dynamic_values``), so each frame is shape-dynamic from its first
# compile instead of static first and dynamic again at the next row. OLMo-core marks the
# blocks' hidden states itself; the frames behind the graph break where FlexAttention's
# block mask is built see only tensors made inside the compiled blocks. The sentinel stays
# inside the 32-bit-indexing regime and avoids the model's own sizes (a hidden size marked
# dynamic would slow every kernel).
SENTINEL_ROW_MAX = 2559
FLEX_BLOCK_TOKENS = 128
CONTROL_TIMEOUT = timedelta(days=7)  # followers wait for rank 0 through whole rollouts


def collective(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a Trainer method every rank runs: rank 0 announces it to the followers first
    (only for the outermost call; ops nested in ops are already announced)."""

    @functools.wraps(fn)
    def op(self: Trainer, *args: Any, **kwargs: Any) -> Any:
        announce = self._depth == 0 and self.world_size > 1 and self.rank == 0
        self._depth += 1
        try:
            if announce:
                if self.peer_check is not None:
                    self.peer_check()
                box = [(fn.__name__, args, kwargs)]
                dist.broadcast_object_list(box, src=0, group=self.control)
            return fn(self, *args, **kwargs)
        except Exception:
            if self.peer_check is not None:  # a lost rank is the cause: name it
                self.peer_check(grace_s=5.0)
            raise
        finally:
            self._depth -= 1

    return op


def compiled_graphs() -> int:
    """Graphs dynamo has compiled in this process so far (its own counter)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def warm_rope_tables(model: torch.nn.Module, length: int, device: torch.device) -> None:
    """Build every RoPE module's sine/cosine tables for ``length`` positions now
    (OLMo-core's ``warmup_cache``), so no forward ever grows them."""
    from olmo_core.nn.rope import RotaryEmbeddingBase

    for module in model.modules():
        if isinstance(module, RotaryEmbeddingBase):
            module.warmup_cache(length, device)


def _filler_rows() -> list[PackedRow]:
    """A two-token row that trains nothing: keeps a rank in step with busier ranks."""
    return pack_samples([Sample([0], [0], 0.0, loss_mask=[0])], None)


def _sentinel_values(tokens: int) -> tuple[int, int, int]:
    """What a filler row of ``tokens`` brings into the compiled frames: its length, its
    longest document (the filler's second, after a two-token first) and its block count."""
    return tokens, tokens - 2, -(-tokens // FLEX_BLOCK_TOKENS)


def _model_sizes(model: torch.nn.Module) -> set[int]:
    """Every size of the model's parameters and attention heads, and the smallest ints."""
    sizes = {0, 1, 2, 3, 4}
    for p in model.parameters():
        sizes.update(int(d) for d in p.shape)
    for m in model.modules():
        for name in ("n_heads", "n_kv_heads", "head_dim"):
            value = getattr(m, name, None)
            if isinstance(value, int):
                sizes.add(value)
    return sizes


def _has_dropout(model: torch.nn.Module) -> bool:
    """Whether training mode changes the model's forward: a dropout module or an attention
    backend with a non-zero probability."""
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout) and m.p > 0:
            return True
        if float(getattr(m, "dropout_p", 0.0) or 0.0) > 0:
            return True
    return False


def _token_logprobs(
    logits: torch.Tensor, pos: torch.Tensor, targets: torch.Tensor, want_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """fp32 logprobs of ``targets`` (and entropies) at rows ``pos`` of logits ``(T, V)``,
    chunked (see ``runtime.trainer.logprobs``); the entropy costs a gradient only if the
    loss uses it."""
    logp, entropy = token_logprobs(logits, targets, rows=pos)
    return logp, entropy if want_entropy else None


def _response_count(row: PackedRow) -> int:
    mask = row.response_mask if row.response_mask is not None else row.targets != IGNORE
    return int(mask.sum())


class Trainer:
    """GRPO trainer over an OLMo-core model (see module docstring)."""

    def __init__(
        self,
        cfg: TrainerConfig,
        *,
        loaded: LoadedModel | None = None,
        rendezvous: Rendezvous | None = None,
        defer_weights: bool = False,
    ) -> None:
        """``defer_weights``: build (and compile) while the weights are still being read;
        they are zeros until ``fill_weights`` (one rank only: ranks load at once)."""
        self.cfg = cfg
        self.device = torch.device(cfg.device)
        self._depth = 0
        # rank 0: raises if a rank died (also while it waits for the ranks at start-up)
        self.peer_check: Callable[..., None] | None = rendezvous.check if rendezvous else None
        self.after_close: Callable[[], None] | None = None  # rank 0: reap the rank processes
        self.rank_pids: Callable[[], dict[int, int]] | None = None  # rank 0: its ranks' pids
        self.dist: DistInfo = init_distributed(
            cfg.device,
            timeout_s=cfg.startup_timeout_s,
            startup_timeout_s=cfg.startup_timeout_s,
            rendezvous=rendezvous,
        )
        if self.dist.world_size % cfg.expert_parallel:
            raise ValueError(
                f"trainer.expert_parallel = {cfg.expert_parallel} does not divide the "
                f"trainer world of {self.dist.world_size} rank(s)"
            )
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", self.dist.local_rank)
        torch.manual_seed(cfg.seed)
        defer = defer_weights and self.dist.world_size == 1
        self.loaded = loaded or load_model(
            cfg.model_source,
            device=self.device if defer else "cpu",  # zeros: allocated where they train
            seed=cfg.seed,
            architecture=cfg.architecture,
            hf_template=cfg.hf_template,
            defer_weights=defer,
        )
        if cfg.chat_template:  # the spec names the template prompts are rendered with
            self.loaded.tokenizer.use_chat_template(cfg.chat_template)
        self.model = self.loaded.model
        if cfg.row_specialization not in ("dynamic", "static"):
            raise ValueError(
                f"trainer.row_specialization = {cfg.row_specialization!r} is not 'dynamic' "
                "or 'static'"
            )
        if cfg.attention_backend is not None:
            set_attention_backend(self.model, cfg.attention_backend)
        self._configure_router_losses()
        # the KL reference is the starting model, frozen; copied before any method patch
        # (a patched forward would be shared by the copy)
        self.ref_model: torch.nn.Module | None = None
        if cfg.grpo.kl_coef > 0:
            self.ref_model = copy.deepcopy(self.model).eval()
            for p in self.ref_model.parameters():
                p.requires_grad_(False)
            self.ref_model.to(self.device)
        if cfg.fp32_lm_head:
            for m in (self.model, self.ref_model):
                if m is not None:
                    _fp32_lm_head(m)
        if cfg.activation_recompute:
            self._apply_activation_recompute()
        if cfg.compile_model:  # after activation checkpointing, before FSDP (OLMo-core's order)
            from runtime.compile_settings import prepare_compile

            # window sizes x grad modes x row shapes (x the reference model's variants)
            prepare_compile(64)
            for m in (self.model, self.ref_model):
                if m is not None:
                    m.apply_compile()
        self.model.to(self.device)
        # RoPE tables of the longest row from the start: a table grown mid-run would be a new
        # branch (and a new variant of every compiled block) at the first longer row
        longest = self.longest_row_tokens()
        for m in (self.model, self.ref_model):
            if m is not None:
                warm_rope_tables(m, longest, self.device)
        autocast = (
            cfg.bf16_autocast if cfg.bf16_autocast is not None else self.device.type == "cuda"
        )
        self.autocast_dtype = torch.bfloat16 if autocast else None
        self.mesh: Any = None
        self.control: Any = None
        if self.world_size > 1:
            # the first collectives come next: rank 0 sees every rank loaded (or names the
            # one that died meanwhile) instead of waiting in them for a rank that is gone
            self._gate("loaded")
            plan = plan_mesh(self.world_size, cfg.nodes, cfg.expert_parallel)
            row = cfg.max_row_tokens or cfg.packing_max_tokens or DEFAULT_PACKING_MAX_TOKENS
            self.mesh = parallelize(
                self.model,
                plan,
                self.device,
                param_dtype=self.autocast_dtype,
                max_row_tokens=row,
            )
            if self.ref_model is not None:  # sharded like the policy, on the same mesh
                parallelize(
                    self.ref_model,
                    plan,
                    self.device,
                    param_dtype=self.autocast_dtype,
                    max_row_tokens=row,
                )
            self.control = dist.new_group(backend="gloo", timeout=CONTROL_TIMEOUT)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        decay = [p for p in self.params if p.ndim >= 2]
        no_decay = [p for p in self.params if p.ndim < 2]
        self.optimizer = torch.optim.AdamW(
            [
                {"params": decay, "weight_decay": cfg.weight_decay},
                {"params": no_decay, "weight_decay": 0.0},
            ],
            lr=cfg.lr,
            betas=(cfg.adam_beta1, cfg.adam_beta2),
            eps=cfg.adam_eps,
            # experts and the rest are sharded over different meshes: no fused multi-tensor step
            foreach=self.device.type == "cuda" and cfg.expert_parallel == 1,
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lr_multiplier(
                cfg.schedule,
                warmup_steps=cfg.warmup_steps,
                total_steps=cfg.total_steps,
                min_ratio=cfg.min_lr_ratio,
            ),
        )
        # a dense, unsharded, compiled model without dropout scores on its training graph
        self.scores_on_training_graph = (
            cfg.compile_model
            and not self.routers
            and self.mesh is None
            and not _has_dropout(self.model)
        )
        # the last warm-up's rows: pass, tokens, seconds, graphs compiled (start-up report)
        self.warm_up_log: list[dict[str, Any]] = []
        self._batch_counts: torch.Tensor | None = None  # the batch's expert assignments
        self._state_refs: dict[str, torch.Tensor] | None = None  # views of the weights
        self.step = 0
        self.policy_version = 0

    def fill_weights(self) -> None:
        """Weights deferred at the build: wait for them and copy them into the model and
        the KL reference, in place (no-op otherwise). Nothing may read the model's values
        before this: they are zeros."""
        models = [m for m in (self.model, self.ref_model) if m is not None]
        self.loaded.fill_weights(*models)

    @property
    def weights_pending(self) -> bool:
        return self.loaded.pending is not None

    # ------------------------------------------------------------------ setup helpers
    def _configure_router_losses(self) -> None:
        """Take the router losses over from OLMo-core (see ``runtime.trainer.replay``).

        The weights come from the config, or from the model config when unset (OLMo-core
        stores the configured weight divided by the layer count on each router); OLMo-core's
        own in-forward losses are switched off so they are not counted twice.
        """
        cfg = self.cfg
        for name, value in (
            ("router_aux_loss_reduction", cfg.router_aux_loss_reduction),
            ("router_z_loss_reduction", cfg.router_z_loss_reduction),
        ):
            if value not in REDUCTIONS:
                raise ValueError(f"trainer.{name} must be one of {REDUCTIONS}, not {value!r}")
        self.routers = moe_routers(self.model)
        self._warned_unrouted = False
        if cfg.router_replay and not self.routers:
            raise ValueError("trainer.router_replay needs an MoE model; this one has no routers")
        n = len(self.routers)
        first = self.routers[0] if self.routers else None
        model_aux = (first.lb_loss_weight or 0.0) * n if first is not None else 0.0
        model_z = (first.z_loss_weight or 0.0) * n if first is not None else 0.0
        aux, z = cfg.router_aux_loss_coef, cfg.router_z_loss_coef
        self.aux_loss_coef = float(aux if aux is not None else model_aux)
        self.z_loss_coef = float(z if z is not None else model_z)
        for router in self.routers:
            router.lb_loss_weight = None
            router.z_loss_weight = None

    def _apply_activation_recompute(self) -> None:
        """Full recompute of dense blocks (attention modules of MoE blocks, which OLMo-core
        cannot wrap whole). With compiled blocks, OLMo-core's ``budget`` mode instead: the
        compiler's partitioner recomputes inside each compiled block. Checkpoint wrappers
        around compiled blocks fail in the backward (``CheckpointError``: the recompute
        saves other tensors than the compiled forward did), seen on an H200 and on CPU."""
        if self.cfg.compile_model:
            self.model.apply_activation_checkpointing(
                TransformerActivationCheckpointingMode.budget,
                activation_memory_budget=RECOMPUTE_MEMORY_BUDGET,
            )
        elif self.loaded.family == "dense":
            self.model.apply_activation_checkpointing(TransformerActivationCheckpointingMode.full)
        else:  # OLMo-core cannot wrap whole MoE blocks; recompute the attention modules
            self.model.apply_activation_checkpointing(
                TransformerActivationCheckpointingMode.selected_modules,
                modules=["blocks.*.attention"],
            )

    def _gate(self, name: str) -> None:
        """Followers count themselves in at ``name``; rank 0 waits for all of them, polling
        (and watching the rank processes) with the start-up timeout."""
        store = self.dist.store
        if store is None:
            return
        key = f"rlc/gate/{name}"
        if self.rank != 0:
            store.add(key, 1)
            return
        await_ranks(
            store,
            key,
            self.world_size - 1,
            self.cfg.startup_timeout_s,
            self.peer_check,
            what=f"reached '{name}'",
        )

    @property
    def rank(self) -> int:
        return self.dist.rank

    @property
    def world_size(self) -> int:
        return self.dist.world_size

    def local_share(self, samples: Sequence[Sample]) -> tuple[list[int], list[Sample]]:
        """This rank's sample indices and samples (whole groups, balanced tokens)."""
        mine = split_indices(samples, self.world_size)[self.rank]
        return mine, [samples[i] for i in mine]

    def _padded(self, rows: list[PackedRow]) -> list[PackedRow | None]:
        """Rows plus ``None`` fillers up to the busiest rank's row count."""
        if self.world_size == 1:
            return list(rows)
        most = all_reduce_scalars({"rows": float(len(rows))}, self.device, op="max")["rows"]
        return [*rows, *([None] * (int(most) - len(rows)))]

    def follow(self) -> None:
        """Followers (rank > 0): run the ops rank 0 announces until it says ``close``."""
        while True:
            box: list[Any] = [None]
            dist.broadcast_object_list(box, src=0, group=self.control)
            name, args, kwargs = box[0]
            if name == "close":
                break
            try:
                getattr(self, name)(*args, **kwargs)
            except Exception as exc:  # rank 0 fails the same op and decides
                log.warning("trainer rank %d: %s failed: %s", self.rank, name, exc)
            if name == "warm_up":  # start-up is done here, as on rank 0 (runtime.heap)
                from runtime.heap import freeze_heap

                freeze_heap()
        self.close()

    def topology(self) -> dict[str, Any]:
        return {
            "world_size": self.world_size,
            "expert_parallel": self.cfg.expert_parallel,
            "device_kind": self.device.type,
        }

    def _rows(self, samples: Sequence[Sample]) -> list[PackedRow]:
        max_tokens = None
        if self.cfg.sequence_packing:
            max_tokens = self.cfg.packing_max_tokens or DEFAULT_PACKING_MAX_TOKENS
        routed = None
        if self.cfg.router_replay:
            layers, top_k = len(self.routers), int(self.routers[0].top_k)
            routed = [as_routed_experts(s.routed_experts, layers, top_k) for s in samples]
            missing = sum(r is None for r in routed)
            if missing and not self._warned_unrouted:
                self._warned_unrouted = True
                log.warning(
                    "trainer.router_replay is on but %d of %d samples carry no routed_experts; "
                    "their tokens are routed by the current router (request "
                    "return_routed_experts from the engines directly)",
                    missing,
                    len(samples),
                )
        return [self._shaped(r) for r in pack_samples(samples, max_tokens, routed)]

    def longest_row_tokens(self) -> int:
        """The longest row this run can meet (the packing budget, or the context for a
        sample beyond it), at least ``WARM_UP_MIN_LONGEST_ROW``: the warm-up ladder's top."""
        cfg = self.cfg
        longest = max(cfg.max_row_tokens or 0, cfg.packing_max_tokens or 0)
        return max(longest, self.static_row_tokens() or 0, WARM_UP_MIN_LONGEST_ROW)

    def warm_up_lengths(self) -> list[int]:
        """The row lengths the warm-up runs: the static length, or the sentinel row (where
        torch can take one) and the doubling ladder from ``WARM_UP_FIRST_ROW`` up to the
        longest row (see there why every rung)."""
        static = self.static_row_tokens()
        if static:
            return [static]
        longest = self.longest_row_tokens()
        lengths = [WARM_UP_FIRST_ROW]
        while lengths[-1] * 2 < longest:
            lengths.append(lengths[-1] * 2)
        lengths.append(longest)
        sentinel = self.sentinel_row_tokens()
        return lengths if sentinel is None else [sentinel, *lengths]

    def sentinel_row_tokens(self) -> int | None:
        """The warm-up's sentinel row length (see ``SENTINEL_ROW_MAX``): the longest odd
        length up to the longest row whose own values (length, longest document of a filler
        row, block count) are none of the model's sizes. None for static rows, an
        uncompiled model, or a torch without ``dynamic_values``."""
        if (
            not self.cfg.compile_model
            or self.static_row_tokens()
            or not hasattr(torch.compiler.config, "dynamic_values")
        ):
            return None
        avoid = _model_sizes(self.model)
        top = min(self.longest_row_tokens(), SENTINEL_ROW_MAX)
        for n in range(top - (1 - top % 2), WARM_UP_FIRST_ROW, -2):
            if not set(_sentinel_values(n)) & avoid:
                return n
        return None

    def static_row_tokens(self) -> int | None:
        """The one row length of ``row_specialization = "static"`` (None when dynamic):
        the packing budget, else the planned row length (the context)."""
        cfg = self.cfg
        if cfg.row_specialization != "static":
            return None
        if cfg.sequence_packing:
            return cfg.packing_max_tokens or cfg.max_row_tokens or DEFAULT_PACKING_MAX_TOKENS
        return cfg.max_row_tokens or cfg.packing_max_tokens or DEFAULT_PACKING_MAX_TOKENS

    def _shaped(self, row: PackedRow) -> PackedRow:
        length = self.static_row_tokens()
        return row if length is None else pad_row(row, length)

    def _filler(self) -> PackedRow:
        return self._shaped(_filler_rows()[0])

    def _forward_selected(
        self,
        model: torch.nn.Module,
        row: PackedRow,
        want_entropy: bool,
        *,
        collect: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, Any]:
        """Logprobs at the positions that predict response tokens, their positions, and the
        router tap (replayed experts, mismatch counts, per-layer records when ``collect``)."""
        ids = row.input_ids.to(self.device).unsqueeze(0)
        pos = (row.targets != IGNORE).nonzero(as_tuple=True)[0].to(self.device)
        replay = mask = None
        if self.cfg.router_replay and row.routed_experts is not None:
            replay = row.routed_experts.to(self.device, non_blocking=True)
            mask = None if row.replay_mask is None else row.replay_mask.to(self.device)
        with (
            router_tap(model, replay=replay, replay_mask=mask, collect=collect) as tap,
            torch.autocast(
                self.device.type,
                dtype=self.autocast_dtype or torch.float32,
                enabled=self.autocast_dtype is not None,
            ),
        ):
            logits = model(ids, **row.model_kwargs(self.device))
        targets = row.targets.to(self.device).index_select(0, pos)
        logp, ent = _token_logprobs(logits[0], pos, targets, want_entropy)
        return logp, ent, pos, tap

    @torch.no_grad()
    def _reference_logprobs(self, row: PackedRow) -> torch.Tensor | None:
        """Logprobs under the frozen reference (None without one). Sharded, every module is
        resharded after the forward: FSDP keeps the root and the LM head gathered after a
        forward (for the backward a frozen model never runs), which would leave a full
        embedding and LM head per rank."""
        if self.ref_model is None:
            return None
        logp, _, _, _ = self._forward_selected(self.ref_model, row, False)
        if self.mesh is not None:
            reshard(self.ref_model)
        return logp

    def reference_param_bytes(self) -> int:
        """Bytes of reference-model parameters this rank holds (its shards when sharded)."""
        return 0 if self.ref_model is None else local_param_bytes(self.ref_model)

    # ------------------------------------------------------------------ public API
    @collective
    @torch.no_grad()
    def compute_logprobs(self, samples: Sequence[Sample]) -> list[torch.Tensor]:
        """Per-sample logprobs (CPU fp32) of the response tokens under the current weights.

        A model that ``scores_on_training_graph`` runs its training graph here (train mode,
        autograd on, the result detached): the same math, and no second set of compiled
        graphs to build at start-up. Others run in eval mode without autograd.
        Several ranks: each scores its share, rank 0 gathers them (others return ``[]``)."""
        was_training = self.model.training
        as_trained = self.scores_on_training_graph
        self.model.train(as_trained)
        mine, local = self.local_share(samples)
        out: list[torch.Tensor] = [torch.empty(0) for _ in local]
        try:
            for row in self._padded(self._rows(local)):
                with torch.set_grad_enabled(as_trained):
                    if row is None:
                        self._forward_selected(self.model, self._filler(), want_entropy=False)
                        continue
                    logp, _, pos, _ = self._forward_selected(self.model, row, want_entropy=False)
                logp = logp.detach()  # the autograd graph of a training-graph pass goes here
                owners = row.sample_index.to(self.device).index_select(0, pos)
                for i in row.samples:
                    out[i] = logp[owners == i].float().cpu()
        finally:
            self.model.train(was_training)
        if self.world_size == 1:
            return out
        parts: list[Any] = [None] * self.world_size if self.rank == 0 else []
        dist.gather_object(
            (mine, out), parts if self.rank == 0 else None, dst=0, group=self.control
        )
        if self.rank != 0:
            return []
        full: list[torch.Tensor] = [torch.empty(0) for _ in samples]
        for idx, vals in parts:
            for i, v in zip(idx, vals, strict=True):
                full[i] = v
        return full

    @collective
    def warm_up(self) -> int:
        """Run the log-prob forward, then a training forward and backward, on filler rows,
        so that their compiles (FlexAttention's, compiled blocks', and their backward under
        AOTAutograd) happen before the first collection (the run does it while the engines
        capture their decode graphs). Static rows: their one length. Dynamic rows: both
        passes at every length of ``warm_up_lengths``, so every specialization a row of the
        run can fall in is compiled here (a rung inside a compiled one only runs). A model
        that ``scores_on_training_graph`` has no separate log-prob pass to compile; the KL
        reference's forward is compiled beside the training pass. The backward's gradients
        are all zero and are dropped, buffers and the RNG are put back, the optimizer never
        steps: the first update starts from exactly the state it had. Returns how many rows
        ran; ``warm_up_log`` holds each row's seconds and compiled graphs."""
        from runtime.compile_settings import aot_cache_counts

        lengths = self.warm_up_lengths()
        rows = [pad_row(_filler_rows()[0], n) for n in lengths]
        was_training = self.model.training
        buffers = {name: b.detach().clone() for name, b in self.model.named_buffers()}
        devices = [self.device] if self.device.type == "cuda" else []
        self.warm_up_log = []

        def timed(kind: str, row: PackedRow, run: Callable[[], None]) -> None:
            t0, graphs0, aot0 = time.perf_counter(), compiled_graphs(), aot_cache_counts()
            run()
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            aot = aot_cache_counts()
            self.warm_up_log.append(
                {
                    "pass": kind,
                    "tokens": row.num_tokens,
                    "s": round(time.perf_counter() - t0, 3),
                    "graphs": compiled_graphs() - graphs0,
                    # AOTAutograd's cache for those graphs: a warm cache should only hit
                    "aot_cache": {k: aot[k] - aot0[k] for k in aot},
                }
            )

        def score(row: PackedRow) -> None:
            self._forward_selected(self.model, row, want_entropy=False)

        def train(row: PackedRow) -> None:
            logp, ent, _, _ = self._forward_selected(self.model, row, want_entropy=True)
            self._reference_logprobs(row)
            loss = logp.sum() * 0.0 + (ent.sum() * 0.0 if ent is not None else 0.0)
            loss.backward()

        sentinel = self.sentinel_row_tokens()
        marks = (
            contextlib.nullcontext()
            if sentinel is None
            else torch.compiler.config.patch(
                dynamic_values=",".join(map(str, _sentinel_values(sentinel)))
            )
        )
        with marks:
            try:
                if not self.scores_on_training_graph:
                    self.model.eval()  # as compute_logprobs runs
                    with torch.no_grad():
                        for row in rows:
                            timed("log-prob", row, functools.partial(score, row))
                self.model.train()  # as train_step runs (a compiled block is specialized on it)
                with torch.random.fork_rng(devices=devices):
                    for row in rows:
                        timed("training", row, functools.partial(train, row))
            finally:
                self.optimizer.zero_grad(set_to_none=True)
                with torch.no_grad():
                    for name, b in self.model.named_buffers():
                        b.copy_(buffers[name])
                self.model.train(was_training)
        by_pass: dict[str, float] = {}
        for entry in self.warm_up_log:
            by_pass[entry["pass"]] = by_pass.get(entry["pass"], 0.0) + entry["s"]
        log.info(
            "trainer warm-up: %s (rows of %s tokens)",
            ", ".join(f"{k} pass {v:.1f} s" for k, v in by_pass.items()),
            "/".join(map(str, lengths)),
        )
        return len(self.warm_up_log)

    @collective
    def train_step(self, samples: Sequence[Sample]) -> dict[str, float]:
        """One optimizer step over the global batch ``samples`` (every rank trains its share);
        returns metrics reduced over ranks."""
        t0 = time.perf_counter()
        graphs0 = compiled_graphs()
        cfg = self.cfg.grpo
        self.model.train()
        _, samples = self.local_share(samples)
        rows = self._rows(samples)
        local_tokens = float(sum(float(r.loss_mask.sum()) for r in rows))
        counts = all_reduce_scalars(
            {
                "tokens": local_tokens,
                "samples": float(len(samples)),
                "all_tokens": float(sum(r.real_tokens for r in rows)),
                "resp_tokens": float(sum(_response_count(r) for r in rows)),
            },
            self.device,
        )
        divisor = max(counts["tokens"], 1.0)
        want_aux, want_z = self.aux_loss_coef > 0, self.z_loss_coef > 0
        want_entropy = True
        self._batch_counts = self._expert_counts(rows) if want_aux else None
        sums = {k: 0.0 for k in (*METRIC_SUMS, "rollout_tokens", *DISTILL_SUMS)}
        sums.update(mismatches=0.0, decisions=0.0, aux_loss=0.0, z_loss=0.0)
        ratio_max, ratio_min = -math.inf, math.inf
        seq_tokens = 0
        for padded in self._padded(rows):
            if padded is None:  # keep in step with busier ranks; contributes nothing
                filler = self._filler()
                logp, _, _, _ = self._forward_selected(self.model, filler, False)
                self._reference_logprobs(filler)  # a sharded reference forward is collective
                (logp.sum() * 0.0).backward()
                continue
            row = padded
            logp, ent, pos, tap = self._forward_selected(
                self.model, row, want_entropy, collect=want_aux or want_z
            )
            sums["mismatches"] += tap.mismatches
            sums["decisions"] += tap.decisions
            ref_logp = self._reference_logprobs(row)

            def at(t: torch.Tensor, pos: torch.Tensor = pos) -> torch.Tensor:
                return t.to(self.device).index_select(0, pos)

            terms: dict[str, Any] = {
                "advantages": at(row.advantages),
                "mask": at(row.loss_mask),
                "old_logp": at(row.old_logprobs),
                "rollout_logp": at(row.rollout_logprobs),
                "ref_logp": ref_logp,
                "entropy": ent,
                "cfg": cfg,
                "token_divisor": divisor,
            }
            if self.cfg.distill is not None and row.teacher_logprobs is not None:
                loss, msums = opd_loss(
                    logp,
                    teacher_logp=at(row.teacher_logprobs),
                    distill=self.cfg.distill,
                    **terms,
                )
            else:
                loss, msums = grpo_loss(logp, **terms)
            if want_aux or want_z:
                loss = loss + self._router_loss(row, tap.records, counts, sums)
            loss.backward()
            seq_tokens += row.real_tokens
            for k, v in msums.items():
                if k == "ratio_max":
                    ratio_max = max(ratio_max, float(v))
                elif k == "ratio_min":
                    ratio_min = min(ratio_min, float(v))
                else:
                    sums[k] += float(v)
        grad_norm = float("nan")
        if self.mesh is not None:  # FSDP summed the gradients over the ranks
            grad_norm = clip_grad_norm_(self.params, self.cfg.clip_grad)
        elif self.cfg.clip_grad:
            all_reduce_grads_(self.params)  # a process group made outside (no-op for one rank)
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, self.cfg.clip_grad))
        else:
            all_reduce_grads_(self.params)
            grads = [p.grad.detach().norm() for p in self.params if p.grad is not None]
            grad_norm = float(torch.stack(grads).norm()) if grads else 0.0
        lr = float(self.optimizer.param_groups[0]["lr"])
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.policy_version += 1

        sums["seq_tokens"] = float(seq_tokens)
        sums["rows"] = float(len(rows))
        sums["lag_sum"] = float(sum(self.policy_version - 1 - s.policy_version for s in samples))
        sums = all_reduce_scalars(sums, self.device)
        router_metrics: dict[str, float] = {}
        if self.cfg.router_replay:
            router_metrics["replay/route_mismatch"] = sums["mismatches"] / max(
                sums["decisions"], 1.0
            )
            router_metrics["replay/decisions"] = sums["decisions"]
        if want_aux:
            router_metrics["router/aux_loss"] = sums["aux_loss"]
        if want_z:
            router_metrics["router/z_loss"] = sums["z_loss"]
        rmax = all_reduce_scalars({"v": ratio_max}, self.device, op="max")["v"]
        rmin = all_reduce_scalars({"v": ratio_min}, self.device, op="min")["v"]
        elapsed = time.perf_counter() - t0
        n = divisor
        metrics = {k: sums[k] / n for k in METRIC_SUMS if k != "logprob_abs_diff"}
        metrics["logprob_abs_diff"] = sums["logprob_abs_diff"] / max(sums["rollout_tokens"], 1.0)
        metrics.update(
            ratio_max=rmax if math.isfinite(rmax) else 1.0,
            ratio_min=rmin if math.isfinite(rmin) else 1.0,
            grad_norm=grad_norm,
            lr=lr,
            response_tokens=counts["tokens"],
            tokens=sums["seq_tokens"],
            samples=counts["samples"],
            rows=sums["rows"],
            mean_policy_lag=sums["lag_sum"] / max(counts["samples"], 1.0),
            step=float(self.step),
            policy_version=float(self.policy_version),
            step_time_s=elapsed,
            tokens_per_s=sums["seq_tokens"] / max(elapsed, 1e-9),
            # graphs dynamo compiled during this update (0 once the warm-up met every variant)
            new_compiled_graphs=float(compiled_graphs() - graphs0),
        )
        metrics.update(router_metrics)
        if self.cfg.distill is not None:  # the student's KL to the teacher, as trained on
            opd_tokens = max(sums["opd_tokens"], 1.0)
            metrics["opd_kl"] = sums["opd_kl"] / opd_tokens
            metrics["opd_k3"] = sums["opd_k3"] / opd_tokens
            metrics["opd_tokens"] = sums["opd_tokens"]
        metrics["trainer/world_size"] = float(self.world_size)
        metrics["trainer/expert_parallel"] = float(self.cfg.expert_parallel)
        return metrics

    def _router_mask(self, row: PackedRow, reduction: str) -> torch.Tensor:
        """The tokens a router loss averages over: all of the row's, or its responses'."""
        if reduction == "token":
            mask = torch.ones(row.num_tokens, dtype=torch.bool, device=self.device)
            mask[row.real_tokens :] = False  # static padding is not routed work
            return mask
        resp = row.response_mask if row.response_mask is not None else row.targets != IGNORE
        return resp.to(self.device)

    @torch.no_grad()
    def _expert_counts(self, rows: list[PackedRow]) -> torch.Tensor:
        """The global batch's executed expert assignments per MoE layer (every row of every
        rank, replayed where replaying), for the batch-level load-balancing loss: a forward
        without gradient before the update, run only when that loss has a weight."""
        total = torch.zeros(
            len(self.routers), int(self.routers[0].num_experts), dtype=torch.float64
        )
        total = total.to(self.device)
        for row in self._padded(rows):
            live = row is not None
            row = row if row is not None else self._filler()
            _, _, _, tap = self._forward_selected(self.model, row, False, collect=True)
            if live:
                mask = self._router_mask(row, self.cfg.router_aux_loss_reduction)
                total += expert_counts(tap.records, self.routers, mask).to(total.device)
        all_reduce_sum_([total])
        return total

    def _router_loss(
        self,
        row: PackedRow,
        records: Any,
        counts: dict[str, float],
        sums: dict[str, float],
    ) -> torch.Tensor:
        """This row's share of the global batch's router losses (weighted): summed over rows
        and ranks they are the batch's load-balancing loss and token-mean z-loss, whatever
        the packing and split (see ``runtime.trainer.replay``)."""
        cfg = self.cfg

        def tokens(reduction: str) -> float:
            key = "all_tokens" if reduction == "token" else "resp_tokens"
            return max(counts[key], 1.0)

        total = torch.zeros((), device=self.device)
        if self.aux_loss_coef > 0:
            assert self._batch_counts is not None
            aux = batch_load_balancing_loss(
                records,
                self.routers,
                self._router_mask(row, cfg.router_aux_loss_reduction),
                self._batch_counts,
                tokens(cfg.router_aux_loss_reduction),
            )
            sums["aux_loss"] += float(aux.detach())
            total = total + self.aux_loss_coef * aux
        if self.z_loss_coef > 0:
            mask = self._router_mask(row, cfg.router_z_loss_reduction)
            _, z = router_losses(
                records,
                self.routers,
                mask,
                mask,
                aux_reduction="token",
                z_reduction="token",
                want_aux=False,
                want_z=True,
            )
            assert z is not None
            w = float(mask.sum()) / tokens(cfg.router_z_loss_reduction)  # row mean -> batch mean
            sums["z_loss"] += float(z.detach()) * w
            total = total + self.z_loss_coef * w * z
        return total

    def state_dict_for_publication(
        self, *, dtype: torch.dtype | None = None, device: str | torch.device = "cpu"
    ) -> PublishedState:
        """Current weights under OLMo-core names (what ``load_model``/engines consume), in
        ``dtype`` on ``device``, gathered when read (``runtime.trainer.publish``): walked
        in buckets a sharded trainer holds one bucket of full tensors at a time. With one
        rank and neither cast nor move, the values are the parameters themselves."""
        return PublishedState(self, self.model.state_dict(), dtype=dtype, device=device)

    @collective
    @torch.no_grad()
    def gather_tensors(
        self, names: Sequence[str], *, dtype: torch.dtype | None = None, device: Any = "cpu"
    ) -> list[torch.Tensor]:
        """Full values of the state entries ``names`` (a collective on sharded ones).

        A rank that only joins rank 0's announced gather keeps nothing (and never moves a
        tensor to rank 0's ``device``); called by every rank itself (inside another op),
        each rank gets the values."""
        if self._state_refs is None:  # parameters are updated in place: one dict serves
            self._state_refs = self.model.state_dict()
        state = self._state_refs
        joining = self.rank != 0 and self._depth == 1
        out = []
        for name in names:
            t = full_tensor(state[name]).detach()
            if joining:
                continue
            if dtype is not None and t.is_floating_point():
                t = t.to(dtype)
            out.append(t.to(device))
        return out

    @collective
    def publication_checksum(self, *, dtype: torch.dtype | None = None) -> str:
        return state_checksum(self.state_dict_for_publication(dtype=dtype))

    def checkpoint_state(self) -> dict[str, Any]:
        """Optimizer (unsharded trainer only), scheduler and counters."""
        state: dict[str, Any] = {
            "scheduler": self.scheduler.state_dict(),
            "step": self.step,
            "policy_version": self.policy_version,
        }
        if self.mesh is None:
            state["optimizer"] = self.optimizer.state_dict()
        return state

    def save_sharded(self, path: Any) -> None:
        """Every rank writes its shards of the model and optimizer (OLMo-core, DCP)."""
        from olmo_core.distributed.checkpoint import save_model_and_optim_state

        save_model_and_optim_state(str(path), self.model, self.optimizer, save_overwrite=True)

    def load_sharded(self, path: Any) -> None:
        from olmo_core.distributed.checkpoint import load_model_and_optim_state

        load_model_and_optim_state(str(path), self.model, self.optimizer)

    @collective
    def save_checkpoint(self, manager: Any, step: int, **kwargs: Any) -> Any:
        """``manager.save`` on every rank (a :class:`runtime.checkpoints.CheckpointManager`)."""
        return manager.save(step, self, **kwargs)

    @collective
    def restore_checkpoint(self, manager: Any, **kwargs: Any) -> Any:
        """``manager.restore`` on every rank; the data (cursor, extra) is rank 0's."""
        return manager.restore(self, **kwargs)

    def load_checkpoint_state(
        self,
        model_state: dict[str, torch.Tensor],
        trainer_state: dict[str, Any],
        sharded: Any = None,
    ) -> None:
        """Restore weights (OLMo-core names, or the ``sharded`` directory) and
        optimizer/scheduler/counters."""
        if sharded is not None:
            self.load_sharded(sharded)
        else:
            target = self.model
            own = {k.replace("._checkpoint_wrapped_module", ""): k for k in target.state_dict()}
            mapped = {own.get(k, k): v for k, v in model_state.items()}
            target.load_state_dict(mapped, strict=True)
            self.optimizer.load_state_dict(trainer_state["optimizer"])
        self.scheduler.load_state_dict(trainer_state["scheduler"])
        self.step = int(trainer_state["step"])
        self.policy_version = int(trainer_state["policy_version"])

    def close(self) -> None:
        """Rank 0 releases the followers (they close too), then the group goes."""
        if self.world_size > 1 and self.rank == 0 and self.control is not None:
            try:
                dist.broadcast_object_list([("close", (), {})], src=0, group=self.control)
            except Exception as exc:  # a rank already gone: nothing to release
                log.warning("trainer: could not release the other ranks: %s", exc)
        self.control = None
        shutdown_distributed(self.dist)
        if self.after_close is not None:
            self.after_close()
            self.after_close = None
