"""A cache of random-initialised builtin weights, so a run initialises a model once.

Initialising the 1.5B builtin on the CPU takes ~25-30 s, and a run used to do it twice (the
trainer and the engine process each build the same seeded model). The first loader writes
the initialised state as one safetensors file under ``$RLC_CACHE_DIR/builtin-init`` (default
``~/.cache/rlc``; ``RLC_CACHE_DIR=off`` disables it); any later load of the same builtin,
overrides and seed with the same torch and OLMo-core versions reads it back (a file lock
makes a concurrent second loader wait for the first one's write instead of initialising
again). The bytes are the CPU initialisation's, so weights stay identical on every device.
Small models (under ``MIN_PARAMS``) are cheaper to initialise than to read and skip it.
"""

from __future__ import annotations

import hashlib
import os
from importlib import metadata
from pathlib import Path

import torch
from olmo_core.nn.transformer import Transformer, TransformerConfig

MIN_PARAMS = 50_000_000


def cache_dir() -> Path | None:
    root = os.environ.get("RLC_CACHE_DIR")
    if root == "off":
        return None
    base = Path(root) if root else Path.home() / ".cache" / "rlc"
    return base / "builtin-init"


def cache_path(source: str, seed: int) -> Path | None:
    """Where the initialised state of ``source`` + ``seed`` lives (None: cache off)."""
    root = cache_dir()
    if root is None:
        return None
    try:
        olmo = metadata.version("ai2-olmo-core")
    except metadata.PackageNotFoundError:
        olmo = "unknown"
    key = hashlib.sha256(f"{source}|{seed}|{torch.__version__}|{olmo}".encode()).hexdigest()
    name = source.removeprefix("builtin:").split("?")[0]
    return root / f"{name}-{key[:20]}.safetensors"


def initialise_on_cpu(config: TransformerConfig, seed: int) -> Transformer:
    """The builtin's random initialisation: on the CPU, so identical on every device."""
    # OLMo-core initialises some modules (MoE shared MLPs) from the global RNG, not from
    # init_seed: seed it too, without disturbing the caller's RNG stream.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = config.build(init_device="cpu")
        model.init_weights(device=torch.device("cpu"))
    return model


def ensure_written(
    config: TransformerConfig, source: str, seed: int, path: Path
) -> Transformer | None:
    """Initialise the builtin and write it to ``path``, unless it is there: the model it
    initialised, or None when another loader (an engine, the trainer) wrote it first. The
    lock makes a concurrent loader wait for that write instead of initialising again; the
    write itself is atomic, so reading the file needs no lock."""
    from filelock import FileLock

    from .weights import save_safetensors

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if path.is_file():
            return None
        model = initialise_on_cpu(config, seed)
        save_safetensors(model.state_dict(), path.parent, filename=path.name)
        return model


def write(source: str, seed: int) -> None:
    """Initialise the builtin ``source`` and write it here (if not there yet)."""
    from .builtin import builtin_config
    from .tokenizer import builtin_tokenizer

    path = cache_path(source, seed)
    if path is None:
        return
    tokenizer = builtin_tokenizer(source)
    _, config = builtin_config(source.removeprefix("builtin:"), tokenizer.vocab_size, seed)
    ensure_written(config, source, seed, path)


def main(argv: list[str] | None = None) -> int:
    """``python -m runtime.models.init_cache SOURCE SEED``: initialise the builtin and
    write it here (a loader that must not draw from its own process's RNG runs this)."""
    import sys

    source, seed = (argv if argv is not None else sys.argv[1:])[:2]
    write(source, int(seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
