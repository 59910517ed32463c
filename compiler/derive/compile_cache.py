"""A content-addressed cache of `rlc compile` results, so recompiling an unchanged spec
does not pay for pydantic, the parser and the emitters (cold start ~0.1 s instead of ~0.6 s).

The key covers everything the output depends on: the spec bytes and the path as given, the
overrides, the working directory, and the bytes of every compiler source, schema, rule
file, template, recipe and the runtime lock, with the library versions, made by
`compiler.derive.derived.key` like every derived artifact's key (results are per spec, so they are
stored here, not as derived artifacts). The model checkpoint files
the compile read (``compiler.spec.model_source``) are stored with the entry and re-checked on replay. A hit replays the exact
files and messages of the original compile; any doubt (a file in the way with other bytes,
an unreadable entry) falls back to a real compile. ``RLC_NO_CACHE=1`` disables it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from contract.safe_read import SPEC_LIMIT, read_regular

_VERSION = "rlc-compile-cache-2"


def enabled() -> bool:
    off = os.environ.get("RLC_CACHE_DIR") == "off"
    return not off and os.environ.get("RLC_NO_CACHE", "") in ("", "0")


def _cache_root() -> Path:
    base = os.environ.get("RLC_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "rlc"
    )
    return Path(base) / "compile"


def _tool_sources(callers: tuple[Path, ...]) -> list[str | bytes | Path]:
    """Every file of the tool a compile may read (name relative to its root, and bytes)."""
    from compiler import resources

    package = Path(__file__).resolve().parents[1]  # the compiler package
    roots = [
        package,
        package.parent / "contract",  # the spec models the compile binds to
        *callers,
        resources.schemas_dir(),
        resources.templates_dir(),
        resources.recipes_dir(),
    ]
    out: list[str | bytes | Path] = []
    for i, root in enumerate(roots):
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                if name.endswith((".pyc", ".tmp")):
                    continue
                p = Path(dirpath) / name
                out += [f"{i}:{p.relative_to(root)}", p]
    lock = resources.runtime_lock_path()
    out += ["runtime.lock.json", lock.read_bytes() if lock.exists() else b""]
    return out


_LIBS = ("lark", "jinja2", "pydantic", "fastjsonschema")


def key(
    spec: str, overrides: tuple[str, ...], out_dir: str, callers: tuple[Path, ...] = ()
) -> str | None:
    """The cache key; ``callers`` are the source folders of the code that renders the output
    (the CLI's commands), so an edit there misses the cache like an edit to the compiler."""
    from compiler.derive.derived import key as derived_key

    try:
        data = read_regular(spec, SPEC_LIMIT)
        args = json.dumps([spec, list(overrides), out_dir, os.getcwd()])
        return derived_key(_VERSION, [args, data, *_tool_sources(callers)], _LIBS)
    except OSError:
        return None


def _atomic_write(path: Path, data: bytes, mode: int) -> None:
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".rlc-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def replay(cache_key: str) -> dict[str, Any] | None:
    """Write the cached files (same bytes, same modes); None on a miss or any conflict."""
    entry_path = _cache_root() / f"{cache_key}.json"
    try:
        entry = json.loads(entry_path.read_text())
        from base64 import b64decode

        files = [(Path(f["path"]), b64decode(f["data"]), int(f["mode"])) for f in entry["files"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    from compiler.spec.model_source import identity

    inputs = entry.get("inputs") or {}
    if any(identity(p) != ident for p, ident in inputs.items()):
        return None  # the model checkpoint the compile read has changed
    todo = []
    for path, data, mode in files:
        if path.exists():
            try:
                if path.read_bytes() != data:
                    return None  # something else is there: let the real compile explain
            except OSError:
                return None
        else:
            todo.append((path, data, mode))
    for path, data, mode in todo:
        _atomic_write(path, data, mode)
    result: dict[str, Any] = entry
    return result


def store(cache_key: str, directory: Path, stdout: str, stderr: str) -> None:
    """Record every file under ``directory`` (a directory this compile created)."""
    from base64 import b64encode

    files = []
    for dirpath, _dirs, names in os.walk(directory):
        for name in sorted(names):
            p = Path(dirpath) / name
            st = p.stat()
            files.append(
                {
                    "path": str(p),
                    "mode": st.st_mode & 0o777,
                    "data": b64encode(p.read_bytes()).decode(),
                }
            )
    from compiler.spec.model_source import touched

    entry = {"files": files, "stdout": stdout, "stderr": stderr, "inputs": touched()}
    root = _cache_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        _atomic_write(root / f"{cache_key}.json", json.dumps(entry).encode(), 0o644)
        _prune(root)
    except OSError:
        pass


MAX_ENTRIES = 256


def _prune(root: Path) -> None:
    """Keep the newest MAX_ENTRIES entries."""
    entries = sorted(root.glob("*.json"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    for old in entries[MAX_ENTRIES:]:
        old.unlink(missing_ok=True)
