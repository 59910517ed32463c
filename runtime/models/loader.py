"""``load_model``: one entry point for builtin, HF and native (OLMo-core) model sources."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from olmo_core.nn.transformer import Transformer, TransformerBlockType, TransformerConfig

from .attention import enable_document_masking
from .builtin import builtin_config
from .gdn_cpu import has_gated_delta_net, install_cpu_gdn_fallbacks
from .moe_cpu import install_cpu_moe_fallbacks
from .moe_grouped import use_grouped_mm_experts
from .source import (
    NATIVE_META,
    ModelLoadError,
    check_source_files,
    native_root,
    source_format,
    tokenizer_dir,
)
from .tokenizer import Tokenizer, builtin_tokenizer
from .weights import load_safetensors, save_safetensors

NATIVE_FORMAT = "rlc-olmo-core"
FAMILIES = ("dense", "moe", "hybrid_moe")


@dataclass
class LoadedModel:
    """A built OLMo-core model plus everything needed to use, save or export it."""

    model: Transformer
    tokenizer: Tokenizer
    config: TransformerConfig
    family: str
    source: str
    # weights still being read (``load_model(defer_weights=True)``): the model holds zeros
    # until ``fill_weights``
    pending: PendingWeights | None = None

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def fill_weights(self, *models: torch.nn.Module) -> None:
        """Wait for deferred weights and copy them into this model (or into ``models``:
        copies of it, such as a KL reference, wrapped or compiled since). No-op when
        nothing is pending."""
        pending, self.pending = self.pending, None
        if pending is None:
            return
        state = pending.state()
        with torch.no_grad():
            for model in models or (self.model,):
                fill_state(model, state, self.config)


class PendingWeights:
    """A model's state dict, read (or initialised) on a daemon thread from construction:
    a caller can build and compile the model meanwhile. ``state`` waits, and re-raises
    what failed."""

    def __init__(self, fetch: Callable[[], dict[str, torch.Tensor]]) -> None:
        self._fetch = fetch
        self._state: dict[str, torch.Tensor] | None = None
        self._error: BaseException | None = None
        self.read_s: float | None = None  # how long the read took, once done
        self._done_lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] | None = []  # None once done
        self._thread = threading.Thread(target=self._run, name="rlc-weights", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        t0 = time.perf_counter()
        try:
            self._state = self._fetch()
        except BaseException as exc:  # re-raised by state()
            self._error = exc
        self.read_s = time.perf_counter() - t0
        with self._done_lock:
            callbacks, self._callbacks = self._callbacks or [], None
        for callback in callbacks:
            callback()

    @property
    def done(self) -> bool:
        """The read has finished (or failed): ``state`` returns at once."""
        return self._callbacks is None

    def when_done(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (on the reading thread) once the read has finished, or now."""
        with self._done_lock:
            if self._callbacks is not None:
                self._callbacks.append(callback)
                return
        callback()

    def state(self) -> dict[str, torch.Tensor]:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._state is not None
        return self._state


def fill_state(
    model: torch.nn.Module, state: dict[str, torch.Tensor], config: TransformerConfig
) -> None:
    """Copy ``state`` (OLMo-core names) into ``model``'s own tensors, in place (compiled
    graphs and the optimizer keep referring to them). Activation-checkpoint wrappers in the
    names are looked through; only a tied LM head may be missing."""
    own = {k.replace("._checkpoint_wrapped_module", ""): k for k in model.state_dict()}
    mapped = {own.get(k, k): v for k, v in state.items()}
    missing, unexpected = model.load_state_dict(mapped, strict=False)
    missing = [
        k
        for k in missing
        if not (
            config.tie_word_embeddings
            and k.replace("._checkpoint_wrapped_module", "") == "lm_head.w_out.weight"
        )
    ]
    if missing or unexpected:
        raise ModelLoadError(
            f"weights do not match the model: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )


def family_of(config: TransformerConfig) -> str:
    """dense / moe / hybrid_moe from the block type."""
    blocks = config.block.values() if isinstance(config.block, dict) else [config.block]
    names = {b.name for b in blocks}
    hybrid = {TransformerBlockType.moe_hybrid, TransformerBlockType.moe_hybrid_reordered_norm}
    if names & hybrid:
        return "hybrid_moe"
    if any(b.feed_forward_moe is not None for b in blocks):
        return "moe"
    return "dense"


def _finish(
    model: Transformer,
    config: TransformerConfig,
    tokenizer: Tokenizer,
    family: str,
    source: str,
    device: str | torch.device,
    dtype: torch.dtype,
    architecture: str | None,
) -> LoadedModel:
    if architecture is not None and architecture != family:
        raise ModelLoadError(f"{source} is a {family} model but architecture={architecture!r}")
    if family != "dense":
        install_cpu_moe_fallbacks()
        use_grouped_mm_experts(model)
    if has_gated_delta_net(model):
        install_cpu_gdn_fallbacks()
    enable_document_masking(model)
    model.to(device=torch.device(device), dtype=dtype)
    model.eval()
    return LoadedModel(
        model=model, tokenizer=tokenizer, config=config, family=family, source=source
    )


def _allocated(
    config: TransformerConfig,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
) -> Transformer:
    """The model with storage but no initialisation, for weights that are loaded next.

    OLMo-core's ``init_weights`` random-initialises every weight (the 1.5B builtin: tens of
    seconds on the CPU), which a load would overwrite at once. Every parameter and
    persistent buffer comes from the state (a missing one is refused), and the models have
    no other buffers: allocating is enough. ``to_empty`` gives the embedding and a tied LM
    head their own storage, so they are tied again, as ``init_weights`` does. ``dtype``:
    allocated in it at once (no float32 copy on the device first, whose freed blocks the
    allocator would keep: an engine sizes its KV pool from what it holds)."""
    model = config.build(init_device="meta")
    if dtype is not None:
        model = model.to(dtype=dtype)
    model = model.to_empty(device=torch.device(device))
    if config.tie_word_embeddings:
        model._tie_weights()
    return model


def _build_with_state(config: TransformerConfig, state: dict[str, torch.Tensor]) -> Transformer:
    model = _allocated(config)
    with torch.no_grad():
        fill_state(model, state, config)
    return model


def _zeroed(
    config: TransformerConfig, device: str | torch.device, dtype: torch.dtype
) -> Transformer:
    """Allocated on ``device`` in ``dtype`` and zeroed: the model to build and compile
    while its weights load (zeros rather than whatever the memory held)."""
    model = _allocated(config, device, dtype)
    with torch.no_grad():
        for tensor in model.state_dict().values():
            tensor.zero_()
    return model


def _builtin_state(config: TransformerConfig, source: str, seed: int) -> dict[str, torch.Tensor]:
    """The builtin's initialised state, from the init cache. When it is not there yet it
    is initialised in a child process, which writes it: initialising here would seed and
    draw from this process's global RNG while its other threads use it."""
    import subprocess
    import sys

    from .init_cache import cache_path

    path = cache_path(source, seed)
    assert path is not None  # deferred only with the cache on (see _init_cached)
    if not path.is_file():
        proc = subprocess.run(
            [sys.executable, "-m", "runtime.models.init_cache", source, str(seed)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0 or not path.is_file():
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise ModelLoadError(f"{source}: initialising its weights failed: {last}")
    return load_safetensors(path)


def _init_builtin(
    config: TransformerConfig,
    source: str,
    seed: int,
    device: str | torch.device,
    dtype: torch.dtype | None = None,
) -> Transformer:
    """Random-initialise on the CPU from ``seed``, or read that initialisation back from
    the init cache (``runtime.models.init_cache``; above ``MIN_PARAMS``), restoring it
    straight onto ``device`` (in ``dtype``: allocated in it, the float32 file copied in)."""
    from .init_cache import MIN_PARAMS, cache_path, ensure_written, initialise_on_cpu

    path = cache_path(source, seed) if config.num_params >= MIN_PARAMS else None
    if path is None:
        return initialise_on_cpu(config, seed)
    made = ensure_written(config, source, seed, path)
    if made is not None:
        return made
    # every tensor of these models is a parameter in the file: allocate, then fill
    model = _allocated(config, torch.device(device), dtype)
    model.load_state_dict(load_safetensors(path), strict=True)
    return model


def check_source(source: str, *, hf_template: str | None = None) -> None:
    """Refuse a model source ``load_model`` could not load, reading configs only (no weights).

    Why: a missing or unloadable checkpoint is one line at start-up rather than an
    engine's traceback minutes later. The files are checked first (``check_source_files``,
    which ``rlc run`` runs before anything starts); here the architecture too, through
    OLMo-core's configs.
    """
    fmt = check_source_files(source, hf_template=hf_template, tokenizer=False)
    path = Path(source)
    try:
        if fmt == "builtin":
            tokenizer = builtin_tokenizer(source)
            builtin_config(source.removeprefix("builtin:"), tokenizer.vocab_size, 0)
        elif fmt == "native":
            meta = json.loads((native_root(path) / NATIVE_META).read_text())
            TransformerConfig.from_dict(meta["model_config"])
        elif fmt == "hf":
            from .hf import UnsupportedHFModel, hf_config_to_olmo_core

            try:
                hf_config_to_olmo_core(json.loads((path / "config.json").read_text()))
            except UnsupportedHFModel as exc:
                raise ModelLoadError(f"{source}: {exc}") from None
            except KeyError as exc:
                raise ModelLoadError(f"{source}: config.json has no {exc}") from None
        if fmt in ("hf", "olmo_core_dist"):
            tokenizer_dir(path, hf_template)
    except ModelLoadError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelLoadError(f"{source}: {type(exc).__name__}: {exc}") from None


def load_model(
    source: str,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    architecture: str | None = None,
    attn_backend: str = "torch",
    hf_template: str | None = None,
    defer_weights: bool = False,
) -> LoadedModel:
    """Build an OLMo-core ``Transformer`` from ``builtin:NAME``, an HF dir, a native dir or
    an OLMo-core checkpoint (``hf_template``: where its tokenizer lives when not beside it).

    Builtins are random-initialised on CPU from ``seed`` (identical on every device); large
    ones are initialised once and then read back from the init cache.

    ``defer_weights``: return at once with the model allocated on ``device`` and zeroed,
    the weights read on a thread (``LoadedModel.pending``) and copied in by
    ``fill_weights``, so the caller builds and compiles meanwhile. Dense models only: an
    MoE router's choices on zero weights (every token to the first experts) are not the
    shapes its real weights give. Builtins only with the init cache on and above its size
    floor (smaller ones initialise in a moment); OLMo-core trainer checkpoints load at once.
    """
    fmt = source_format(source)
    if fmt == "builtin":
        tokenizer = builtin_tokenizer(source)
        try:
            family, config = builtin_config(
                source.removeprefix("builtin:"), tokenizer.vocab_size, seed
            )
        except ValueError as e:
            raise ModelLoadError(str(e)) from e
        if defer_weights and family == "dense" and _init_cached(config, source, seed):
            return _deferred(
                config,
                lambda: _builtin_state(config, source, seed),
                (tokenizer, family, source, device, dtype, architecture),
            )
        model = _init_builtin(config, source, seed, device, dtype=dtype)
        return _finish(model, config, tokenizer, family, source, device, dtype, architecture)
    path = Path(source)
    if fmt == "native":
        root = native_root(path)
        meta = json.loads((root / NATIVE_META).read_text())
        config = TransformerConfig.from_dict(meta["model_config"])
        tokenizer = Tokenizer.from_dir(root)
        if defer_weights and meta["family"] == "dense":
            return _deferred(
                config,
                lambda: load_safetensors(root),
                (tokenizer, meta["family"], source, device, dtype, architecture),
            )
        model = _build_with_state(config, load_safetensors(root))
        return _finish(
            model, config, tokenizer, meta["family"], source, device, dtype, architecture
        )
    if fmt == "hf":
        from .hf import UnsupportedHFModel, hf_config_to_olmo_core, load_hf_state

        cfg = json.loads((path / "config.json").read_text())
        try:
            family, config = hf_config_to_olmo_core(cfg, attn_backend=attn_backend)
        except UnsupportedHFModel as e:
            raise ModelLoadError(f"{source}: {e}") from e
        tokenizer = _tokenizer(path, hf_template)
        if defer_weights and family == "dense":
            return _deferred(
                config,
                lambda: load_hf_state(path, cfg),
                (tokenizer, family, source, device, dtype, architecture),
            )
        model = _build_with_state(config, load_hf_state(path, cfg))
        return _finish(model, config, tokenizer, family, source, device, dtype, architecture)
    return _load_olmo_core_dist(path, device, dtype, architecture, hf_template)


def _init_cached(config: TransformerConfig, source: str, seed: int) -> bool:
    from .init_cache import MIN_PARAMS, cache_path

    return config.num_params >= MIN_PARAMS and cache_path(source, seed) is not None


def _deferred(
    config: TransformerConfig,
    fetch: Callable[[], dict[str, torch.Tensor]],
    rest: tuple[Tokenizer, str, str, str | torch.device, torch.dtype, str | None],
) -> LoadedModel:
    tokenizer, family, source, device, dtype, architecture = rest
    pending = PendingWeights(fetch)  # reading starts before the model is even allocated
    loaded = _finish(_zeroed(config, device, dtype), config, tokenizer, *rest[1:])
    loaded.pending = pending
    return loaded


def _tokenizer(path: Path, hf_template: str | None) -> Tokenizer:
    """The tokenizer beside the weights, else the one in ``hf_template``."""
    return Tokenizer.from_dir(tokenizer_dir(path, hf_template))


def _load_olmo_core_dist(
    path: Path,
    device: str | torch.device,
    dtype: torch.dtype,
    architecture: str | None,
    hf_template: str | None,
) -> LoadedModel:
    """An OLMo-core trainer checkpoint (``config.json`` + ``model_and_optim/``)."""
    from olmo_core.distributed.checkpoint import load_model_and_optim_state

    cfg = json.loads((path / "config.json").read_text())
    model_cfg = dict(cfg["model"])
    for legacy in ("compile", "dp_config", "tp_config", "float8_config"):
        model_cfg.pop(legacy, None)
    config = TransformerConfig.from_dict(model_cfg)
    tokenizer = _tokenizer(path, hf_template)
    model = _allocated(config)
    load_model_and_optim_state(str(path / "model_and_optim"), model)
    return _finish(
        model, config, tokenizer, family_of(config), str(path), device, dtype, architecture
    )


def save_native(
    loaded: LoadedModel,
    out_dir: str | Path,
    *,
    state_dict: dict[str, torch.Tensor] | None = None,
    extra_meta: dict[str, Any] | None = None,
) -> Path:
    """Write our native model dir: ``rlc_model.json`` + ``model.safetensors`` + tokenizer."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = state_dict if state_dict is not None else loaded.model.state_dict()
    save_safetensors(state, out)
    loaded.tokenizer.save(out)
    meta = {
        "format": NATIVE_FORMAT,
        "version": 1,
        "family": loaded.family,
        "source": loaded.source,
        "model_config": loaded.config.as_config_dict(),
        **(extra_meta or {}),
    }
    (out / NATIVE_META).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return out
