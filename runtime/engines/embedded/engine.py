"""The embedded engine's scheduler: continuous batching over ``InferenceModel``.

One background thread owns the model and the KV cache. Between decode steps it handles
control operations (aborts, weight updates), admits every waiting request that fits
``max_running_requests`` slots and the reserved token budget ``max_total_tokens`` (prompt +
max_new_tokens per request) and prefills them together (ragged prompts in one forward,
chunked by ``prefill_tokens`` padded tokens), then decodes one token for every running
request in a single batched forward. Sampled tokens stay on the device between steps; one
host transfer per step brings back the whole batch's tokens and logprobs.

Weight updates (``update_weights``): new requests are held in the queue, running requests
finish on the old weights (or are aborted with ``abort_all_requests``), then the weights
are loaded in place and the queue resumes. This matches SGLang's writer-lock behaviour;
``num_paused_requests`` reports how many requests were held.

``pause_generation`` / ``continue_generation`` follow SGLang's modes: ``retract`` moves the
running requests back to the head of the queue (their sampled tokens and logprobs kept, their
KV dropped), so a weight update applies at once and, on continue, each is prefilled again
over prompt + tokens so far under the new weights and decodes on (refresh publication);
``in_place`` only stops decoding; ``abort`` aborts everything. Every sampled token records
the weight version it was sampled under (``meta_info.weight_versions`` spans, as SGLang).

Admission gathering: a burst of arrivals (a collection's groups, each its own HTTP request)
is held until arrivals have paused ``admission_quiet_s`` (at most ``admission_window_s``
after the first), then admitted in one round; running requests decode on meanwhile. A
group of identical prompts shares one prefill row, never split across prefill chunks.

Overlap schedule (SGLang's, on wherever sampling runs inside the decode step; off with
``overlap_schedule=False`` / ``--disable-overlap-schedule``): the fused step advances its own
inputs on the device, so step N+1 is launched before step N's tokens are read, and the
host's bookkeeping of step N (token transfer, stop checks, retirement) runs while N+1 does.
A request that stopped at step N gets one extra token at N+1 that is thrown away (never
returned, never counted). Its extra K/V row lands at position ``prompt + max_new - 1`` at
most, inside its own slot (``max_new`` is capped by the context length), past the length
the prefix cache takes from it. Anything that changes the running set or the weights (an
admission, abort, pause, flush, weight update, warm-up) first reads the step in flight.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from runtime.models.gdn_cpu import has_gated_delta_net

from .forward import (
    SAMPLER_MODES,
    InferenceModel,
    UnsupportedModel,
    kv_pool_tokens,
    prefix_cache_tokens,
)
from .forward import kv_cache_dtype as kv_cache_dtype_of
from .radix import RadixCache, RadixNode
from .sampling import BadRequest, SamplingBatch, SamplingParams, sample_batch, uniforms

log = logging.getLogger(__name__)

Result = dict[str, Any]


@dataclass(eq=False)
class GenRequest:
    """One generation; ``on_done`` receives the SGLang-shaped result dict (any thread)."""

    rid: str
    prompt_ids: list[int]
    params: SamplingParams
    on_done: Callable[[Result], None]
    return_logprob: bool = False
    logprob_start_len: int = -1
    return_routed_experts: bool = False
    seed: int = 0
    output_ids: list[int] = field(default_factory=list)
    output_logprobs: list[float] = field(default_factory=list)
    output_versions: list[str] = field(default_factory=list)  # weight version per token
    input_logprobs: list[float | None] = field(default_factory=list)
    routed: list[torch.Tensor] = field(default_factory=list)
    finish: dict[str, Any] | None = None
    slot: int = -1
    max_new: int = 0
    abort_requested: bool = False
    created: float = field(default_factory=time.monotonic)
    cached_tokens: int = 0  # prompt tokens served from the prefix cache (meta_info)
    prefix_node: RadixNode | None = None  # the prefix-cache path this request pins
    kv_generation: int = -1  # the prefix cache's generation its slot's K/V belongs to
    shared: SharedPrompt | None = None  # the prompt K/V it reads from a group's slot

    @property
    def wants_input_logprobs(self) -> bool:
        """Scoring (SGLang's ``max_new_tokens = 0`` with ``logprob_start_len``): the
        prompt is prefilled for its log-probs even when nothing is generated."""
        return self.return_logprob and self.logprob_start_len >= 0

    @property
    def reserved(self) -> int:
        return len(self.prompt_ids) + self.max_new

    @property
    def cached_len(self) -> int:
        return len(self.prompt_ids) + max(0, len(self.output_ids) - 1)

    @property
    def prefill_ids(self) -> list[int]:
        """What a (re)admission prefills: the prompt, plus the tokens sampled before a
        retraction (their KV is recomputed under the weights loaded meanwhile)."""
        return self.prompt_ids + self.output_ids if self.output_ids else self.prompt_ids


@dataclass(eq=False)
class SharedPrompt:
    """A group's prompt K/V, held once in its holder's slot and read there by every
    running member (the samples of one GRPO prompt): the decode step reads the prompt
    once for the group, not once per sample. When the holder finishes first, the prompt
    is copied to a running member's slot, which holds it from then on."""

    length: int  # entries 0..length-1 of each member's cache row live in the holder's slot
    holder: GenRequest
    members: list[GenRequest]


@dataclass(eq=False)
class _DecodeBatch:
    """Device-side inputs of the next decode step for the running set (slot order).

    Rebuilt from the requests when the running set changes; otherwise advanced on the
    device (tokens = last sampled, positions/counters + 1) without host round trips.
    """

    tokens: torch.Tensor
    positions: torch.Tensor
    counters: torch.Tensor
    sampling: SamplingBatch
    kv_len: int
    u_table: torch.Tensor | None = None  # (B, U_HORIZON) uniforms for the next steps
    u_col: int = 0

    def next_uniforms(self) -> torch.Tensor:
        """This step's uniforms: one hash launch sequence every ``U_HORIZON`` steps."""
        if self.u_table is None or self.u_col >= self.u_table.shape[1]:
            ahead = torch.arange(U_HORIZON, device=self.counters.device)
            cnt = self.counters.unsqueeze(1) + ahead.unsqueeze(0)
            self.u_table = uniforms(self.sampling.seeds.unsqueeze(1).expand_as(cnt), cnt)
            self.u_col = 0
        u = self.u_table[:, self.u_col]
        self.u_col += 1
        return u


U_HORIZON = 64


@dataclass
class _WeightUpdate:
    path: str
    version: str | None
    abort_all: bool
    done: threading.Event = field(default_factory=threading.Event)
    result: dict[str, Any] = field(default_factory=dict)
    paused: int = 0
    tensors: list[tuple[str, torch.Tensor]] | None = None  # set: a tensor update, not disk
    final: bool = True  # False: more chunks of this version follow; admission stays held


PAUSE_MODES = ("abort", "retract", "in_place")


@dataclass
class _Pause:
    """A pause (``mode``) or continue (``mode`` None) the scheduler applies between steps."""

    mode: str | None
    done: threading.Event = field(default_factory=threading.Event)


@dataclass
class _WarmUp:
    """Capture every decode graph the given sampling modes can meet, between steps."""

    modes: tuple[str, ...]
    max_kv_len: int | None
    done: threading.Event = field(default_factory=threading.Event)
    result: dict[str, Any] = field(default_factory=dict)


# A chunked tensor publication holds admission between chunks (so no request runs on
# half-updated weights); a sender that dies mid-way releases it after this many seconds.
TENSOR_HOLD_S = 60.0


def state_checksum(state: dict[str, torch.Tensor]) -> str:
    """The weight checksum used by the startup audit (shared with the trainer)."""
    try:
        from runtime.models.weights import state_checksum as shared
    except ImportError:  # the models part is optional for the serving side
        pass
    else:
        return str(shared(state))
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().contiguous().cpu()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}\n".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return "sha256:" + h.hexdigest()


def load_snapshot(path: str | Path) -> dict[str, torch.Tensor]:
    """A weight snapshot under OLMo-core names: an HF-layout directory (``config.json``, HF
    names, as SGLang loads it) is converted with OLMo-core's converter; else read as is."""
    p = Path(path)
    if p.is_dir() and (p / "config.json").exists():
        import json

        from runtime.models.hf import load_hf_state

        return load_hf_state(p, json.loads((p / "config.json").read_text()))
    return load_safetensors_dir(p)


def load_safetensors_dir(path: str | Path) -> dict[str, torch.Tensor]:
    """Read every ``*.safetensors`` file of a directory (or one file) into one state dict."""
    from safetensors.torch import load_file

    p = Path(path)
    files = [p] if p.is_file() else sorted(p.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no .safetensors files in {p}")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        for name, tensor in load_file(str(f)).items():
            if name in state:
                raise ValueError(f"tensor {name!r} appears in more than one file")
            state[name] = tensor
    return state


@dataclass(eq=False)
class _InFlight:
    """A fused decode step launched but not read yet: the requests of its rows (in the row
    order of its launch) and its tokens and log-probs (and routed experts), copied out of
    the step's output buffers (the next step overwrites them) toward the host."""

    reqs: list[GenRequest]
    both: torch.Tensor  # (2, rows) float64: tokens, log-probs
    experts: torch.Tensor | None  # (rows, L, k) int32, when a row returns routed experts
    ready: torch.cuda.Event | None = None  # recorded after the copies to the host (GPU)


def _record_routed(running: list[GenRequest], experts: torch.Tensor | None) -> None:
    """Append each running request's row of this decode step's routed experts (when asked)."""
    if experts is not None and any(r.return_routed_experts for r in running):
        ex = experts.to(torch.int32).cpu()
        for i, r in enumerate(running):
            if r.return_routed_experts:
                r.routed.append(ex[i : i + 1])


class Engine:
    """Owns the model, the scheduler thread and the request queue."""

    def __init__(
        self,
        loaded: Any,
        *,
        model_path: str,
        device: str = "cpu",
        max_running_requests: int = 16,
        max_total_tokens: int | None = None,
        context_length: int = 2048,
        seed: int = 0,
        weight_version: str = "0",
        cuda_graph: bool | None = None,
        prefill_tokens: int = 16384,
        graph_kv_step: int = 256,
        compile_decode: bool | None = None,
        compile_prefill: bool | None = None,
        profile: bool = False,
        fused_sampling: bool | None = None,
        max_mamba_cache_size: int | None = None,
        mem_fraction_static: float | None = None,
        cuda_graph_max_bs: int | None = None,
        radix_cache: bool = True,
        overlap_schedule: bool = True,
        decode_attention: str | None = None,  # None: default_decode_attention(device)
        admission_quiet_s: float = 0.005,
        admission_window_s: float = 0.05,
        fuse_projections: bool = True,
        kv_cache_dtype: str = "auto",
        on_weights_failed: Callable[[str], None] | None = None,
    ):
        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        self.config = loaded.config
        self.model_path = model_path
        self.device = torch.device(device)
        if self.device.type == "cuda":  # the audit's kernel, compiled while the engine starts
            from runtime.publication.checksum import warm_up_kernel

            warm_up_kernel(self.device)
        self.context_length = context_length
        self.seed = seed
        # this server's start-up: [{name, seconds}] (its __main__ fills it; /warm_up returns it)
        self.startup_phases: list[dict[str, Any]] = []
        self.weight_version = weight_version
        self.vocab_size = int(self.model.embeddings.weight.shape[0])
        # the cache's storage type: an 8-bit cache holds twice the tokens in the same pool
        self.kv_cache_dtype = kv_cache_dtype
        kv_dtype = kv_cache_dtype_of(kv_cache_dtype, self.model.embeddings.weight.dtype)
        # the KV token pool: max_total_tokens, and on a GPU mem_fraction_static of its memory
        # (see kv_pool_tokens); the cache holds as many context-length slots as fit in it
        probe = InferenceModel(
            self.model,
            max_slots=1,
            capacity=context_length,
            device=device,
            fuse_projections=False,
            kv_dtype=kv_dtype,
        )
        per_token, cache_len = probe.kv_bytes_per_token(), probe.cache_len
        del probe
        total = used = None
        if mem_fraction_static is not None and self.device.type == "cuda":
            # this process's own memory, not the device's: a trainer starting beside the
            # engine on the same GPU leaves the pool as it would be alone; blocks freed
            # while loading (a checkpoint's copies) go back first, so they do not count
            torch.cuda.empty_cache()
            _, total = torch.cuda.mem_get_info(self.device)
            used = torch.cuda.memory_reserved(self.device)
        pool = kv_pool_tokens(
            max_total_tokens,
            bytes_per_token=per_token,
            mem_fraction_static=mem_fraction_static,
            total_bytes=total,
            used_bytes=used,
        )
        slots = (
            max_running_requests
            if pool is None
            else max(1, min(max_running_requests, pool // cache_len))
        )
        if max_mamba_cache_size is not None and has_gated_delta_net(self.model):
            # every running sequence holds one recurrent state: the states bound admission
            slots = max(1, min(slots, int(max_mamba_cache_size)))
        self.max_running = slots
        self.max_total_tokens = pool if pool is not None else slots * context_length
        self.mem_fraction_static = mem_fraction_static
        self.radix_cache = radix_cache
        self.im = InferenceModel(
            self.model,
            max_slots=slots,
            capacity=context_length,
            device=device,
            decode_attention=decode_attention,
            fuse_projections=fuse_projections,
            kv_dtype=kv_dtype,
        )
        self.prefix = self._make_prefix_cache(per_token)
        # chunked prefill: padded prompt tokens per prefill forward (<= 0: one forward)
        self.prefill_tokens = int(prefill_tokens) if int(prefill_tokens) > 0 else 2**62
        self.profile = profile  # sync inside steps to split forward / sampling time
        # on a GPU the compiled, graph-captured decode step is the default (None: by device)
        on_gpu = self.device.type == "cuda"
        cuda_graph = on_gpu if cuda_graph is None else cuda_graph
        compile_decode = on_gpu if compile_decode is None else compile_decode
        self.cuda_graph, self.compile_decode = cuda_graph, compile_decode
        if compile_decode:
            try:
                self.im.enable_compile()
            except Exception as exc:  # torch.compile unavailable: stay eager
                log.warning("torch.compile disabled: %s", exc)
        # the prefill's blocks compiled by region: the default wherever the decode step is
        # compiled on a GPU (None; 1.56-2.03x the eager prefill on one H100); on a CPU only
        # when asked (1.03-1.32x at 16 x 128 tokens there, slower at a few short prompts;
        # docs/benchmarks.md, round fifteen and the CPU section before it)
        if compile_prefill is None:
            compile_prefill = on_gpu and bool(compile_decode)
        self.compile_prefill = compile_prefill
        if compile_prefill:
            try:
                self.im.enable_compile_prefill()
            except Exception as exc:  # torch.compile unavailable: stay eager
                log.warning("torch.compile of the prefill disabled: %s", exc)
        if cuda_graph:
            try:
                self.im.enable_cuda_graphs(kv_step=graph_kv_step, max_bs=cuda_graph_max_bs)
            except UnsupportedModel as exc:
                log.warning("CUDA graphs disabled: %s", exc)
                cuda_graph = self.cuda_graph = False
        # sampling inside the (compiled, captured) decode step, the default wherever decode
        # runs as CUDA graphs (None): one graph replay per step, 1.11-1.12x the step with the
        # sampler after the graph at batch 64 and 256 on one H200 (docs/benchmarks.md, GPU
        # round four); without graphs the sampler stays a separate step
        self.fused_sampling = bool(cuda_graph) if fused_sampling is None else fused_sampling
        # launch decode step N+1 before reading step N's tokens (the fused step only: its
        # inputs advance on the device)
        self.overlap_schedule = bool(overlap_schedule) and self.fused_sampling
        self._inflight: _InFlight | None = None
        self._batch: _DecodeBatch | None = None
        self._eos = getattr(self.tokenizer, "eos_token_id", None)
        self.timings = {
            "prefill_s": 0.0,
            "prefill_wait_s": 0.0,  # of prefill_s: waiting for the device's first tokens
            "decode_s": 0.0,
            "forward_s": 0.0,
            "sample_s": 0.0,
            # the radix tree's host time inside prefill and decode: matching and copying
            # cached prefixes in, copying prefilled and finished K/V out (it holds copies)
            "prefix_cache_s": 0.0,
        }
        self._lock = threading.Condition()
        # weights still being read (``load_model(defer_weights=True)``): the model holds
        # zeros, on which the decode graphs compile and capture the same; the scheduler
        # thread copies the weights in once read, and meanwhile admits no request and
        # applies no update (a checksum waits). A failed read is kept and reported to every
        # later caller (and to ``on_weights_failed``: the server process exits).
        self._deferred = loaded if getattr(loaded, "pending", None) is not None else None
        self._weights_in = threading.Event()
        if self._deferred is None:
            self._weights_in.set()
        self.weights_error: str | None = None
        self._on_weights_failed = on_weights_failed
        self.weights_load: dict[str, float] = {}  # deferred weights: wait and read seconds
        if self._deferred is not None:  # once read, the idle scheduler copies them in
            self._deferred.pending.when_done(self._wake)
        self._waiting: deque[GenRequest] = deque()
        self._running: list[GenRequest] = []
        self._aborts: list[tuple[str | None, bool]] = []
        self._updates: list[_WeightUpdate] = []
        self._pauses: list[_Pause] = []
        self._warmups: list[_WarmUp] = []
        self.pause_mode: str | None = None  # set while paused (SGLang's pause modes)
        self._tensor_hold_until: float | None = None
        self._stop = False
        self._counter = itertools.count()
        self._thread: threading.Thread | None = None
        self.stats = {
            "num_requests_total": 0,
            "num_finished": 0,
            "num_aborted": 0,
            "num_prompt_tokens": 0,
            "num_generated_tokens": 0,
            "num_decode_steps": 0,
            "num_weight_updates": 0,
            "num_retracted": 0,
            "num_cached_prompt_tokens": 0,  # prompt tokens served from the prefix cache
            "num_cache_flushes": 0,
            "num_overlapped_steps": 0,  # decode steps launched before the previous was read
            "num_discarded_tokens": 0,  # their tokens for requests that stopped meanwhile
            "num_admissions": 0,  # admission rounds (each: a drain, prefill forwards, a sync)
            # samples that read their prompt's K/V from their group's slot (not a copy)
            "num_shared_prompt_rows": 0,
        }
        self._flushes: list[threading.Event] = []
        # admission gathering: a burst of arrivals (a collection's groups, each its own
        # HTTP request) is admitted once it has been quiet for ``admission_quiet_s`` or its
        # first request has waited ``admission_window_s``, so it costs one admission round
        # (a drain, a prefill forward, a host sync) rather than one per early arrival
        self.admission_quiet_s = max(0.0, float(admission_quiet_s))
        self.admission_window_s = max(0.0, float(admission_window_s))
        self._first_arrival = self._last_arrival = 0.0

    def _make_prefix_cache(self, per_token: int) -> RadixCache | None:
        """The radix tree over finished and running sequences' K/V (attention-only models).

        It holds copies (slots are contiguous rows, not per-token pages), at most
        ``max_total_tokens`` tokens; on a GPU also what ``mem_fraction_static`` of the
        device leaves after this engine's weights and slots (without it, half the memory the
        engine left unused), counting its own memory so that a trainer starting beside it
        does not change the budget (see ``prefix_cache_tokens``). A recurrent (GatedDeltaNet) state
        cannot resume from an arbitrary prefix, so hybrid models keep identical-prompt
        sharing only.
        """
        if not self.radix_cache:
            return None
        if self.im.recurrent is not None:
            log.info(
                "prefix cache: recurrent (GatedDeltaNet) layers cannot resume from a cached "
                "prefix; only requests with identical prompts share one prefill"
            )
            return None
        total = reserved = None
        if self.device.type == "cuda":
            _, total = torch.cuda.mem_get_info(self.device)
            reserved = torch.cuda.memory_reserved(self.device)
        budget = prefix_cache_tokens(
            self.max_total_tokens,
            bytes_per_token=per_token,
            reserved_bytes=reserved,
            total_bytes=total,
            mem_fraction_static=self.mem_fraction_static,
        )
        log.info("prefix cache: at most %d tokens", budget)
        return RadixCache(budget)

    @property
    def prefix_cache_tokens(self) -> int:
        return self.prefix.total_tokens if self.prefix is not None else 0

    def flush_cache(self, timeout: float = 60.0) -> bool:
        """Drop the prefix cache between steps (SGLang's ``/flush_cache``); True once done."""
        done = threading.Event()
        with self._lock:
            self._flushes.append(done)
            self._lock.notify_all()
        return done.wait(timeout)

    def _flush_prefix(self) -> None:
        """Forget every cached prefix: after a weight load their K/V is stale."""
        self.stats["num_cache_flushes"] += 1
        if self.prefix is not None:
            self.prefix.reset()

    # ---- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="engine-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._lock:
            self._stop = True
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # ---- API (any thread) ---------------------------------------------------------------

    def make_request(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        on_done: Callable[[Result], None],
        *,
        rid: str | None = None,
        return_logprob: bool = False,
        logprob_start_len: int = -1,
        return_routed_experts: bool = False,
    ) -> GenRequest:
        """Validate and build a request (raises ``BadRequest``)."""
        if not prompt_ids:
            raise BadRequest("the input is empty")
        if any(not 0 <= int(t) < self.vocab_size for t in prompt_ids):
            raise BadRequest(f"input_ids must lie in [0, {self.vocab_size})")
        if len(prompt_ids) >= self.context_length:
            raise BadRequest(
                f"the input ({len(prompt_ids)} tokens) is longer than the model's context "
                f"length ({self.context_length} tokens)"
            )
        n = next(self._counter)
        seed = params.sampling_seed
        if seed is None:
            seed = (self.seed * 1_000_003 + n) % (2**63)
        req = GenRequest(
            rid=rid or f"req-{n}",
            prompt_ids=[int(t) for t in prompt_ids],
            params=params,
            on_done=on_done,
            return_logprob=return_logprob,
            logprob_start_len=logprob_start_len,
            return_routed_experts=return_routed_experts,
            seed=int(seed) % (2**63),
        )
        req.max_new = min(params.max_new_tokens, self.context_length - len(prompt_ids))
        return req

    def submit(self, req: GenRequest) -> None:
        self.submit_many([req])

    def submit_many(self, reqs: Sequence[GenRequest]) -> None:
        """Queue requests together: the scheduler sees all of them in one admission, so
        they share one prefill round (and a group's identical prompts one forward row).
        Bursts submitted in pieces are gathered too (``admission_wait``), within the
        admission window; each round costs a drain, a prefill forward and a host sync
        (``num_admissions`` counts them)."""
        now = time.monotonic()
        with self._lock:
            if not self._waiting:
                self._first_arrival = now
            self._last_arrival = now
            self.stats["num_requests_total"] += len(reqs)
            self._waiting.extend(reqs)
            self._lock.notify_all()

    def admission_wait(self, now: float) -> float:
        """Seconds to hold the waiting requests before admitting them (0: admit now): until
        arrivals have been quiet for ``admission_quiet_s``, at most ``admission_window_s``
        after the first of them (the caller holds the lock)."""
        if not self._waiting:
            return 0.0
        quiet = self._last_arrival + self.admission_quiet_s - now
        window = self._first_arrival + self.admission_window_s - now
        return max(0.0, min(quiet, window))

    def abort(self, rid: str | None, abort_all: bool = False) -> None:
        with self._lock:
            self._aborts.append((rid, abort_all))
            self._lock.notify_all()

    def update_weights(
        self, path: str, *, version: str | None, abort_all: bool, timeout: float = 600.0
    ) -> dict[str, Any]:
        """Block until the scheduler applied (or rejected) the update."""
        upd = _WeightUpdate(path=path, version=version, abort_all=abort_all)
        with self._lock:
            upd.paused = len(self._waiting)
            self._updates.append(upd)
            self._lock.notify_all()
        if not upd.done.wait(timeout):
            return {"success": False, "message": "timed out waiting for running requests"}
        return upd.result

    def update_weights_from_tensors(
        self,
        named: list[tuple[str, torch.Tensor]],
        *,
        version: str | None,
        abort_all: bool = False,
        final: bool = True,
        timeout: float = 600.0,
    ) -> dict[str, Any]:
        """Copy ``named`` into the parameters between decode steps; block until done.

        The same pause protocol as ``update_weights``; the copy casts on the device. With
        ``final=False`` admission stays paused until the final chunk (or ``TENSOR_HOLD_S``).
        The engine drops its references to ``named`` before it answers.
        """
        upd = _WeightUpdate(
            path="<tensors>", version=version, abort_all=abort_all, tensors=named, final=final
        )
        with self._lock:
            upd.paused = len(self._waiting)
            self._updates.append(upd)
            self._lock.notify_all()
        if not upd.done.wait(timeout):
            return {"success": False, "message": "timed out waiting for running requests"}
        return upd.result

    def pause_generation(self, mode: str, timeout: float = 600.0) -> bool:
        """Pause as SGLang does (``abort``, ``retract``, ``in_place``); True once applied.

        While paused nothing is admitted or decoded and weight updates apply at once.
        """
        if mode not in PAUSE_MODES:
            raise BadRequest(f"mode must be one of {PAUSE_MODES}, got {mode!r}")
        return self._control(_Pause(mode), timeout)

    def continue_generation(self, timeout: float = 600.0) -> bool:
        """Resume admission and decoding (retracted requests are prefilled again first)."""
        return self._control(_Pause(None), timeout)

    def warm_up(
        self, params: list[SamplingParams], max_kv_len: int | None = None, timeout: float = 1800.0
    ) -> dict[str, Any]:
        """Compile and capture, now, every decode graph requests with ``params`` can meet
        (each batch bucket x each KV-length bucket up to ``max_kv_len`` x each sampling
        mode), so no capture happens mid-run. Runs when no request is running."""
        wanted = {SamplingBatch.build([p], [0], self.device).mode for p in params} or {"sample"}
        # the widest sampler serves the narrower ones (greedy rows in the sampled step):
        # one compile instead of one per mode
        modes = (max(wanted, key=SAMPLER_MODES.index),)
        op = _WarmUp(modes, max_kv_len)
        with self._lock:
            self._warmups.append(op)
            self._lock.notify_all()
        if not op.done.wait(timeout):
            return {"success": False, "message": "timed out warming up the decode graphs"}
        return op.result

    def _apply_warmups(self) -> None:
        """Only between collections: a capture's warm-up steps write K/V in slots 0..B-1."""
        self._drain()
        if self._running:
            return
        with self._lock:
            ops, self._warmups = self._warmups, []
        for op in ops:
            t0 = time.perf_counter()
            try:
                # the prefill regions first: a run's first admission must not compile
                prefill_warmed = self.im.warm_prefill()
                prefill_s = time.perf_counter() - t0
                if self.fused_sampling:
                    graphs = self.im.warm_step_graphs(op.modes, op.max_kv_len)
                else:
                    graphs = self.im.warm_graphs(op.max_kv_len)
                op.result = {
                    "success": True,
                    "modes": list(op.modes),
                    "graphs": graphs,
                    "compiled_prefill": bool(prefill_warmed),
                    "prefill_compile_s": round(prefill_s, 3) if prefill_warmed else 0.0,
                    "seconds": round(time.perf_counter() - t0, 3),
                }
            except Exception as exc:
                log.exception("decode graph warm-up failed")
                op.result = {"success": False, "message": f"warm-up failed: {exc}"}
            # captured on zeros (when the weights were still out): they go in now, before
            # the run's first request
            self._fill_weights()
            op.result.update(self.weights_load)
            if self.weights_error is not None:
                op.result = {
                    "success": False,
                    "message": f"model weights failed to load: {self.weights_error}",
                }
            op.done.set()

    def _control(self, op: _Pause, timeout: float) -> bool:
        with self._lock:
            self._pauses.append(op)
            self._lock.notify_all()
        return op.done.wait(timeout)

    def load(self) -> dict[str, int]:
        with self._lock:
            return {"num_running_reqs": len(self._running), "num_waiting_reqs": len(self._waiting)}

    def checksum(self, kind: str = "sha256") -> str:
        """``sha256`` (startup audit, CPU) or ``wsum64`` (on the device, after publication)."""
        self.wait_weights()
        with self._lock:
            if kind == "wsum64":
                from runtime.publication.checksum import device_checksum

                return device_checksum(self.model.state_dict())
            return state_checksum(self.model.state_dict())

    @property
    def weights_pending(self) -> bool:
        """True while deferred weights are still to be copied in (the model holds zeros)."""
        return not self._weights_in.is_set()

    def wait_weights(self, timeout: float = 1800.0) -> None:
        """Block until deferred weights are in the model (the scheduler copies them);
        raise ``RuntimeError`` with the cause if their read failed."""
        if not self._weights_in.wait(timeout):
            raise RuntimeError(f"the model's weights were not read within {timeout:.0f}s")
        if self.weights_error is not None:
            raise RuntimeError(self.weights_error)

    # ---- scheduler thread ----------------------------------------------------------------

    def _fill_weights(self) -> None:
        """Copy deferred weights into the model, in place (the fused projections and captured
        graphs keep their tensors); ``weights_load``: the seconds this waited and copied,
        and the read's own."""
        loaded, self._deferred = self._deferred, None
        if loaded is None:
            return
        pending = loaded.pending
        t0 = time.perf_counter()
        try:
            loaded.fill_weights()
            self._check_fused()
            _sync(self.device)
        except Exception as exc:
            self.weights_error = f"{type(exc).__name__}: {exc}"
            log.error("the model's weights failed to load: %s", self.weights_error)
            self._weights_in.set()
            if self._on_weights_failed is not None:
                self._on_weights_failed(self.weights_error)
            return
        self._weights_in.set()
        wait_s, read_s = time.perf_counter() - t0, float(getattr(pending, "read_s", 0.0) or 0.0)
        self.weights_load = {"weights_wait_s": round(wait_s, 3), "weights_read_s": round(read_s, 3)}
        # after "KV pool" in this server's start-up: the read ran beside what came since
        self.startup_phases.append(
            {
                "name": f"weights (read {read_s:.1f}s beside the above), wait and copy",
                "seconds": round(wait_s, 3),
            }
        )

    def _wake(self) -> None:
        with self._lock:
            self._lock.notify_all()

    def _needs_weights(self) -> bool:
        """Deferred weights are still out, and read, or about to be read from the model (the
        copy then waits for the read)."""
        if self._deferred is None:
            return False
        return self._deferred.pending.done or bool(self._waiting or self._running or self._updates)

    def _refuse_all(self, message: str) -> None:
        """The weights failed to load: every waiting request and update fails with why."""
        with self._lock:
            waiting, self._waiting = list(self._waiting), deque()
            updates, self._updates = self._updates, []
        for req in waiting:
            self._finish(req, _abort_reason(f"model weights failed to load: {message}", 500))
        for upd in updates:
            upd.result = {
                "success": False,
                "message": f"model weights failed to load: {message}",
                "num_paused_requests": upd.paused,
            }
            upd.done.set()

    def _loop(self) -> None:
        torch.set_grad_enabled(False)
        while True:
            with self._lock:
                while True:
                    if self._idle():
                        self._lock.wait(timeout=1.0)
                    elif hold := self._gathering():
                        self._lock.wait(timeout=hold)
                    else:
                        break
                if self._stop:
                    break
                aborts, self._aborts = self._aborts, []
                pauses, self._pauses = self._pauses, []
                flushes, self._flushes = self._flushes, []
                control = bool(aborts or pauses or flushes or self._updates or self._warmups)
            try:
                if control:  # each of these may change the running set or the weights
                    self._mark_aborts(aborts)  # an aborted request keeps no token of the
                    self._drain()  # step in flight: as if the abort came before its launch
                if flushes:
                    self._flush_prefix()
                    for ev in flushes:
                        ev.set()
                self._apply_aborts(aborts)
                self._apply_pauses(pauses)
                if self._warmups:
                    self._apply_warmups()
                if self._needs_weights():
                    self._fill_weights()
                if self.weights_error is not None:
                    self._refuse_all(self.weights_error)
                    continue
                paused = self._maybe_update()
                if not paused and self.pause_mode is None:
                    self._admit()
                if self._running and self.pause_mode is None:
                    self._decode_step()
                elif paused:
                    with self._lock:
                        self._lock.wait(timeout=0.01)
            except Exception as exc:  # keep serving; fail only the affected requests
                log.exception("engine step failed")
                for req in list(self._running):
                    self._finish(req, _abort_reason(f"engine error: {exc}", 500))
                self._running = []
                self._batch = None
                self._inflight = None  # its requests were running: finished just above
        self._inflight = None  # its requests are running ones, finished below
        for req in list(self._running) + list(self._waiting):
            self._finish(req, _abort_reason("engine shutting down", 503))

    def _idle(self) -> bool:
        """Nothing to do until notified (caller holds the lock)."""
        if self._stop or self._aborts or self._updates or self._pauses or self._flushes:
            return False
        if self._deferred is not None and self._deferred.pending.done:
            return False  # read: copy the weights in
        if self._warmups and not self._running:
            return False
        if self.pause_mode is not None:
            return True
        return not self._running and not self._waiting

    def _gathering(self) -> float:
        """With nothing running and no control operation pending, how long the waiting
        burst is still held (``admission_wait``); 0 otherwise (caller holds the lock)."""
        if self._running or self._aborts or self._updates or self._pauses or self._flushes:
            return 0.0
        if self._warmups or self.pause_mode is not None:
            return 0.0
        return self.admission_wait(time.monotonic())

    def _apply_pauses(self, pauses: list[_Pause]) -> None:
        for op in pauses:
            if op.mode == "abort":
                self._apply_aborts([(None, True)])
            elif op.mode == "retract" and self._running:
                self._retract()
            self.pause_mode = op.mode
            op.done.set()

    def _retract(self) -> None:
        """Running requests go back to the queue's head, in order, keeping their tokens."""
        back = sorted(self._running, key=lambda r: r.slot)
        for r in back:
            self._cache_sequence(r)
            self._release_prefix(r)
        for r in back:  # re-admitted, each prefills (and shares) anew
            r.slot, r.shared = -1, None
        self.stats["num_retracted"] += len(back)
        self._running = []
        self._batch = None
        with self._lock:
            self._waiting.extendleft(reversed(back))

    def _mark_aborts(self, aborts: list[tuple[str | None, bool]]) -> None:
        for rid, abort_all in aborts:
            for r in self._running:
                if abort_all or r.rid == rid:
                    r.abort_requested = True

    def _apply_aborts(self, aborts: list[tuple[str | None, bool]]) -> None:
        for rid, abort_all in aborts:
            with self._lock:
                hit = [r for r in self._waiting if abort_all or r.rid == rid]
                for r in hit:
                    self._waiting.remove(r)
            for r in hit:
                self._finish(r, _abort_reason("Abort request", 200))
        self._mark_aborts(aborts)
        if any(r.abort_requested for r in self._running):
            self._retire([r for r in self._running if r.abort_requested], "Abort request")

    def _maybe_update(self) -> bool:
        """Drive a pending weight update; True while admission must stay paused."""
        with self._lock:
            if not self._updates:
                return self._tensor_hold()
            upd = self._updates[0]
        self._drain()  # the update may have arrived after this round's check
        if upd.abort_all and self._running:
            self._retire(list(self._running), "Abort request: weights update")
        if self._running and self.pause_mode is None:
            return True  # barrier: running requests finish on the weights they started on
        if upd.tensors is not None:
            self._apply_tensors(upd)
            return self._tensor_hold()
        try:
            state = load_snapshot(upd.path)
            with self._lock:
                missing = set(self.model.state_dict()) - set(state)
                unexpected = set(state) - set(self.model.state_dict())
                if missing or unexpected:
                    raise ValueError(
                        f"parameter names differ: missing {sorted(missing)[:5]}, "
                        f"unexpected {sorted(unexpected)[:5]}"
                    )
                self._flush_prefix()
                self.model.load_state_dict(state, strict=True)
                self._check_fused()
                if upd.version is not None:
                    self.weight_version = str(upd.version)
                self.model_path = upd.path
                self.stats["num_weight_updates"] += 1
            upd.result = {
                "success": True,
                "message": "Succeeded to update model weights.",
                "num_paused_requests": upd.paused,
            }
        except Exception as exc:
            upd.result = {
                "success": False,
                "message": f"Failed to update weights: {exc}",
                "num_paused_requests": upd.paused,
            }
        with self._lock:
            self._updates.pop(0)
        upd.done.set()
        return False

    def _check_fused(self) -> None:
        if not self.im.fused_intact():
            raise RuntimeError("a weight load replaced parameters the fused projections view")

    def _tensor_hold(self) -> bool:
        """True while a chunked tensor publication is between chunks (caller holds no lock)."""
        until = self._tensor_hold_until
        if until is None:
            return False
        if time.monotonic() < until:
            return True
        log.warning("tensor publication left unfinished for %.0fs; resuming", TENSOR_HOLD_S)
        self._tensor_hold_until = None
        return False

    def _apply_tensors(self, upd: _WeightUpdate) -> None:
        """Validate every name and shape first (a chunk applies whole or not at all), copy."""
        named = upd.tensors or []
        try:
            params = self.model.state_dict()
            unknown = sorted(n for n, _ in named if n not in params)
            if unknown:
                raise ValueError(f"unknown parameter names {unknown[:5]}")
            bad = [
                f"{n}: {tuple(t.shape)} != {tuple(params[n].shape)}"
                for n, t in named
                if tuple(t.shape) != tuple(params[n].shape)
            ]
            if bad:
                raise ValueError(f"shape mismatch {bad[:5]}")
            with torch.no_grad(), self._lock:
                self._flush_prefix()
                for n, t in named:
                    params[n].copy_(t, non_blocking=True)
                self._check_fused()
                if self.device.type == "cuda":
                    torch.cuda.synchronize(
                        self.device
                    )  # the sender may free its memory after the ack
                if upd.version is not None:
                    self.weight_version = str(upd.version)
                if upd.final:
                    self.stats["num_weight_updates"] += 1
            self._tensor_hold_until = None if upd.final else time.monotonic() + TENSOR_HOLD_S
            upd.result = {
                "success": True,
                "message": "Succeeded to update model weights.",
                "num_paused_requests": upd.paused,
            }
        except Exception as exc:
            self._tensor_hold_until = None
            upd.result = {
                "success": False,
                "message": f"Failed to update weights: {exc}",
                "num_paused_requests": upd.paused,
            }
        upd.tensors = None
        del named
        with self._lock:
            self._updates.pop(0)
        upd.done.set()

    def _admit(self) -> None:
        """Take every waiting request that fits now, then prefill them together."""
        admitted: list[GenRequest] = []
        empty: list[GenRequest] = []
        with self._lock:
            if self.admission_wait(time.monotonic()) > 0:
                return  # a burst is still arriving: the running rows decode on meanwhile
            used = sum(r.reserved for r in self._running)
            while self._waiting and len(self._running) + len(admitted) < self.max_running:
                req = self._waiting[0]
                if req.max_new <= 0 and not req.wants_input_logprobs:
                    empty.append(self._waiting.popleft())
                    continue
                if (self._running or admitted) and used + req.reserved > self.max_total_tokens:
                    break
                admitted.append(self._waiting.popleft())
                used += req.reserved
        for req in empty:
            self.stats["num_prompt_tokens"] += len(req.prompt_ids)
            self._finish(req, {"type": "length", "length": 0})
        if admitted:
            self.stats["num_admissions"] += 1
            self._drain()  # the new rows join after the step in flight is read
            t0 = time.perf_counter()
            # similar lengths share a chunk: less padding (slot order does not matter)
            admitted.sort(key=lambda r: len(r.prefill_ids))
            groups = self._sharing_groups(admitted)
            # a chunk's budget counts each group's one forward row, and a group never
            # straddles two chunks (its samples would prefill from the tree, not share)
            lengths = [len(g[0].prefill_ids) for g in groups]
            chunks = [
                [r for i in chunk for r in groups[i]]
                for chunk in prefill_chunks(lengths, self.prefill_tokens)
            ]
            for k, chunk_reqs in enumerate(chunks):
                try:
                    self._prefill(chunk_reqs)
                except Exception as exc:  # the loop fails the running set; fail the rest here
                    running = set(map(id, self._running))
                    for rest in chunks[k:]:
                        for req in rest:
                            if id(req) not in running:
                                reason = _abort_reason(f"engine error: {exc}", 500)
                                self._finish(req, reason)
                    raise
            self.timings["prefill_s"] += time.perf_counter() - t0

    def _sharing_groups(self, reqs: list[GenRequest]) -> list[list[GenRequest]]:
        """``reqs`` grouped by identical prefill tokens (GRPO's samples of one prompt share
        one prefill row), in first-seen order, with or without the prefix tree: sharing
        needs no memory beyond the slots, and gives the same K/V as one prefill each."""
        groups: dict[tuple[int, ...], list[GenRequest]] = {}
        for r in reqs:
            groups.setdefault(tuple(r.prefill_ids), []).append(r)
        return list(groups.values())

    def _prefill(self, reqs: list[GenRequest]) -> None:
        """One ragged forward for ``reqs``, their first tokens, one host transfer."""
        base = len(self._running)
        for i, req in enumerate(reqs):
            if not req.output_ids:
                self.stats["num_prompt_tokens"] += len(req.prompt_ids)
            req.slot = base + i
        want = [r.return_logprob and r.logprob_start_len >= 0 and not r.output_ids for r in reqs]
        last, full, experts = self._prefill_forward(reqs, want)
        for b, req in enumerate(reqs):
            logits = full[b]
            if logits is not None:
                lp = torch.log_softmax(logits.float() / _temp(req.params), dim=-1)
                ids = req.prompt_ids
                at = torch.tensor(ids[1:], dtype=torch.long, device=lp.device)
                picked = lp[torch.arange(len(ids) - 1, device=lp.device), at].tolist()
                vals: list[float | None] = [None, *picked]
                req.input_logprobs = vals[req.logprob_start_len :]
            if experts is not None and req.return_routed_experts:
                known = sum(int(t.shape[0]) for t in req.routed)  # kept over a retraction
                req.routed.append(experts[b][known:].to(torch.int32).cpu())
        self._running.extend(reqs)
        self._batch = None
        self._upload_prompt_sources()
        sampling = SamplingBatch.build(
            [r.params for r in reqs], [r.seed for r in reqs], last.device
        )
        # a retracted request continues its seeded stream at its next token index
        counters = torch.tensor(
            [len(r.output_ids) for r in reqs], dtype=torch.long, device=last.device
        )
        toks, lps = sample_batch(last, sampling, counters)
        # the rest of prefill_s is the host issuing work: small waits mean host-bound
        self.timings["prefill_wait_s"] += self._accept_all(reqs, toks, lps)

    def _prefill_forward(
        self, reqs: list[GenRequest], want: list[bool]
    ) -> tuple[torch.Tensor, list[torch.Tensor | None], list[torch.Tensor] | None]:
        """The prefill forward of ``reqs``. Requests whose prefill tokens are identical
        (GRPO's samples of one prompt) share one forward: the first one's KV rows are
        copied into the others' slots and its logits reused. With the prefix cache on,
        each such leader's longest prefix held by the radix tree is copied into its slot,
        so only the rest is prefilled, and every prefilled prompt then enters the tree."""
        first: dict[tuple[int, ...], int] = {}
        owner = [first.setdefault(tuple(r.prefill_ids), len(first)) for r in reqs]
        leaders = [reqs[owner.index(k)] for k in range(len(first))]
        lead_want = [
            any(w for w, o in zip(want, owner, strict=True) if o == k) for k in range(len(first))
        ]
        # a group where any request wants per-position outputs prefills its prompt whole
        whole = [
            w or any(r.return_routed_experts for r, o in zip(reqs, owner, strict=True) if o == k)
            for k, w in enumerate(lead_want)
        ]
        starts = [self._reuse_prefix(r, w) for r, w in zip(leaders, whole, strict=True)]
        last, full, experts = self.im.prefill_batch(
            [r.prefill_ids[s:] for r, s in zip(leaders, starts, strict=True)],
            [r.slot for r in leaders],
            want_all=lead_want,
            starts=starts,
        )
        generation = self.prefix.generation if self.prefix is not None else -1
        # every sample takes its leader's prompt K/V in one batched copy, or (the split-KV
        # kernel) reads it from the leader's slot: only a recurrent state is copied then
        followers = [(leaders[k], req) for req, k in zip(reqs, owner, strict=True)]
        followers = [(lead, req) for lead, req in followers if req is not lead]
        sharing = self.im.shares_prompts
        if followers:
            self.im.move_slots(
                [lead.slot for lead, _ in followers],
                [req.slot for _, req in followers],
                max(len(req.prefill_ids) for _, req in followers),
                kv=not sharing,
            )
        if sharing:
            for k, lead in enumerate(leaders):
                members = [r for r, o in zip(reqs, owner, strict=True) if o == k]
                if len(members) > 1:
                    share = SharedPrompt(len(lead.prefill_ids), lead, members)
                    for r in members:
                        r.shared = share
                    self.stats["num_shared_prompt_rows"] += len(members) - 1
        for req, k in zip(reqs, owner, strict=True):
            lead = leaders[k]
            cached = starts[k] if req is lead else len(req.prefill_ids)
            if not req.output_ids:  # a retracted request's prompt was counted at admission
                req.cached_tokens = min(cached, len(req.prompt_ids))
                self.stats["num_cached_prompt_tokens"] += req.cached_tokens
            req.kv_generation = generation
            self._cache_sequence(req, len(req.prefill_ids))
        index = torch.tensor(owner, dtype=torch.long, device=last.device)
        return (
            last.index_select(0, index),
            [full[k] if w else None for k, w in zip(owner, want, strict=True)],
            None if experts is None else [experts[k] for k in owner],
        )

    def _reuse_prefix(self, req: GenRequest, whole: bool) -> int:
        """Copy ``req``'s longest cached prefix into its slot and pin it; its length.

        At least the last token is prefilled (its logits start sampling). ``whole``: the
        request (or one sharing its prompt) wants per-position outputs over the prompt
        (input log-probs, routed experts), so it is prefilled whole."""
        if self.prefix is None or whole:
            return 0
        t0 = time.perf_counter()
        try:
            found = self.prefix.match(req.prefill_ids[:-1])
            if found.length == 0:
                return 0
            self.prefix.lock(found.node)
            req.prefix_node = found.node
            pos = 0
            for segment in found.segments:
                pos += self.im.write_kv(req.slot, pos, segment)
            return found.length
        finally:
            self.timings["prefix_cache_s"] += time.perf_counter() - t0

    def _cache_sequence(self, req: GenRequest, length: int | None = None) -> None:
        """Insert ``req``'s first ``length`` tokens (default: all whose K/V its slot holds)
        into the radix tree and pin that path while ``req`` runs. K/V computed under
        weights loaded before the last flush never enters the tree."""
        tree = self.prefix
        if tree is None or req.slot < 0 or req.kv_generation != tree.generation:
            return
        t0 = time.perf_counter()
        n = req.cached_len if length is None else length
        tokens = (req.prompt_ids + req.output_ids)[:n]
        node = tree.insert(tokens, lambda a, b: self._read_kv(req, a, b))
        tree.lock(node)
        self._release_prefix(req)
        req.prefix_node = node
        self.timings["prefix_cache_s"] += time.perf_counter() - t0

    def _read_kv(self, req: GenRequest, start: int, end: int) -> list[torch.Tensor]:
        """A copy of ``req``'s K/V for positions ``start..end-1`` (``InferenceModel.read_kv``),
        its shared prompt's entries read from the slot that holds them."""
        share = req.shared
        if share is None or share.holder is req or start >= share.length:
            return self.im.read_kv(req.slot, start, end)
        cut = min(end, share.length)
        head = self.im.read_kv(share.holder.slot, start, cut)
        if cut == end:
            return head
        tail = self.im.read_kv(req.slot, cut, end)
        return [torch.cat([h, t], dim=-2) for h, t in zip(head, tail, strict=True)]

    def _leave_shares(self, done: list[GenRequest]) -> None:
        """``done`` leave their shared prompts; a prompt whose holder is among them is
        copied (one batched copy for all) to the slot of a member still running, queued
        before the compaction that may overwrite the holder's slot."""
        gone = set(map(id, done))
        moves: list[tuple[int, int, int]] = []
        for share in {id(r.shared): r.shared for r in done if r.shared is not None}.values():
            share.members = [m for m in share.members if id(m) not in gone]
            if id(share.holder) in gone and share.members:
                old, share.holder = share.holder, share.members[0]
                moves.append((old.slot, share.holder.slot, share.length))
        for r in done:
            r.shared = None
        if moves:
            self.im.copy_kv([m[0] for m in moves], [m[1] for m in moves], max(m[2] for m in moves))

    def _upload_prompt_sources(self) -> None:
        """Tell the decode step where each running row's prompt lives (rows are slots)."""
        if not self.im.shares_prompts:
            return
        sources = []
        for b, r in enumerate(self._running):
            assert r.slot == b, "running rows are slots 0..n-1"
            share = r.shared
            sources.append((r.slot, 0) if share is None else (share.holder.slot, share.length))
        self.im.set_prompt_sources(sources)

    def _release_prefix(self, req: GenRequest) -> None:
        if req.prefix_node is not None and self.prefix is not None:
            self.prefix.unlock(req.prefix_node)
        req.prefix_node = None

    def _build_batch(self) -> _DecodeBatch:
        running, dev = self._running, self.device

        def t(vals: list[int]) -> torch.Tensor:
            return torch.tensor(vals, dtype=torch.long, device=dev)

        positions = [r.cached_len for r in running]
        return _DecodeBatch(
            tokens=t([r.output_ids[-1] for r in running]),
            positions=t(positions),
            counters=t([len(r.output_ids) for r in running]),
            sampling=SamplingBatch.build(
                [r.params for r in running], [r.seed for r in running], dev
            ),
            kv_len=max(positions) + 1,
        )

    def _decode_step(self) -> None:
        if self.fused_sampling:
            self._fused_decode_step()
            return
        t0 = time.perf_counter()
        running = self._running
        batch = self._batch if self._batch is not None else self._build_batch()
        logits, experts = self.im.decode_step(batch.tokens, batch.positions, kv_len=batch.kv_len)
        self.stats["num_decode_steps"] += 1
        _record_routed(running, experts)
        t1 = time.perf_counter()
        if self.profile:
            _sync(self.device)
            t1 = time.perf_counter()
            self.timings["forward_s"] += t1 - t0
        u = None if batch.sampling.all_greedy else batch.next_uniforms()
        toks, lps = sample_batch(logits, batch.sampling, batch.counters, u=u)
        if self.profile:
            _sync(self.device)
            self.timings["sample_s"] += time.perf_counter() - t1
        # advance on the device; _retire/_admit drop the batch when the running set changes
        batch.tokens = toks
        batch.positions += 1
        batch.counters += 1
        batch.kv_len += 1
        self._batch = batch
        self._accept_all(running, toks, lps)
        self.timings["decode_s"] += time.perf_counter() - t0

    def _fused_decode_step(self) -> None:
        """Forward and sampling in one step function (one graph replay on a GPU); its
        buffers advance on the device, so a new running set is loaded only on change.

        Overlap schedule: the step in flight (or a new one) is followed by the next step's
        launch when that is safe, and read while the next one runs."""
        t0 = time.perf_counter()
        step, self._inflight = self._inflight, None
        if step is None:
            step = self._launch_fused()
        if self._can_run_ahead():
            self._inflight = self._launch_fused()
            self.stats["num_overlapped_steps"] += 1
        self._accept_step(step)
        if self._inflight is not None and not self._running:
            self._drain()  # every row of the step ahead stopped: nothing of it is kept
        self.timings["decode_s"] += time.perf_counter() - t0

    def _launch_fused(self) -> _InFlight:
        """Launch one fused step for the running set; its outputs are copied toward the
        host (asynchronously on a GPU) and read by ``_accept_step``."""
        t0 = time.perf_counter()
        running = self._running
        batch = self._batch
        if batch is None:  # only with no step in flight: built from the host's tokens
            batch = self._build_batch()
            self.im.load_step(batch.tokens, batch.positions, batch.counters, batch.sampling)
        toks, lps, experts = self.im.step_sampled(batch.kv_len, batch.sampling.mode)
        batch.kv_len += 1
        self._batch = batch
        both = torch.stack([toks.double(), lps.double()])
        ex = None
        if experts is not None and any(r.return_routed_experts for r in running):
            ex = experts.to(torch.int32, copy=True)
        ready = None
        if both.device.type == "cuda":
            both = both.to("cpu", non_blocking=True)
            ex = None if ex is None else ex.to("cpu", non_blocking=True)
            ready = torch.cuda.Event()
            ready.record()
        if self.profile:  # sampling is inside the step: all of it counts as forward
            _sync(self.device)
            self.timings["forward_s"] += time.perf_counter() - t0
        return _InFlight(list(running), both, ex, ready)

    def _can_run_ahead(self) -> bool:
        """Launch the next step before reading the one in flight? Only while the running
        set cannot change before it (nothing to admit, no control operation pending) and
        every row's next K/V write lies inside its slot. ``max_new`` is capped by the
        context length, so a request at its last token writes its extra row at position
        ``context_length - 1`` at most; the check below guards that bound."""
        if not self.overlap_schedule or self.profile:
            return False
        batch = self._batch
        if batch is None or batch.kv_len > self.context_length:
            return False
        with self._lock:
            if self._stop or self._aborts or self._pauses or self._flushes:
                return False
            if self._updates or self._warmups or self.pause_mode is not None:
                return False
            return not self._admissible()

    def _admissible(self) -> bool:
        """Would ``_admit`` take a waiting request now? (Caller holds the lock.)"""
        if not self._waiting or self._tensor_hold_until is not None:
            return False
        req = self._waiting[0]
        if req.max_new <= 0 and not req.wants_input_logprobs:
            return True
        if len(self._running) >= self.max_running:
            return False
        used = sum(r.reserved for r in self._running)
        return not self._running or used + req.reserved <= self.max_total_tokens

    def _drain(self) -> None:
        """Read the step in flight (if any) and do its bookkeeping; nothing runs ahead."""
        step, self._inflight = self._inflight, None
        if step is not None:
            t0 = time.perf_counter()
            self._accept_step(step)
            self.timings["decode_s"] += time.perf_counter() - t0

    def _accept_step(self, step: _InFlight) -> None:
        """Wait for a launched step's tokens and accept them. Rows of requests that stopped
        after its launch (at the step before) are dropped, as if it had not run for them."""
        if step.ready is not None:
            step.ready.synchronize()
        both = step.both.tolist()
        reqs, rows = step.reqs, range(len(step.reqs))
        if any(r.finish is not None or r.abort_requested for r in reqs):
            rows = [i for i, r in enumerate(reqs) if r.finish is None and not r.abort_requested]
            self.stats["num_discarded_tokens"] += len(reqs) - len(rows)
            if not rows:
                return
        self.stats["num_decode_steps"] += 1
        if step.experts is not None:
            for i in rows:
                if reqs[i].return_routed_experts:
                    reqs[i].routed.append(step.experts[i : i + 1])
        if len(rows) == len(reqs):
            self._accept_rows(reqs, both[0], both[1])
        else:
            kept = [reqs[i] for i in rows]
            self._accept_rows(kept, [both[0][i] for i in rows], [both[1][i] for i in rows])

    def _accept_all(self, reqs: list[GenRequest], toks: torch.Tensor, lps: torch.Tensor) -> float:
        """One host transfer for the whole batch, then per-request stop checks and retire;
        returns the seconds the transfer waited for the device."""
        t0 = time.perf_counter()
        both = torch.stack([toks.double(), lps.double()]).tolist()
        waited = time.perf_counter() - t0
        self._accept_rows(reqs, both[0], both[1])
        return waited

    def _accept_rows(self, reqs: list[GenRequest], toks: list[float], lps: list[float]) -> None:
        """Append each request's token and log-prob, check its stops, retire the finished."""
        eos = self._eos
        self.stats["num_generated_tokens"] += len(reqs)
        for req, tf, lp in zip(reqs, toks, lps, strict=True):
            if req.max_new <= 0:  # a scoring request: prefilled, nothing generated
                req.finish = {"type": "length", "length": 0}
                continue
            t = int(tf)
            out = req.output_ids
            out.append(t)
            req.output_logprobs.append(lp)
            req.output_versions.append(self.weight_version)
            p = req.params
            if (t == eos and not p.ignore_eos) or p.stop_token_ids or p.stop:
                self._check_stop(req, t)
            elif len(out) >= req.max_new:
                req.finish = {"type": "length", "length": len(out)}
        self._retire([r for r in self._running if r.finish is not None])

    def _check_stop(self, req: GenRequest, t: int) -> None:
        """Stop token / EOS / stop string, else the length limit (the slow path)."""
        p = req.params
        n = len(req.output_ids)
        if n >= p.min_new_tokens:
            eos = self._eos
            if t in p.stop_token_ids or (not p.ignore_eos and eos is not None and t == eos):
                req.finish = {"type": "stop", "matched": t}
                return
            if p.stop:
                width = max(len(s) for s in p.stop) + 4
                tail = self.tokenizer.decode(req.output_ids[-width:])
                for s in p.stop:
                    if s and s in tail:
                        req.finish = {"type": "stop", "matched": s}
                        return
        if n >= req.max_new:
            req.finish = {"type": "length", "length": n}

    def _retire(self, done: list[GenRequest], abort_message: str | None = None) -> None:
        """Finish ``done`` and compact the survivors into slots ``0..B-1``.

        With a step in flight (overlap schedule) each survivor's slot already holds one K/V
        row more than its ``cached_len`` (written by that step, ahead on the device stream),
        and the step buffers hold the inputs of the step after it: the moves and the
        gathered rows, queued behind it, take both."""
        if not done:
            return
        ahead = 1 if self._inflight is not None else 0
        batch, self._batch = self._batch, None
        gone = set(map(id, done))
        survivors = [r for r in self._running if id(r) not in gone]
        for r in done:
            self._cache_sequence(r)
            reason = r.finish if abort_message is None else _abort_reason(abort_message, 200)
            self._finish(r, reason or _abort_reason("finished", 200))
        self._leave_shares(done)
        n = len(survivors)
        old_rows = {id(r): r.slot for r in survivors}  # fused step rows follow the slots
        holes = sorted(r.slot for r in done if 0 <= r.slot < n)
        movers = sorted((r for r in survivors if r.slot >= n), key=lambda r: r.slot)
        pairs = list(zip(holes, movers, strict=True))
        if pairs:  # one gather and scatter per cache tensor for all of them
            longest = max(r.cached_len + ahead for _, r in pairs)
            self.im.move_slots([r.slot for _, r in pairs], [hole for hole, _ in pairs], longest)
            for hole, r in pairs:
                r.slot = hole
        self._running = sorted(survivors, key=lambda r: r.slot)
        self._upload_prompt_sources()
        if self.fused_sampling and batch is not None and survivors:
            # the survivors' step rows are already on the device: gather them instead of
            # rebuilding the step from the host (the wider sampling mode serves them all)
            self.im.compact_step([old_rows[id(r)] for r in self._running])
            batch.kv_len = max(r.cached_len for r in self._running) + 1 + ahead
            self._batch = batch

    def _finish(self, req: GenRequest, reason: dict[str, Any]) -> None:
        req.finish = reason
        self._release_prefix(req)
        if reason.get("type") == "abort":
            self.stats["num_aborted"] += 1
        else:
            self.stats["num_finished"] += 1
        try:
            req.on_done(self._result(req))
        except Exception:
            log.exception("result callback failed for %s", req.rid)

    def _result(self, req: GenRequest) -> Result:
        reason = req.finish or {}
        ids = req.output_ids
        text_ids = ids
        if reason.get("type") == "stop" and isinstance(reason.get("matched"), int):
            text_ids = ids[:-1]
        text = self.tokenizer.decode(text_ids)
        matched = reason.get("matched")
        if isinstance(matched, str) and not req.params.no_stop_trim:
            cut = text.find(matched)
            if cut >= 0:
                text = text[:cut]
        meta: dict[str, Any] = {
            "id": req.rid,
            "finish_reason": reason,
            "prompt_tokens": len(req.prompt_ids),
            "completion_tokens": len(ids),
            "cached_tokens": req.cached_tokens,
            "weight_version": self.weight_version,
            "weight_versions": version_spans(req.output_versions, self.weight_version),
            "e2e_latency": time.monotonic() - req.created,
        }
        if req.return_logprob:
            meta["output_token_logprobs"] = [
                [lp, t, None] for lp, t in zip(req.output_logprobs, ids, strict=True)
            ]
            if req.logprob_start_len >= 0:
                start = req.logprob_start_len
                meta["input_token_logprobs"] = [
                    [lp, t, None]
                    for lp, t in zip(req.input_logprobs, req.prompt_ids[start:], strict=True)
                ]
        if req.return_routed_experts:
            meta["routed_experts"] = _encode_experts(req.routed)
        return {"text": text, "output_ids": list(ids), "meta_info": meta}


def version_spans(versions: list[str], current: str) -> list[dict[str, Any]]:
    """Per-token versions as SGLang's ``meta_info.weight_versions``: runs of one version,
    ``{"version", "start", "end"}`` over output token indices (one empty span if none)."""
    spans: list[dict[str, Any]] = []
    for i, v in enumerate(versions):
        if spans and spans[-1]["version"] == v:
            spans[-1]["end"] = i + 1
        else:
            spans.append({"version": v, "start": i, "end": i + 1})
    return spans or [{"version": current, "start": 0, "end": 0}]


def _encode_experts(chunks: list[torch.Tensor]) -> str:
    """SGLang's wire form: base64 of an int32 array ``(tokens - 1, moe_layers, top_k)``."""
    if not chunks:
        return ""
    arr = torch.cat(chunks, dim=0).to(torch.int32).contiguous().numpy()
    return base64.b64encode(arr.astype("<i4").tobytes()).decode("ascii")


def decode_routed_experts(data: str, num_layers: int, top_k: int) -> torch.Tensor:
    """Inverse of the wire form, for clients (router replay)."""
    import numpy as np

    if not data:
        return torch.zeros((0, num_layers, top_k), dtype=torch.int32)
    arr = np.frombuffer(base64.b64decode(data), dtype="<i4").reshape(-1, num_layers, top_k)
    return torch.from_numpy(arr.copy())


def _abort_reason(message: str, status: int) -> dict[str, Any]:
    return {"type": "abort", "message": message, "status_code": status, "err_type": None}


def _temp(p: SamplingParams) -> float:
    return 1.0 if p.greedy else p.temperature


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def prefill_chunks(lengths: list[int], budget: int) -> list[list[int]]:
    """Split prompts (in order) into chunks whose padded size ``n * max_len`` stays within
    ``budget`` tokens; a prompt longer than the budget gets a chunk of its own."""
    chunks: list[list[int]] = []
    cur: list[int] = []
    longest = 0
    for i, n in enumerate(lengths):
        if cur and (len(cur) + 1) * max(longest, n) > budget:
            chunks.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, n)
    if cur:
        chunks.append(cur)
    return chunks
