"""``python -m runtime.launch.local_nodes MANIFEST --nodes N``: simulated nodes on one machine.

Each node of the plan runs the manifest's ``commands.trainer_argv`` (``python -m
runtime.entrypoints.execute {manifest}``, the node entry point a Beaker replica runs too) as its
own process, with ``--no-progress`` and its own node rank and its own loopback address (node K is 127.0.1.K+1; node 0 is the leader and hosts the
registry), through the same ``RLC_*`` variables a scheduler other than Beaker sets. Logs go to
``<output.root>/logs/node-K/``. Like a replicated job, the run fails as a whole: when one node
exits with an error the others are stopped, and the exit code is that node's.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

GRACE_S = 30.0


def node_address(rank: int) -> str:
    return f"127.0.1.{rank + 1}"


def node_env(rank: int, count: int, registry_port: int) -> dict[str, str]:
    return {
        "RLC_NODE_RANK": str(rank),
        "RLC_NUM_NODES": str(count),
        "RLC_LEADER_ADDR": node_address(0),
        "RLC_NODE_ADDR": node_address(rank),
        "RLC_REGISTRY_PORT": str(registry_port),
    }


def _cause(rc: int, log: Path) -> str:
    if rc < 0:
        return f"killed by {signal.Signals(-rc).name}"
    return _last_line(log)


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    for ln in reversed(lines):
        if ln.startswith("rlc:"):
            return ln
    return lines[-1] if lines else ""


def node_argv(manifest: Path) -> list[str]:
    """The compiled node entry point with this interpreter and the manifest's path."""
    from runtime.node.launch_argv import substitute

    compiled = json.loads(manifest.read_text(encoding="utf-8"))["commands"]["trainer_argv"]
    return substitute(compiled, manifest=str(manifest))


def run_nodes(manifest: Path, count: int, root: Path, extra: Sequence[str] = ()) -> int:
    from runtime.engines.process import free_port

    argv = [*node_argv(manifest), "--no-progress", *extra]
    port = free_port(node_address(0))
    procs: list[tuple[int, subprocess.Popen[bytes], Path]] = []
    for rank in range(count):
        log = root / "logs" / f"node-{rank}" / "execute.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **node_env(rank, count, port)},
                start_new_session=True,
            )
        procs.append((rank, proc, log))
        print(f"rlc: node {rank} ({node_address(rank)}): pid {proc.pid}, log {log}", flush=True)
    failed: tuple[int, int] | None = None
    stopping = {"n": 0}

    def on_signal(signum: int, frame: object) -> None:
        stopping["n"] += 1
        sig = signal.SIGTERM if stopping["n"] == 1 else signal.SIGKILL
        for _, p, _ in procs:
            if p.poll() is None:
                os.killpg(p.pid, sig)

    prev = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    leader_done: float | None = None
    stragglers: set[int] = set()
    straggler_s = _heartbeat_timeout(manifest) + GRACE_S
    try:
        while any(p.poll() is None for _, p, _ in procs):
            for rank, p, log in procs:
                rc = p.poll()
                if rc not in (None, 0) and failed is None and rank not in stragglers:
                    failed = (rank, rc)
                    print(f"rlc: node {rank} exited with code {rc}: {_cause(rc, log)}", flush=True)
                    _stop_all(procs)
            if leader_done is None and procs[0][1].poll() == 0:
                leader_done = time.monotonic()
            if leader_done is not None and time.monotonic() - leader_done > straggler_s:
                # the run finished; a node that has not exited by now is hung (it would
                # have seen the leader's end within a heartbeat): stop it, keep the result
                for rank, p, _ in procs:
                    if p.poll() is None:
                        print(
                            f"rlc: node {rank} was still running {straggler_s:g}s after the "
                            "run finished: stopped",
                            flush=True,
                        )
                        stragglers.add(rank)
                _stop_all(procs)
            time.sleep(0.5)
    finally:
        for s, h in prev.items():
            signal.signal(s, h)
        _stop_all(procs)
    if failed is None:
        for rank, p, log in procs:
            if p.returncode and rank not in stragglers:
                failed = (rank, p.returncode)
                print(
                    f"rlc: node {rank} exited with code {p.returncode}: {_cause(p.returncode, log)}"
                )
                break
    if failed is None:
        print(f"rlc: all {count} nodes finished; the trainer's summary ends {procs[0][2]}")
    return 0 if failed is None else (failed[1] if failed[1] > 0 else 3)


def _heartbeat_timeout(manifest: Path) -> float:
    """``launch.coordination.heartbeat_timeout``: within it a node sees the leader's end."""
    config = json.loads(manifest.read_text(encoding="utf-8"))["config"]
    return float(config["launch"]["coordination"]["heartbeat_timeout"])


def _stop_all(procs: Sequence[tuple[int, subprocess.Popen[bytes], Path]]) -> None:
    """SIGTERM every node still running (each saves and stops), SIGKILL after a grace."""
    live = [p for _, p, _ in procs if p.poll() is None]
    for p in live:
        os.killpg(p.pid, signal.SIGTERM)
        os.killpg(p.pid, signal.SIGCONT)  # a stopped (hung) node takes its SIGTERM too
    deadline = time.monotonic() + GRACE_S
    for p in live:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m runtime.launch.local_nodes", description=__doc__)
    ap.add_argument("manifest")
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--resume", choices=["auto", "never", "required"], default=None)
    args = ap.parse_args(argv)
    from runtime.config import ConfigError, RunConfig
    from runtime.manifest import ManifestError, load

    try:
        cfg = RunConfig.from_contract(load(args.manifest))
    except (ManifestError, ConfigError) as exc:
        print(f"rlc: error: {exc}", file=sys.stderr)
        return 2
    if args.nodes != cfg.placement.num_nodes:
        print(
            f"rlc: error: --local-nodes {args.nodes}, but the plan has "
            f"{cfg.placement.num_nodes} node(s)",
            file=sys.stderr,
        )
        return 2
    extra = ["--resume", args.resume] if args.resume else []
    return run_nodes(Path(args.manifest).resolve(), args.nodes, cfg.paths.root, extra)


if __name__ == "__main__":
    raise SystemExit(main())
