"""The derived-artifact cache (compiler/derive/derived.py): one function builds every artifact from
its sources and stores it under a key of their bytes; nothing stale, corrupt or foreign is
ever loaded, and an unusable cache directory only costs time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.derive import derived

ROOT = Path(__file__).resolve().parents[2]


class Counter:
    def __init__(self, src: Path):
        self.src = src
        self.builds = 0

    def build(self) -> bytes:
        self.builds += 1
        return self.src.read_bytes().upper()

    def get(self) -> str:
        return derived.derived(
            "test-upper", [self.src], self.build, lambda b: b.decode(), libs=("lark",)
        )


def _entries(cache: Path, kind: str = "test-upper") -> list[Path]:
    return sorted((cache / "derived" / kind).glob("*.bin"))


def test_built_once_then_loaded_and_a_source_edit_rebuilds(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RLC_CACHE_DIR", str(tmp_path / "c"))
    src = tmp_path / "grammar.txt"
    src.write_text("abc")
    first = Counter(src)
    assert first.get() == "ABC" and first.builds == 1
    again = Counter(src)  # a later process: the entry is read, nothing is built
    assert again.get() == "ABC" and again.builds == 0
    src.write_text("abd")  # the source changed: another key, so the old entry is never read
    edited = Counter(src)
    assert edited.get() == "ABD" and edited.builds == 1
    assert len(_entries(tmp_path / "c")) == 2


def test_the_key_covers_kind_sources_and_library_versions() -> None:
    base = derived.key("k", [b"a", "b"], ["lark"])
    assert derived.key("k", [b"a", "b"], ["lark"]) == base
    assert derived.key("other", [b"a", "b"], ["lark"]) != base
    assert derived.key("k", [b"ab"], ["lark"]) != base  # boundaries count
    assert derived.key("k", [b"a", "b"], ["lark", "jinja2"]) != base
    assert derived.library_version("lark") not in ("absent", "unknown")
    assert derived.library_version("pydantic") not in ("absent", "unknown")
    assert derived.library_version("no_such_library_here") == "absent"


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "foreign"])
def test_a_corrupt_or_foreign_entry_is_rebuilt(tmp_path, monkeypatch, damage: str) -> None:
    monkeypatch.setenv("RLC_CACHE_DIR", str(tmp_path / "c"))
    src = tmp_path / "s.txt"
    src.write_text("xyz")
    Counter(src).get()
    (entry,) = _entries(tmp_path / "c")
    data = entry.read_bytes()
    if damage == "flip":
        entry.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    elif damage == "truncate":
        entry.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        entry.write_bytes(b"")
    else:  # a valid entry of another kind, under this key's name
        other = tmp_path / "o.txt"
        other.write_text("evil")
        derived.derived("test-other", [other], other.read_bytes, bytes.decode)
        (foreign,) = _entries(tmp_path / "c", "test-other")
        entry.write_bytes(foreign.read_bytes())
    again = Counter(src)
    assert again.get() == "XYZ" and again.builds == 1
    assert entry.read_bytes() == data  # rewritten intact


def test_an_entry_the_loader_rejects_is_rebuilt(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RLC_CACHE_DIR", str(tmp_path / "c"))
    calls = []

    def load(payload: bytes) -> str:
        calls.append(payload)
        if len(calls) == 2:
            raise ValueError("unreadable")  # e.g. a payload of an older layout
        return payload.decode()

    built = []

    def build() -> bytes:
        built.append(1)
        return b"v"

    assert derived.derived("test-load", [b"s"], build, load) == "v"  # built, stored
    assert derived.derived("test-load", [b"s"], build, load) == "v"  # read, rejected, rebuilt
    assert len(built) == 2 and len(calls) == 3


@pytest.mark.parametrize("where", ["off", "under-a-file"])
def test_an_unusable_cache_dir_builds_in_memory(tmp_path, monkeypatch, where: str) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("RLC_CACHE_DIR", "off" if where == "off" else str(blocker / "cache"))
    src = tmp_path / "s.txt"
    src.write_text("q")
    for _ in range(2):
        c = Counter(src)
        assert c.get() == "Q" and c.builds == 1  # built every time, never an error


def test_concurrent_writers_leave_one_intact_entry(tmp_path, monkeypatch) -> None:
    """Processes racing to store the same artifact (pytest-xdist, parallel `rlc` runs)."""
    code = (
        "import sys, time\n"
        "from compiler.derive import derived\n"
        "def build():\n"
        "    time.sleep(0.2)\n"
        "    return sys.argv[1].encode() * 50000\n"
        "v = derived.derived('test-race', [b'same'], build, bytes.decode)\n"
        "assert v == 'ab' * 50000, len(v)\n"
    )
    env = {**os.environ, "RLC_CACHE_DIR": str(tmp_path)}
    procs = [
        subprocess.Popen([sys.executable, "-c", code, "ab"], cwd=ROOT, env=env) for _ in range(4)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    files = os.listdir(tmp_path / "derived" / "test-race")
    assert len(files) == 1 and files[0].endswith(".bin")  # no temporary file left behind
    monkeypatch.setenv("RLC_CACHE_DIR", str(tmp_path))
    assert derived.derived("test-race", [b"same"], lambda: b"rebuilt", bytes.decode) == (
        "ab" * 50000
    )


def test_first_compile_builds_every_artifact_and_later_ones_only_read(tmp_path) -> None:
    """What a fresh install does: the first `rlc compile` fills the cache, the next compile
    (another process) reads every artifact back and writes the same files."""
    cache = tmp_path / "cache"
    env = {**os.environ, "RLC_CACHE_DIR": str(cache), "RLC_NO_CACHE": "1"}
    rlc = Path(sys.executable).parent / "rlc"
    outputs = []
    for run in ("first", "second"):
        out = tmp_path / run
        proc = subprocess.run(
            [str(rlc), "compile", "specs/examples/quickstart.toml", "-o", str(out)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        entries = {p: p.stat().st_mtime_ns for p in (cache / "derived").rglob("*.bin")}
        outputs.append(
            (entries, {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()})
        )
    kinds = {p.parent.name for p in outputs[0][0]}
    assert {
        "lark-runtime",
        "lalr-parse-toml",
        "rules",
        "fast-spec",
        "fast-beaker",
        "jinja-beaker",
        "spec-aliases",
        "spec-field-tree",
        "spec-schema-digest",
    } <= kinds
    assert outputs[1][0] == outputs[0][0]  # nothing rebuilt or rewritten
    assert outputs[1][1] == outputs[0][1]


_BUILDERS = [
    ("compiler.derive.fastgen", "generate_spec", "compiler.derive.fastpath:spec_sources()"),
    ("compiler.derive.fastgen", "generate_beaker", "compiler.derive.fastpath:beaker_sources()"),
    ("compiler.spec.bind", "aliases_from_models", "compiler.spec.bind:ALIASES_READS"),
    ("compiler.resolve.resolve", "model_field_trees", "compiler.resolve.resolve:FIELD_TREE_READS"),
    (
        "compiler.manifest.manifest",
        "_schema_digest_now",
        "compiler.manifest.manifest:SCHEMA_DIGEST_READS",
    ),
]


@pytest.mark.parametrize(
    ("module", "builder", "declared"), _BUILDERS, ids=[b[1] for b in _BUILDERS]
)
def test_declared_sources_cover_what_the_builder_runs(module, builder, declared) -> None:
    """Each artifact derived from the spec models names, in its key, every compiler module
    its builder imports (in a fresh process; the contract's modules too), so an edit to any of them changes the key:
    a stale validator or table cannot be loaded."""
    code = (
        "import importlib, sys\n"
        "from pathlib import Path\n"
        "from compiler.derive import fastpath\n"
        f"getattr(importlib.import_module({module!r}), {builder!r})()\n"
        f"mod, expr = {declared!r}.split(':')\n"
        "value = eval(expr, vars(importlib.import_module(mod)))\n"
        "if expr.isupper():\n"
        "    value = [*fastpath.model_sources(), *(fastpath.HERE / n for n in value)]\n"
        "declared = {str(p) for p in value}\n"
        "used = {m.__file__ for n, m in list(sys.modules.items())\n"
        "        if n.split('.')[0] in ('compiler', 'contract')\n"
        "        and n != 'compiler.derive.derived' and getattr(m, '__file__', None)}\n"
        "missing = sorted(str(Path(f).relative_to(fastpath.HERE.parent)) for f in used - declared)\n"
        "assert not missing, missing\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_generated_code_is_committed() -> None:
    """Derived code lives in the cache only: no generated module sits in the package (a
    rebase that takes back an old generated file fails here)."""
    generated = [
        p.relative_to(ROOT)
        for p in (ROOT / "compiler").rglob("*.py")
        if p.name in ("_standalone.py", "_fast.py", "_beaker_fast.py")
        or p.parent.name == "_jinja"
        or "do not edit" in p.read_text(encoding="utf-8")[:400]
    ]
    assert generated == []


def test_the_compile_cache_key_covers_the_contract() -> None:
    """The spec models live in `contract/`: an edit there must change the compile cache key
    like an edit to the compiler does (a stale compile is never replayed)."""
    from compiler.derive.compile_cache import _tool_sources

    files = {p for p in _tool_sources(()) if isinstance(p, Path)}
    assert ROOT / "contract" / "spec" / "inference.py" in files
    assert ROOT / "contract" / "plan.py" in files
