"""SGLang as it really is: every flag rlc emits and every endpoint the runtime calls, checked
against the pinned sglang wheel's own source (downloaded with pip, parsed, never imported).

The wheel is fetched once into a cache directory (``RLC_SGLANG_WHEEL`` names a wheel already
on disk); the module skips, saying so, only where it cannot be fetched."""

from __future__ import annotations

import ast
import importlib.util
import re
import zipfile
from pathlib import Path
from typing import Any

import pytest
from sglang_wheel import PIN, ROOT, pinned_wheel

SGLANG_SPECS = ("gsm8k-dense.toml", "moe-async.toml", "multinode.toml")
VARIANTS = (
    (),
    ("inference.cuda_graph_decode=false", "inference.chunked_prefill_size=4096"),
)


@pytest.fixture(scope="module")
def wheel() -> Path:
    return pinned_wheel()


@pytest.fixture(scope="module")
def flags(wheel: Path) -> set[str]:
    """Every option string sglang's server parser accepts (flags and aliases)."""
    spec = importlib.util.spec_from_file_location(
        "gen_native_sglang", ROOT / "scripts" / "gen_native_sglang.py"
    )
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    table: dict[str, Any] = gen.generate(str(wheel))
    out: set[str] = set()
    for key, opt in table["options"].items():
        out.add(opt.get("flag") or "--" + key.replace("_", "-"))
        out.update(a for a in opt.get("aliases", []) if a.startswith("-"))
        if opt.get("negatable"):
            out.add("--no-" + key.replace("_", "-"))
    assert "--model-path" in out and "--tp-size" in out
    return out


@pytest.fixture(scope="module")
def routes(wheel: Path) -> set[str]:
    """Paths of sglang's HTTP server: route decorators and add_api_route calls."""
    with zipfile.ZipFile(wheel) as z:
        trees = [
            ast.parse(z.read(f"sglang/srt/entrypoints/{name}.py").decode())
            for name in ("http_server", "v1_loads")  # v1_loads: a router the app includes
        ]
    out: set[str] = set()
    for node in (n for tree in trees for n in ast.walk(tree)):
        calls = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            calls = [d for d in node.decorator_list if isinstance(d, ast.Call)]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_api_route":
            calls = [node]
        for call in calls:
            if call.args and isinstance(call.args[0], ast.Constant):
                out.add(str(call.args[0].value))
    assert "/generate" in out
    return out


def compiled_argv(spec: str, sets: tuple[str, ...]) -> list[list[str]]:
    from compiler.pipeline import compile_spec

    manifest = compile_spec(str(ROOT / "specs" / "examples" / spec), list(sets)).manifest()
    argv = manifest["commands"]["engine_argv"]
    assert argv and argv[0][:3] == ["python", "-m", "sglang.launch_server"]
    return [list(a) for a in argv]


@pytest.mark.parametrize("spec", SGLANG_SPECS)
@pytest.mark.parametrize("sets", VARIANTS, ids=lambda s: "+".join(s) or "default")
def test_every_emitted_flag_exists_once(spec: str, sets: tuple[str, ...], flags: set[str]) -> None:
    from runtime.engines.sglang import sglang_argv

    for argv in compiled_argv(spec, sets):
        # as the runtime really starts it: host and port set to what the node gave it
        final = sglang_argv(argv, host="0.0.0.0", port=40123, python="python")
        emitted = [a.split("=", 1)[0] for a in final[3:] if a.startswith("--")]
        unknown = [f for f in emitted if f not in flags]
        assert not unknown, f"{spec}: sglang {PIN} has no {unknown}"
        twice = sorted({f for f in emitted if emitted.count(f) > 1})
        assert not twice, f"{spec}: emitted twice: {twice}"


def test_native_sglang_conflicting_with_a_field_is_a_positioned_error(tmp_path: Path) -> None:
    from compiler.pipeline import compile_spec

    spec = tmp_path / "s.toml"
    text = (ROOT / "specs" / "examples" / "gsm8k-dense.toml").read_text()
    spec.write_text(text + "\n[native.sglang]\ncuda_graph_max_bs_decode = 8\n")
    found = [d for d in compile_spec(str(spec), []).errors if d.code == "native-owned"]
    assert found and "inference.cuda_graph_max_bs" in " ".join(found[0].help)
    assert found[0].span is not None and found[0].span.line == text.count("\n") + 3


def test_every_called_endpoint_exists_or_has_a_fallback(routes: set[str]) -> None:
    from runtime.engines.sglang import ENGINE_ENDPOINTS

    for path, fallback in ENGINE_ENDPOINTS.items():
        assert path in routes or (fallback is not None and fallback in routes), path


def test_the_endpoint_table_covers_what_the_runtime_calls() -> None:
    from runtime.engines.sglang import ENGINE_ENDPOINTS

    sources = [
        ROOT / "runtime" / "engines" / "client.py",
        ROOT / "runtime" / "entrypoints" / "execute.py",
    ]
    sources += sorted((ROOT / "runtime" / "publication").glob("*.py"))
    called: set[str] = set()
    for path in sources:
        text = path.read_text()
        called.update(re.findall(r"\{url\}(/[a-z_]+)", text))
        called.update(re.findall(r"_request\(\"[A-Z]+\", \"(/[a-z_]+)\"", text))
        called.update(re.findall(r"\.(?:get|post)\(\"(/[a-z_]+)\"", text))
        called.update(re.findall(r"\"(/(?:init|update|destroy|get)_weights?_[a-z_]+)\"", text))
        called.update(re.findall(r"\"(/(?:pause|continue)_generation|/v1/loads)\"", text))
    assert called - {"/workers"} <= set(ENGINE_ENDPOINTS), called - set(ENGINE_ENDPOINTS)
    assert {"/pause_generation", "/continue_generation", "/v1/loads"} <= called


def _wheel_source(wheel: Path, member: str) -> str:
    with zipfile.ZipFile(wheel) as z:
        return z.read(member).decode()


def test_refresh_publication_uses_the_pause_api_the_wheel_has(wheel: Path) -> None:
    """What RefreshPublisher relies on: ``/pause_generation`` with ``mode = "retract"``,
    ``/continue_generation`` with an empty body, a paused engine taking a weight update
    without its writer lock and flushing with retracted requests queued, and per-token
    versions as ``meta_info.weight_versions`` spans of ``version``/``start``/``end``."""
    from runtime.engines.embedded.engine import PAUSE_MODES, version_spans
    from runtime.publication.refresh import PAUSE

    io = ast.parse(_wheel_source(wheel, "sglang/srt/managers/io_struct.py"))
    classes = {n.name: n for n in ast.walk(io) if isinstance(n, ast.ClassDef)}
    pause = classes["PauseGenerationReqInput"]
    (mode,) = [
        n
        for n in pause.body
        if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", "") == "mode"
    ]
    modes = {e.value for e in ast.walk(mode.annotation) if isinstance(e, ast.Constant)}
    assert PAUSE["mode"] in modes and set(PAUSE_MODES) == modes
    cont = classes["ContinueGenerationReqInput"]
    assert all(  # every field has a default: {} is a valid body
        n.value is not None for n in cont.body if isinstance(n, ast.AnnAssign)
    )
    tm = _wheel_source(wheel, "sglang/srt/managers/tokenizer_manager.py")
    assert "self.model_update_lock.writer_lock if not is_paused else nullcontext()" in tm
    sched = _wheel_source(wheel, "sglang/srt/managers/scheduler.py")
    assert "self.is_fully_idle(ignore_waiting=self._engine_paused)" in sched
    assert "retract_all(" in sched
    wv = _wheel_source(wheel, "sglang/srt/utils/weight_versions.py")
    assert 'meta_info["weight_versions"] = [' in wv
    for key in ('"version": span.version', '"start": span.start', '"end": min(span.end'):
        assert key in wv
    assert set(version_spans(["1"], "1")[0]) == {"version", "start", "end"}


def test_engine_drain_reads_the_load_report_the_wheel_has(wheel: Path) -> None:
    """EngineDrainPublisher waits for ``/v1/loads?include=core`` to show no running and no
    waiting request: both are core fields of sglang's LoadSnapshot, listed under ``loads``."""
    from runtime.publication.drain import LOADS

    src = _wheel_source(wheel, "sglang/srt/managers/load_snapshot.py")
    tree = ast.parse(src)
    (snap,) = [
        n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "LoadSnapshot"
    ]
    fields = {
        n.target.id
        for n in snap.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }
    assert {"num_running_reqs", "num_waiting_reqs"} <= fields
    assert '"core"' in src and "_SECTION_FIELDS" in src
    loads = _wheel_source(wheel, "sglang/srt/entrypoints/v1_loads.py")
    assert f'@router.get("{LOADS}")' in loads and '"loads": loads' in loads
