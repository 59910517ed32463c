"""``rlc run SPEC|MANIFEST``: compile if needed, then carry the manifest out on this machine.

A spec is compiled exactly as ``rlc compile`` would; the manifest is written under
``<output.root>/manifests/`` by content digest (manifests are immutable, so a run with
other ``--set`` values gets its own file), then ``python -m runtime.entrypoints.execute`` runs it
in a child process. The compiler never imports the runtime: the runtime's own exit code
(0 done, 2 unusable manifest, 3 runtime failure) is passed through.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from rlc_cli.commands._common import EXIT_USER, emit_diagnostics, format_option, guarded

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a Ctrl-C
# when this command's module loaded: the start of `rlc run` for the start-up breakdown
_STARTED = time.time()


def manifest_path_for(manifest: dict[str, Any]) -> Path:
    """Where `rlc run` keeps a compiled manifest: by digest under the run's output root."""
    root = Path(str((manifest.get("paths") or {}).get("root") or f"build/{manifest['name']}"))
    short = str(manifest["digest"]).removeprefix("sha256:")[:16]
    return root / "manifests" / f"{manifest['name']}-{short}.json"


def compile_for_run(spec: str, overrides: tuple[str, ...], fmt: str) -> Path:
    """Compile ``spec`` (raises DiagnosticError on errors) and write its manifest."""
    from compiler.manifest.manifest import write_manifest
    from compiler.pipeline import compile_spec

    result = compile_spec(spec, list(overrides))
    if result.warnings:
        emit_diagnostics(result.warnings, result.sources, fmt)
    manifest = result.manifest()  # raises DiagnosticError on errors
    path = write_manifest(manifest, manifest_path_for(manifest))
    from compiler.manifest.trust import signing_key, write_signature

    key = signing_key()
    if key is not None:  # the runtime requires a signature when the key is set
        write_signature(path, key)
    return path


def run_manifest(
    path: Path,
    resume: str | None,
    progress: bool,
    local_nodes: int = 0,
    bench: bool = False,
    stamps: dict[str, str] | None = None,
) -> int:
    """Run ``python -m runtime.entrypoints.execute`` (or one per simulated node) and return its exit code.

    Ctrl-C reaches the child too (same process group); we wait for it to save and stop.
    """
    if local_nodes:
        argv = [sys.executable, "-m", "runtime.launch.local_nodes", str(path)]
        argv += ["--nodes", str(local_nodes)]
    else:
        argv = [sys.executable, "-m", "runtime.entrypoints.execute", str(path)]
    if resume:
        argv += ["--resume", resume]
    if not progress and not local_nodes:
        argv.append("--no-progress")
    # Ctrl-C reaches the child (same process group), which saves and stops; this process
    # ignores it from before the child exists, and the child gets the default back.
    if bench and not local_nodes:
        argv.append("--bench")
    env = dict(os.environ)
    env.update(stamps or {})  # when the command started and compiled: the start-up breakdown
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        proc = subprocess.Popen(argv, env=env, preexec_fn=_child_signals)
    except BaseException:
        signal.signal(signal.SIGINT, previous)
        raise
    try:
        while True:
            try:
                code = proc.wait()
                # a child killed by a signal: the shell's 128 + N (Ctrl-C: 130), not 256 - N
                return 128 - code if code < 0 else code
            except KeyboardInterrupt:  # pragma: no cover - SIGINT is ignored while waiting
                continue
    finally:
        signal.signal(signal.SIGINT, previous)
        if proc.poll() is None:
            proc.terminate()


def _child_signals() -> None:
    """In the child: Ctrl-C as usual, and SIGTERM (save and stop) if `rlc` itself is
    killed (Linux only)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _interrupt_before_start(fn: Callable[..., None]) -> Callable[..., None]:
    """Ctrl-C while compiling (before the runtime child exists): one line, exit 130."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
        except KeyboardInterrupt:
            click.echo("rlc: interrupted before the run started; nothing was trained", err=True)
            sys.exit(EXIT_INTERRUPTED)

    return wrapper


def _require_router_if_planned(manifest_path: Path) -> None:
    """Exit 2 naming the install command when the plan runs sglang-router and it is not
    installed. An unreadable manifest is left to the runtime's own check."""
    import json

    from rlc_cli.extras import install_hint, installed

    try:
        plan = json.loads(Path(manifest_path).read_text())["plan"]["placement"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    if plan.get("router") is None or installed("sglang_router"):
        return
    click.echo(
        "rlc: error: the plan runs sglang-router (inference.router = true) and it is not "
        f"installed: {install_hint('runtime')}, or set inference.router = false",
        err=True,
    )
    sys.exit(EXIT_USER)


@click.command("run")
@click.argument("target", type=click.Path(dir_okay=False))
@click.option(
    "--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a spec field."
)
@click.option(
    "--resume",
    type=click.Choice(["auto", "never", "required"]),
    default=None,
    help="Resume from the newest complete checkpoint (default: checkpoint.resume).",
)
@click.option(
    "--no-progress",
    is_flag=True,
    help="Do not draw the progress bar (nor print progress lines when not in a terminal).",
)
@click.option(
    "--local-nodes",
    type=click.IntRange(min=1),
    default=None,
    help="Run each node of a multi-node plan as its own process on its own loopback address.",
)
@click.option(
    "--bench",
    is_flag=True,
    help="At the end, print where the time went: start-up phases, each collection phase "
    "(first and steady state) and tokens/s/GPU; also written to <output.root>/bench.json.",
)
@format_option
@guarded
@_interrupt_before_start
def command(
    target: str,
    overrides: tuple[str, ...],
    resume: str | None,
    no_progress: bool,
    local_nodes: int | None,
    bench: bool,
    fmt: str,
) -> None:
    """Carry out TARGET (a spec .toml, compiled first, or a manifest .json) on this machine."""
    t0 = _STARTED
    path = Path(target)
    if not path.exists():
        click.echo(f"rlc: error: {target}: no such file", err=True)
        sys.exit(EXIT_USER)
    from rlc_cli.extras import require_extra

    # sglang-router only where the plan runs one (inference.router = false runs without)
    require_extra("runtime", "run", skip=("sglang_router",))
    if path.suffix == ".json":
        if overrides:
            click.echo("rlc: error: --set applies to specs; a manifest is immutable", err=True)
            sys.exit(EXIT_USER)
        manifest_path = path
    else:
        manifest_path = compile_for_run(target, overrides, fmt)
        click.echo(f"rlc: manifest {manifest_path}", err=True)
    _require_router_if_planned(manifest_path)
    stamps = {"RLC_RUN_T0": repr(t0), "RLC_RUN_COMPILED": repr(time.time())}
    sys.exit(run_manifest(manifest_path, resume, not no_progress, local_nodes or 0, bench, stamps))
