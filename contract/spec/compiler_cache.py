"""[compiler_cache]: Triton compiler caches."""

from __future__ import annotations

from contract.spec._base import Section, fld
from contract.spec.constants import DEFAULT_SHARED_ROOT

__all__ = ["DEFAULT_SHARED_ROOT", "CompilerCacheSection"]


class CompilerCacheSection(Section):
    enabled: bool = fld(True, description="private local Triton cache per process")
    shared_root: str | None = fld(
        None,
        description="shared immutable cache generations (absolute; WEKA roots need a tmp-N[hdwmy] TTL component)",
        derived="'" + DEFAULT_SHARED_ROOT + "' on GPU runs, none on CPU",
        pattern=r"^/",
    )
    restore: bool = fld(True, description="restore from the shared root at start")
    max_storage_bytes: int = fld(8 * 1024**3, description="cap on published bytes", ge=0)
    publish_interval_seconds: float = fld(600.0, description="seconds between publications", gt=0.0)
