"""``load_model``: one entry point for builtin, HF and native (OLMo-core) model sources."""

from __future__ import annotations

import json
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

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


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


def _build_with_state(config: TransformerConfig, state: dict[str, torch.Tensor]) -> Transformer:
    model = config.build(init_device="meta")
    model.init_weights(device=torch.device("cpu"))
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [
        k for k in missing if not (config.tie_word_embeddings and k == "lm_head.w_out.weight")
    ]
    if missing or unexpected:
        raise ModelLoadError(
            f"weights do not match the model: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    return model


def _init_builtin(
    config: TransformerConfig, source: str, seed: int, device: str | torch.device
) -> Transformer:
    """Random-initialise on the CPU from ``seed``, or read that initialisation back from
    the init cache (``runtime.models.init_cache``), restoring it straight onto ``device``."""
    from filelock import FileLock

    from .init_cache import MIN_PARAMS, cache_path

    def init_on_cpu() -> Transformer:
        # OLMo-core initialises some modules (MoE shared MLPs) from the global RNG, not from
        # init_seed: seed it too, without disturbing the caller's RNG stream.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = config.build(init_device="cpu")
            model.init_weights(device=torch.device("cpu"))
        return model

    path = cache_path(source, seed) if config.num_params >= MIN_PARAMS else None
    if path is None:
        return init_on_cpu()
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if path.is_file():
            # every tensor of these models is a parameter in the file: allocate, then fill
            dev = torch.device(device)
            model = config.build(init_device="meta").to_empty(device=dev)
            model.load_state_dict(load_safetensors(path, device=str(dev)), strict=True)
            return model
        model = init_on_cpu()
        save_safetensors(model.state_dict(), path.parent, filename=path.name)
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
) -> LoadedModel:
    """Build an OLMo-core ``Transformer`` from ``builtin:NAME``, an HF dir, a native dir or
    an OLMo-core checkpoint (``hf_template``: where its tokenizer lives when not beside it).

    Builtins are random-initialised on CPU from ``seed`` (identical on every device); large
    ones are initialised once and then read back from the init cache.
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
        model = _init_builtin(config, source, seed, device)
        return _finish(model, config, tokenizer, family, source, device, dtype, architecture)
    path = Path(source)
    if fmt == "native":
        root = native_root(path)
        meta = json.loads((root / NATIVE_META).read_text())
        config = TransformerConfig.from_dict(meta["model_config"])
        tokenizer = Tokenizer.from_dir(root)
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
        model = _build_with_state(config, load_hf_state(path, cfg))
        return _finish(model, config, tokenizer, family, source, device, dtype, architecture)
    return _load_olmo_core_dist(path, device, dtype, architecture, hf_template)


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
    model = config.build(init_device="cpu")
    model.init_weights(device=torch.device("cpu"))
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
