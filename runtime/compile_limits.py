"""Dynamo's recompile limits, raised for code that is compiled in many shapes on purpose.

One compiled function serves many variants by design here: a decode block per batch and
length bucket and sampling mode, a trainer block per sliding-window size, grad mode and row
length. Dynamo's default limit (8 entries per code object) would silently send the ninth
variant back to eager Python, which costs far more than the compile it saves.
"""

from __future__ import annotations


def raise_recompile_limits(at_least: int) -> None:
    """Let each compiled code object hold at least ``at_least`` variants."""
    import torch._dynamo

    cfg = torch._dynamo.config
    for knob in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(cfg, knob):
            setattr(cfg, knob, max(int(getattr(cfg, knob)), at_least))
