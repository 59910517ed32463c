"""The embedded engine's scheduler: continuous batching over ``InferenceModel``.

One background thread owns the model and the KV cache. Between decode steps it handles
control operations (aborts, weight updates), admits waiting requests (prefill once each)
while the running set stays within ``max_running_requests`` slots and the reserved token
budget ``max_total_tokens`` (prompt + max_new_tokens per request), then decodes one token
for every running request in a single batched forward.

Weight updates (``update_weights``): new requests are held in the queue, running requests
finish on the old weights (or are aborted with ``abort_all_requests``), then the weights
are loaded in place and the queue resumes. This matches SGLang's writer-lock behaviour;
``num_paused_requests`` reports how many requests were held.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .forward import InferenceModel, UnsupportedModel
from .sampling import BadRequest, SamplingParams, sample

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
    generator: torch.Generator | None = None
    output_ids: list[int] = field(default_factory=list)
    output_logprobs: list[float] = field(default_factory=list)
    input_logprobs: list[float | None] = field(default_factory=list)
    routed: list[torch.Tensor] = field(default_factory=list)
    finish: dict[str, Any] | None = None
    slot: int = -1
    max_new: int = 0
    abort_requested: bool = False
    created: float = field(default_factory=time.monotonic)

    @property
    def reserved(self) -> int:
        return len(self.prompt_ids) + self.max_new

    @property
    def cached_len(self) -> int:
        return len(self.prompt_ids) + max(0, len(self.output_ids) - 1)


@dataclass
class _WeightUpdate:
    path: str
    version: str | None
    abort_all: bool
    done: threading.Event = field(default_factory=threading.Event)
    result: dict[str, Any] = field(default_factory=dict)
    paused: int = 0


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
        cuda_graph: bool = False,
    ):
        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        self.config = loaded.config
        self.model_path = model_path
        self.device = torch.device(device)
        self.max_running = max_running_requests
        self.context_length = context_length
        self.max_total_tokens = max_total_tokens or max_running_requests * context_length
        self.seed = seed
        self.weight_version = weight_version
        self.vocab_size = int(self.model.embeddings.weight.shape[0])
        self.im = InferenceModel(
            self.model, max_slots=max_running_requests, capacity=context_length, device=device
        )
        if cuda_graph:
            try:
                self.im.enable_cuda_graphs()
            except UnsupportedModel as exc:
                log.warning("CUDA graphs disabled: %s", exc)
        self._lock = threading.Condition()
        self._waiting: deque[GenRequest] = deque()
        self._running: list[GenRequest] = []
        self._aborts: list[tuple[str | None, bool]] = []
        self._updates: list[_WeightUpdate] = []
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
        }

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
        gen = torch.Generator().manual_seed(int(seed))
        req = GenRequest(
            rid=rid or f"req-{n}",
            prompt_ids=[int(t) for t in prompt_ids],
            params=params,
            on_done=on_done,
            return_logprob=return_logprob,
            logprob_start_len=logprob_start_len,
            return_routed_experts=return_routed_experts,
            generator=gen,
        )
        req.max_new = min(params.max_new_tokens, self.context_length - len(prompt_ids))
        return req

    def submit(self, req: GenRequest) -> None:
        with self._lock:
            self.stats["num_requests_total"] += 1
            self._waiting.append(req)
            self._lock.notify_all()

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

    def load(self) -> dict[str, int]:
        with self._lock:
            return {"num_running_reqs": len(self._running), "num_waiting_reqs": len(self._waiting)}

    def checksum(self) -> str:
        with self._lock:
            return state_checksum(self.model.state_dict())

    # ---- scheduler thread ----------------------------------------------------------------

    def _loop(self) -> None:
        torch.set_grad_enabled(False)
        while True:
            with self._lock:
                while (
                    not self._stop
                    and not self._running
                    and not self._aborts
                    and not self._updates
                    and not self._waiting
                ):
                    self._lock.wait(timeout=1.0)
                if self._stop:
                    break
                aborts, self._aborts = self._aborts, []
            try:
                self._apply_aborts(aborts)
                paused = self._maybe_update()
                if not paused:
                    self._admit()
                if self._running:
                    self._decode_step()
                elif paused:
                    with self._lock:
                        self._lock.wait(timeout=0.01)
            except Exception as exc:  # keep serving; fail only the affected requests
                log.exception("engine step failed")
                for req in list(self._running):
                    self._finish(req, _abort_reason(f"engine error: {exc}", 500))
                self._running = []
        for req in list(self._running) + list(self._waiting):
            self._finish(req, _abort_reason("engine shutting down", 503))

    def _apply_aborts(self, aborts: list[tuple[str | None, bool]]) -> None:
        for rid, abort_all in aborts:
            with self._lock:
                hit = [r for r in self._waiting if abort_all or r.rid == rid]
                for r in hit:
                    self._waiting.remove(r)
            for r in hit:
                self._finish(r, _abort_reason("Abort request", 200))
            for r in self._running:
                if abort_all or r.rid == rid:
                    r.abort_requested = True
        if any(r.abort_requested for r in self._running):
            self._retire([r for r in self._running if r.abort_requested], "Abort request")

    def _maybe_update(self) -> bool:
        """Drive a pending weight update; True while admission must stay paused."""
        with self._lock:
            if not self._updates:
                return False
            upd = self._updates[0]
        if upd.abort_all and self._running:
            self._retire(list(self._running), "Abort request: weights update")
        if self._running:
            return True
        try:
            state = load_safetensors_dir(upd.path)
            with self._lock:
                missing = set(self.model.state_dict()) - set(state)
                unexpected = set(state) - set(self.model.state_dict())
                if missing or unexpected:
                    raise ValueError(
                        f"parameter names differ: missing {sorted(missing)[:5]}, "
                        f"unexpected {sorted(unexpected)[:5]}"
                    )
                self.model.load_state_dict(state, strict=True)
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

    def _admit(self) -> None:
        while True:
            with self._lock:
                if not self._waiting or len(self._running) >= self.max_running:
                    return
                req = self._waiting[0]
                used = sum(r.reserved for r in self._running)
                if self._running and used + req.reserved > self.max_total_tokens:
                    return
                self._waiting.popleft()
            self._prefill(req)

    def _prefill(self, req: GenRequest) -> None:
        self.stats["num_prompt_tokens"] += len(req.prompt_ids)
        if req.max_new <= 0:
            self._finish(req, {"type": "length", "length": 0})
            return
        req.slot = len(self._running)
        want_input = req.return_logprob and req.logprob_start_len >= 0
        logits, experts = self.im.prefill(req.prompt_ids, req.slot, all_logits=want_input)
        if want_input:
            lp = torch.log_softmax(logits.float() / _temp(req.params), dim=-1)
            ids = req.prompt_ids
            vals: list[float | None] = [None] + [
                float(lp[i - 1, ids[i]]) for i in range(1, len(ids))
            ]
            req.input_logprobs = vals[req.logprob_start_len :]
            logits = logits[-1]
        if experts is not None and req.return_routed_experts:
            req.routed.append(experts.to(torch.int32).cpu())
        self._running.append(req)
        self._accept(req, *sample(logits.unsqueeze(0), [req.params], [_gen(req)]))
        self._retire([r for r in self._running if r.finish is not None])

    def _decode_step(self) -> None:
        running = self._running
        tokens = torch.tensor([r.output_ids[-1] for r in running], device=self.device)
        positions = torch.tensor([r.cached_len for r in running], device=self.device)
        logits, experts = self.im.decode_step(tokens, positions)
        self.stats["num_decode_steps"] += 1
        if experts is not None:
            ex = experts.to(torch.int32).cpu()
            for i, r in enumerate(running):
                if r.return_routed_experts:
                    r.routed.append(ex[i : i + 1])
        toks, lps = sample(logits, [r.params for r in running], [_gen(r) for r in running])
        for i, r in enumerate(running):
            self._accept(r, toks[i : i + 1], lps[i : i + 1])
        self._retire([r for r in running if r.finish is not None])

    def _accept(self, req: GenRequest, tok: torch.Tensor, lp: torch.Tensor) -> None:
        t = int(tok[0])
        req.output_ids.append(t)
        req.output_logprobs.append(float(lp[0]))
        self.stats["num_generated_tokens"] += 1
        p = req.params
        n = len(req.output_ids)
        if n >= p.min_new_tokens:
            eos = getattr(self.tokenizer, "eos_token_id", None)
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
        """Finish ``done`` and compact the survivors into slots ``0..B-1``."""
        if not done:
            return
        gone = set(map(id, done))
        survivors = [r for r in self._running if id(r) not in gone]
        for r in done:
            reason = r.finish if abort_message is None else _abort_reason(abort_message, 200)
            self._finish(r, reason or _abort_reason("finished", 200))
        n = len(survivors)
        holes = sorted(r.slot for r in done if 0 <= r.slot < n)
        movers = sorted((r for r in survivors if r.slot >= n), key=lambda r: r.slot)
        for hole, r in zip(holes, movers, strict=True):
            self.im.move_slot(r.slot, hole, r.cached_len)
            r.slot = hole
        self._running = sorted(survivors, key=lambda r: r.slot)

    def _finish(self, req: GenRequest, reason: dict[str, Any]) -> None:
        req.finish = reason
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
            "cached_tokens": 0,
            "weight_version": self.weight_version,
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


def _gen(req: GenRequest) -> torch.Generator:
    assert req.generator is not None
    return req.generator
