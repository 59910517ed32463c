"""Start-up of `rlc run`: seconds from the command to the start of the first collection.

Runs ``python -m rlc_cli.main run SPEC`` as a child process (its stderr copied to
``--out``/startup-LABEL.log as it arrives), waits for the first line of the run's
``metrics.jsonl`` and takes the collection's start as that line's arrival minus its
``time/collection_s``; then stops the run (SIGTERM to its process group) unless
``--collections`` asks for more. Issue 16's target: <= 30 s for the 1B spec on one
NVIDIA H200 (``specs/examples/gpu-dense.toml``).

    python3 benchmarks/gpu/startup.py --label cold
    python3 benchmarks/gpu/startup.py --label warm      # again: init and compiler caches hit
    python3 benchmarks/gpu/startup.py --dry-run         # CPU: compile the spec, print the command
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def command(spec: str, root: Path, sets: list[str]) -> list[str]:
    argv = [sys.executable, "-m", "rlc_cli.main", "run", spec, "--no-progress"]
    for s in [f'output.root="{root}"', *sets]:
        argv += ["--set", s]
    return argv


def _copy_stream(src: Any, dst: Path) -> None:
    with dst.open("a") as f:
        for line in src:
            f.write(line)
            f.flush()


def measure(argv: list[str], metrics: Path, log: Path, timeout_s: float, collections: int) -> dict:
    t0 = time.monotonic()
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    copier = threading.Thread(target=_copy_stream, args=(proc.stdout, log), daemon=True)
    copier.start()
    out: dict[str, Any] = {"command": argv[1:]}
    seen: list[dict[str, Any]] = []
    while time.monotonic() - t0 < timeout_s and proc.poll() is None:
        lines = metrics.read_text().splitlines() if metrics.exists() else []
        now = time.monotonic() - t0
        for line in lines[len(seen) :]:
            rec = json.loads(line)
            seen.append(rec)
            dur = float(rec.get("time/collection_s", 0.0))
            out.setdefault("collections", []).append(
                {"finished_s": now, "collection_s": dur, "started_s": now - dur}
            )
        if len(seen) >= collections:
            break
        time.sleep(0.2)
    if proc.poll() is None:  # stop the run (and its engine/trainer children)
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    copier.join(5)
    out["returncode"] = proc.returncode
    out["wall_s"] = time.monotonic() - t0
    first = (out.get("collections") or [None])[0]
    out["first_collection_start_s"] = None if first is None else first["started_s"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default="specs/examples/gpu-dense.toml")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="spec override")
    ap.add_argument("--collections", type=int, default=1, help="collections to wait for")
    ap.add_argument("--timeout-s", type=float, default=300.0)
    ap.add_argument("--label", default="run")
    ap.add_argument("--target-s", type=float, default=30.0)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu")
    ap.add_argument("--dry-run", action="store_true", help="compile the spec, print the command")
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="rlc-startup-"))
    cmd = command(args.spec, root / "run", args.sets)
    if args.dry_run:
        from compiler.pipeline import compile_spec

        r = compile_spec(str(ROOT / args.spec), [f'output.root="{root / "run"}"', *args.sets])
        shutil.rmtree(root, ignore_errors=True)
        if not r.ok:
            print("\n".join(d.message for d in r.errors), file=sys.stderr)
            return 2
        print(" ".join(cmd[1:]))
        print(
            f"compiled: {r.resolved.config['name']}, model {r.resolved.config['model']['source']}"
        )
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / f"startup-{args.label}.log"
    log.write_text("")
    try:
        res = measure(cmd, root / "run" / "metrics.jsonl", log, args.timeout_s, args.collections)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    res.update(
        {
            "benchmark": "startup",
            "label": args.label,
            "spec": args.spec,
            "target_s": args.target_s,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
    )
    (args.out / f"startup-{args.label}.json").write_text(json.dumps(res, indent=2) + "\n")
    start = res["first_collection_start_s"]
    if start is None:
        print(f"no collection finished in {res['wall_s']:.0f} s (log: {log})")
        return 1
    verdict = "met" if start <= args.target_s else "missed"
    print(
        f"first collection started {start:.1f} s after the command (target {args.target_s:.0f} s: {verdict})"
    )
    for i, c in enumerate(res["collections"]):
        print(f"collection {i + 1}: started {c['started_s']:.1f} s, took {c['collection_s']:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
