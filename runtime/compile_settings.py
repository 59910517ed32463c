"""Settings for the code compiled here on purpose: Dynamo's recompile limits, raised, and
AOTAutograd's cache, opened to OLMo-core's autocast regions.

Recompile limits: one compiled function serves many variants by design here: a decode
block per batch and length bucket and sampling mode, a trainer block per sliding-window
size, grad mode and row length. Dynamo's default limit (8 entries per code object) would
silently send the ninth variant back to eager Python, which costs far more than the
compile it saves.

Autocast regions: OLMo-core computes RoPE and its norms inside ``torch.autocast(...,
enabled=False)``, so every block graph holds ``_enter_autocast`` / ``_exit_autocast``
nodes, which AOTAutograd's cache does not allow by default: each graph was traced and
partitioned again in every process, even with every kernel in the Inductor cache (on the
CPU, a warm trainer warm-up took 2.1x as long; docs/benchmarks.md). The nodes carry their
arguments (device, dtype, enabled) as constants of the graph, which the cache key hashes,
and the key also holds the autocast state around the graph, so a cached graph is the one
the same key would compile.
"""

from __future__ import annotations

import os

# ``0``: leave AOTAutograd's cache closed to autocast regions (to measure what it saves)
CACHE_AUTOCAST_ENV = "RLC_CACHE_AUTOCAST_GRAPHS"
# the two functions every ``with torch.autocast(...)`` inside a compiled region leaves in
# its graph
AUTOCAST_NODES = (
    "torch.amp.autocast_mode._enter_autocast",
    "torch.amp.autocast_mode._exit_autocast",
)


def prepare_compile(at_least: int) -> None:
    """Before compiling: ``raise_recompile_limits(at_least)`` and ``cache_autocast_graphs``."""
    raise_recompile_limits(at_least)
    cache_autocast_graphs()


def raise_recompile_limits(at_least: int) -> None:
    """Let each compiled code object hold at least ``at_least`` variants."""
    import torch._dynamo

    cfg = torch._dynamo.config
    for knob in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(cfg, knob):
            setattr(cfg, knob, max(int(getattr(cfg, knob)), at_least))


def cache_autocast_graphs() -> None:
    """Let AOTAutograd's (and Inductor's) cache keep graphs with autocast regions; keyed
    by the torch version, so another torch compiles afresh."""
    if os.environ.get(CACHE_AUTOCAST_ENV, "1") == "0":
        return
    import torch
    import torch._inductor.config

    marked = dict(torch._inductor.config.unsafe_marked_cacheable_functions)
    marked.update({name: torch.__version__ for name in AUTOCAST_NODES})
    torch._inductor.config.unsafe_marked_cacheable_functions = marked


def aot_cache_counts() -> dict[str, int]:
    """AOTAutograd's cache lookups in this process so far: hits, misses, bypasses (a
    bypass compiles without the cache; its cause is logged by torch at INFO)."""
    from torch._dynamo.utils import counters

    aot = counters["aot_autograd"]
    return {kind: int(aot[f"autograd_cache_{kind}"]) for kind in ("hit", "miss", "bypass")}
