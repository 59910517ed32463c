"""Compiler caches (``[compiler_cache]``): private Triton / Inductor caches per process,
seeded from shared immutable generations and published back, best effort.

Why: Triton and Inductor compile kernels on first use (minutes for a large model); a
shared, writable cache directory on network storage is a known source of torn files. So
each process compiles into its own local directory (``TRITON_CACHE_DIR``,
``TORCHINDUCTOR_CACHE_DIR``), seeded at start from the newest complete generation under
``shared_root``; after warm-up the node copies what its processes compiled into a new
generation directory, written under a temporary name and renamed into place (atomic on
one filesystem), never modified afterwards. Publication is bounded by
``max_storage_bytes`` and ``publish_interval_seconds`` and never fails the run.

In a Beaker job the spec carries the cache environment (``compiler.emit.beaker``):
``RLC_COMPILER_CACHE_DIR`` names the node-local directory the private caches live under,
``RLC_COMPILER_CACHE_SHARED_ROOT`` the shared root on the job's mounts; the runtime reads
both and refuses a shared root that differs from the manifest's (an edited job spec).
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from contract.defaults import default_of
from contract.spec.compiler_cache import CompilerCacheSection
from runtime.config import ConfigError

log = logging.getLogger(__name__)
GENERATIONS = "generations"
COMPLETE = "COMPLETE"
ENV_VARS = {"TRITON_CACHE_DIR": "triton", "TORCHINDUCTOR_CACHE_DIR": "inductor"}
LOCAL_DIR_ENV = "RLC_COMPILER_CACHE_DIR"
SHARED_ROOT_ENV = "RLC_COMPILER_CACHE_SHARED_ROOT"


class CompilerCacheError(ConfigError):
    """The job's cache environment disagrees with the manifest."""


def tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def _signature(root: Path) -> tuple[tuple[str, int], ...]:
    return tuple(
        sorted((str(p.relative_to(root)), p.stat().st_size) for p in root.rglob("*") if p.is_file())
    )


@dataclass(frozen=True)
class CompilerCache:
    """``[compiler_cache]`` (defaults are the spec's, `contract.defaults`)."""

    enabled: bool = default_of(CompilerCacheSection, "enabled")
    shared_root: Path | None = None
    restore: bool = default_of(CompilerCacheSection, "restore")
    max_storage_bytes: int = default_of(CompilerCacheSection, "max_storage_bytes")
    publish_interval_seconds: float = default_of(CompilerCacheSection, "publish_interval_seconds")

    @classmethod
    def from_contract(
        cls, cc: CompilerCacheSection, env: Mapping[str, str] | None = None
    ) -> CompilerCache:
        """From the manifest's ``config.compiler_cache`` section (and the job's environment)."""
        root = cc.shared_root
        env = os.environ if env is None else env
        carried = env.get(SHARED_ROOT_ENV)
        if carried and cc.enabled and carried != (root or ""):
            raise CompilerCacheError(
                f"{SHARED_ROOT_ENV}={carried} but the manifest's compiler_cache.shared_root is "
                f"{root!r}; the job spec was edited after compile (recompile instead)"
            )
        return cls(
            enabled=cc.enabled,
            shared_root=None if not root else Path(root),
            restore=cc.restore,
            max_storage_bytes=cc.max_storage_bytes,
            publish_interval_seconds=cc.publish_interval_seconds,
        )

    # ---- generations -------------------------------------------------------------------
    def newest_generation(self) -> Path | None:
        """The newest generation that finished publishing (has its COMPLETE marker)."""
        if self.shared_root is None:
            return None
        gens = self.shared_root / GENERATIONS
        try:
            done = [g for g in gens.iterdir() if (g / COMPLETE).is_file()]
        except OSError:
            return None
        return max(done, key=lambda g: g.name) if done else None

    def publish(self, private_dirs: list[Path]) -> Path | None:
        """Copy the private caches into a new immutable generation; None when skipped.

        Best effort: nothing to publish, over the byte budget, or any I/O error skips
        (and logs) rather than failing the run.
        """
        if self.shared_root is None:
            return None
        sources = [d for d in private_dirs if d.is_dir() and any(d.rglob("*"))]
        if not sources:
            return None
        size = sum(tree_bytes(d) for d in sources)
        if size > self.max_storage_bytes:
            log.warning(
                "compiler cache: %d bytes exceed compiler_cache.max_storage_bytes=%d; not "
                "published",
                size,
                self.max_storage_bytes,
            )
            return None
        gens = self.shared_root / GENERATIONS
        name = f"gen-{time.time_ns():020d}-{socket.gethostname()}-{os.getpid()}"
        tmp = self.shared_root / f".tmp-{uuid.uuid4().hex}"
        try:
            gens.mkdir(parents=True, exist_ok=True)
            for d in sources:
                shutil.copytree(d, tmp, dirs_exist_ok=True)
            (tmp / COMPLETE).write_text(f"{size}\n")
            final = gens / name
            os.rename(tmp, final)
            return final
        except OSError as exc:
            log.warning("compiler cache: publication to %s failed: %s", self.shared_root, exc)
            shutil.rmtree(tmp, ignore_errors=True)
            return None


class CacheSession:
    """One node's private caches: a seed restored once, a private copy per process."""

    def __init__(self, cache: CompilerCache, base: Path | None = None) -> None:
        self.cache = cache
        if base is None:  # under the job's node-local cache directory when it names one
            local = os.environ.get(LOCAL_DIR_ENV)
            if local:
                Path(local).mkdir(parents=True, exist_ok=True)
            base = Path(tempfile.mkdtemp(prefix="rlc-compiler-cache-", dir=local or None))
        self.base = base
        self.seed = self.base / "seed"
        self.seed.mkdir(parents=True, exist_ok=True)
        self.restored_from: Path | None = None
        self.dirs: dict[str, Path] = {}
        self.published: list[Path] = []
        self._last_signature: tuple[tuple[str, int], ...] = ()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if cache.enabled and cache.restore:
            gen = cache.newest_generation()
            if gen is not None:
                shutil.copytree(gen, self.seed, dirs_exist_ok=True, ignore=_ignore_marker)
                self.restored_from = gen
                self._last_signature = _signature(self.seed)

    def env_for(self, role: str) -> dict[str, str]:
        """Cache variables for one process (its own directory, seeded); empty when off."""
        if not self.cache.enabled:
            return {}
        private = self.dirs.get(role)
        if private is None:
            private = self.base / "proc" / role.replace(":", "-")
            shutil.copytree(self.seed, private, dirs_exist_ok=True)
            self.dirs[role] = private
        return {var: str(private / sub) for var, sub in ENV_VARS.items()}

    def publish_now(self) -> Path | None:
        """Publish when the private caches changed since the last generation."""
        if not self.cache.enabled or self.cache.shared_root is None:
            return None
        merged = self.base / "merged"
        shutil.rmtree(merged, ignore_errors=True)
        for d in self.dirs.values():
            if d.is_dir():
                shutil.copytree(d, merged, dirs_exist_ok=True)
        if not merged.is_dir():
            return None
        sig = _signature(merged)
        if sig == self._last_signature:
            return None
        out = self.cache.publish([merged])
        if out is not None:
            self._last_signature = sig
            self.published.append(out)
        return out

    def start_publisher(self) -> None:
        """Publish every ``publish_interval_seconds`` from a background thread."""
        if not self.cache.enabled or self.cache.shared_root is None or self._thread:
            return

        def loop() -> None:
            while not self._stop.wait(self.cache.publish_interval_seconds):
                self._publish_or_warn()

        self._thread = threading.Thread(target=loop, name="compiler-cache", daemon=True)
        self._thread.start()

    def _publish_or_warn(self) -> None:
        """Publishing is a cache's best effort: a full or vanished shared disk costs the next
        job its warm start, never this run (one line, then the run goes on or ends as it
        would)."""
        try:
            self.publish_now()
        except Exception as exc:
            print(
                f"rlc: warning: compiler cache not published to {self.cache.shared_root}: "
                f"{type(exc).__name__}: {exc}",
                file=sys.stderr,
                flush=True,
            )

    def close(self, publish: bool = True) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        if publish:
            self._publish_or_warn()
        shutil.rmtree(self.base, ignore_errors=True)


def _ignore_marker(_dir: str, names: list[str]) -> list[str]:
    return [n for n in names if n == COMPLETE]
