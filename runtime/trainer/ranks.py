"""Trainer ranks: one process per trainer GPU (or per ``trainer.cpu_processes`` on CPU).

``runtime.entrypoints.execute`` on a trainer node starts its ranks with torch.distributed.elastic's
process machinery (the layer torchrun runs on: ``start_processes``, per-rank env, logs,
failure reports). On node 0 the execute process itself is trainer rank 0, the driver of the
GRPO loop; the other ranks run ``python -m runtime.trainer.ranks MANIFEST`` and follow rank 0
over torch.distributed (``Trainer.follow``), nothing else between them.

Interface for the node runner: :func:`lead_trainer` on node 0 (returns rank 0's Trainer),
:func:`start_ranks` on the other trainer nodes (all their ranks follow), then
``TrainerRanks.check``/``wait``/``close``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from runtime.node.failure import cause_from_log, shown_path

if TYPE_CHECKING:
    from torch.distributed.elastic.multiprocessing.api import PContext

    from contract.run import Process, RunContract

    from .trainer import Trainer


class RankFailure(RuntimeError):
    """A trainer rank process exited while the run needed it."""


def trainer_port() -> int:
    """Rank 0's rendezvous port: a free one (``RLC_TRAINER_PORT`` overrides it); the other
    trainer nodes read it from the run's registry."""
    if os.environ.get("RLC_TRAINER_PORT"):
        return int(os.environ["RLC_TRAINER_PORT"])
    from runtime.engines.process import free_port

    return free_port()


@dataclass
class TrainerRanks:
    """The rank processes this node started (possibly none)."""

    ranks: list[int]
    ctx: PContext | None
    log_dir: Path
    closed: bool = field(default=False)

    def _failure(self, clean_exit_ok: bool) -> str | None:
        if self.ctx is None:
            return None
        result = self.ctx.wait(timeout=0)
        if result is None:
            return None
        if not result.failures:
            return None if clean_exit_ok else "trainer ranks exited before the run ended"
        idx, fail = sorted(result.failures.items())[0]
        rank = self.ranks[idx]
        how = f"signal {-fail.exitcode}" if fail.exitcode < 0 else f"exit code {fail.exitcode}"
        log = result.stderrs.get(idx, "")
        if not log:
            return f"trainer rank {rank} died ({how})"
        # the cause read from the rank's log (a traceback's exception line), then the log
        cause = cause_from_log(Path(log))
        return f"trainer rank {rank} died ({how}): {cause}; full log: {shown_path(Path(log))}"

    def pids(self) -> dict[int, int]:
        """Global rank -> pid of the rank processes still running (heartbeats beat for them)."""
        if self.ctx is None or self.closed:
            return {}
        return {self.ranks[i]: pid for i, pid in self.ctx.pids().items()}

    def check(self, clean_exit_ok: bool = False, grace_s: float = 0.0) -> None:
        """Raise :class:`RankFailure` naming the first rank that is gone (failed, or any
        exit unless ``clean_exit_ok``). ``grace_s``: after a failed collective, give the
        dead rank's exit that long to be seen (the peer's socket closes first)."""
        deadline = time.monotonic() + grace_s
        while True:
            problem = self._failure(clean_exit_ok)
            if problem:
                raise RankFailure(problem)
            if time.monotonic() >= deadline:
                return
            time.sleep(0.2)

    def wait(self, poll_s: float = 1.0) -> int:
        """Block until every rank exited; 0 when all exited cleanly."""
        if self.ctx is None:
            return 0
        result = self.ctx.wait(timeout=-1, period=poll_s)
        return 0 if result is None or not result.failures else 3

    def close(self, timeout_s: int = 30) -> None:
        """Give the ranks ``timeout_s`` to leave, then kill what is left."""
        if self.ctx is not None and not self.closed:
            self.closed = True
            if self.ctx.wait(timeout=timeout_s) is None:
                self.ctx.close(timeout=5)


def rank_values(
    node_rank: int, local_rank: int, nprocs: int, addr: str, port: int, cpus: int
) -> dict[str, str]:
    """This node's values of a rank's placeholders (``runtime.node.launch_argv``): global
    rank ``node_rank * nprocs + local_rank``; on CPU the node's cores are split."""
    return {
        "rank": str(node_rank * nprocs + local_rank),
        "local_rank": str(local_rank),
        "node_rank": str(node_rank),
        "trainer_addr": addr,
        "trainer_port": str(port),
        "cpu_threads": str(max(1, cpus // nprocs)),
    }


def start_ranks(
    compiled: Process | None,
    manifest_path: str | Path,
    *,
    node_rank: int,
    nprocs: int,
    addr: str,
    port: int,
    log_dir: str | Path,
) -> TrainerRanks:
    """Start this node's follower ranks from the compiled ``commands.trainer_rank``: global
    ranks ``node_rank * nprocs + i``, except rank 0 on node 0 (the calling process).
    Returns at once."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std, start_processes

    from runtime.node.launch_argv import SubstitutionError, trainer_rank_process

    first = node_rank * nprocs
    local = [i for i in range(nprocs) if first + i != 0]
    logs = Path(log_dir)
    if not local:
        return TrainerRanks([], None, logs)
    logs.mkdir(parents=True, exist_ok=True)
    envs: dict[int, dict[str, str]] = {}
    args: dict[int, tuple[str, ...]] = {}
    entrypoint = ""
    for idx, lr in enumerate(local):
        values = rank_values(node_rank, lr, nprocs, addr, port, os.cpu_count() or 1)
        try:
            argv, envs[idx] = trainer_rank_process(compiled, str(manifest_path), values)
        except SubstitutionError as exc:
            raise RankFailure(f"trainer ranks not started: {exc}") from None
        entrypoint, args[idx] = argv[0], tuple(argv[1:])
    ctx = start_processes(
        name="trainer",
        entrypoint=entrypoint,
        args=args,
        envs=envs,
        logs_specs=DefaultLogsSpecs(log_dir=str(logs), redirects=Std.ALL),
    )
    return TrainerRanks([first + lr for lr in local], ctx, logs)


def lead_trainer(
    contract: RunContract,
    manifest_path: str | Path,
    log_dir: str | Path,
    *,
    leader_host: str = "127.0.0.1",
    announce: Callable[[str], None] | None = None,
    defer_weights: bool = False,
) -> Trainer:
    """Node 0: start the other ranks of this node and become trainer rank 0.

    World 1 is the plain in-process trainer. The ranks are released and reaped by
    ``Trainer.close``; ``leader_host`` is this node's address as the other nodes see it,
    ``announce`` publishes ``host:port`` to them (the run's registry) before rank 0 waits.
    ``defer_weights``: world 1 only (see ``Trainer``); ranks load their weights at once.
    """
    from .distributed import Rendezvous
    from .trainer import Trainer, TrainerConfig

    cfg = TrainerConfig.from_contract(contract)
    if cfg.world_size == 1:
        return Trainer(cfg, defer_weights=defer_weights)
    nodes = max(cfg.nodes, 1)
    addr = leader_host if nodes > 1 else "127.0.0.1"
    port = trainer_port()
    if announce is not None:
        announce(f"{addr}:{port}")
    ranks = start_ranks(
        contract.commands.trainer_rank,
        manifest_path,
        node_rank=0,
        nprocs=cfg.world_size // nodes,
        addr=addr,
        port=port,
        log_dir=log_dir,
    )
    try:
        # rank 0 watches its ranks while it waits for them (a rank that died is named)
        rv = Rendezvous(addr, port, 0, cfg.world_size, check=ranks.check)
        trainer = Trainer(cfg, rendezvous=rv)
    except BaseException:
        ranks.close(timeout_s=1)
        raise
    trainer.peer_check = ranks.check
    trainer.after_close = ranks.close
    trainer.rank_pids = ranks.pids
    return trainer


def follow(manifest_path: str) -> int:
    """A follower rank: build the same trainer, then run what rank 0 announces."""
    from runtime.manifest import ManifestError, load

    from .trainer import Trainer, TrainerConfig

    try:
        contract = load(manifest_path)
    except ManifestError as exc:
        print(f"rlc: error: {exc}", file=sys.stderr)
        return 2
    _injected_failure("startup")
    cfg = TrainerConfig.from_contract(contract)
    if os.environ.get(FAIL_AT) == "loaded":  # after joining, before the first collective
        from .distributed import init_distributed

        init_distributed(cfg.device, startup_timeout_s=cfg.startup_timeout_s)
        _injected_failure("loaded")
    trainer = Trainer(cfg)
    trainer.follow()
    return 0


FAIL_AT = "RLC_TEST_FAIL_RANK_AT"  # tests only: a follower that fails at a start-up point


def _injected_failure(point: str) -> None:
    if os.environ.get(FAIL_AT) == point:
        raise RuntimeError(f"injected failure at {point} ({FAIL_AT})")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m runtime.trainer.ranks",
        description="a follower trainer rank (started by runtime.entrypoints.execute)",
    )
    ap.add_argument("manifest")
    args = ap.parse_args(argv)
    from runtime.node.stacks import dump_stacks_on_sigusr1

    dump_stacks_on_sigusr1()
    try:
        return follow(args.manifest)
    except Exception as exc:  # one line: the leader reports this rank's exit
        if os.environ.get("RLC_DEBUG"):
            import traceback

            traceback.print_exc()
        print(
            f"rlc: trainer rank {os.environ.get('RANK')}: {type(exc).__name__}: {exc}",
            file=sys.stderr,
        )
        return 3


if __name__ == "__main__":
    raise SystemExit(main())
