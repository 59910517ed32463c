"""rlc runtime: carries out a compiled manifest (engines, router, trainer, rewards)."""

import os as _os

if _os.environ.get("RLC_RECORD_READS"):  # opt-in: which spec fields this process reads
    from runtime.record_reads import install_from_env as _install

    _install()
