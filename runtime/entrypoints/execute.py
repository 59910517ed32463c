"""``python -m runtime.entrypoints.execute MANIFEST``: carry out a compiled manifest on this node.

Verify the manifest, find this node's roles in the compiled placement, start them
(engine servers, the router in front of several engines, the trainer in-process), run
the GRPO loop, and always take every child down on the way out. Exit codes: 0 done,
2 the manifest is unusable (tampered, wrong node count, bad config), 3 runtime failure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtime.manifest import ManifestError
from runtime.node.launch_argv import SubstitutionError, engine_process, router_process

if TYPE_CHECKING:
    from runtime.config import RunConfig
    from runtime.node.placement import NodeIdentity, NodeRoles

EXIT_OK = 0
EXIT_USER = 2
EXIT_RUNTIME = 3


class RunFailure(RuntimeError):
    """A failure of the run itself (engine down after retries, audit, mismatch, ...)."""


def with_judge_urls(bindings: dict[str, Any], found: dict[str, str]) -> dict[str, Any]:
    """Judge bindings with each managed judge at the address its node registered."""
    return {
        v: replace(b, url=found[f"judge:{b.judge}"])
        if b.mode == "managed" and f"judge:{b.judge}" in found
        else b
        for v, b in bindings.items()
    }


class NodeRunner:
    """Starts this node's roles, runs the loop (trainer node), tears everything down."""

    def __init__(
        self,
        cfg: RunConfig,
        roles: NodeRoles,
        ident: NodeIdentity,
        *,
        resume: str = "auto",
        progress: bool = False,
        progress_every: int = 0,
    ) -> None:
        from runtime.node.supervisor import Supervisor
        from runtime.rollout.loop import StopFlag

        self.cfg = cfg
        self.roles = roles
        self.ident = ident
        self.resume = resume
        self.progress = progress
        self.progress_every = progress_every  # plain lines when stderr is not a terminal
        self.stop = StopFlag()
        from runtime.compiler_cache import CacheSession, CompilerCache

        self.compiler_cache = CacheSession(CompilerCache.from_contract(cfg.compiler_cache))
        logs = cfg.paths.root / "logs"
        self.sup = Supervisor(
            log_dir=logs / f"node-{ident.rank}" if ident.count > 1 else logs,
            env_for=self.compiler_cache.env_for,
        )
        self.registry: Any = None  # LocalRegistry or the leader's Registry, set by run()
        self.urls_by_role: dict[str, str] = {}
        self.engine_urls: list[str] = []
        self.gen_url = ""
        self.publisher: Any = None  # set by the trainer node; dead engines are dropped from it
        self.prompts: tuple[Any, dict[str, Any]] | None = None  # (sampler, id -> prompt)
        self.on_close: list[Any] = []  # e.g. the trainer: releases its other ranks
        self.rank_pids: Any = None  # () -> {trainer rank: pid} of this node's follower ranks
        self.silence: Any = None  # the first peer the heartbeats found silent (the cause)
        self.failed_cause: str | None = None  # this node's one-line cause, told to the others
        self.heartbeats: Any = None
        self.teacher_url: str | None = None  # on-policy distillation: this node's teacher
        self._stop_heartbeats: Any = None
        self.finished = False  # this node's part of the run ended without a failure
        from runtime.node.startup import StartupClock

        self.startup = StartupClock.from_env()  # the start-up phases, printed by the trainer
        self.closing = False  # the main thread is taking the node down
        self.freeze_heap = False  # gc.freeze() once start-up is done (a run's own process)
        self.preload: Any = None  # runtime.node.preload.Preload, joined after start_engines
        # runtime.node.trainer_start.TrainerStart: the trainer built beside the engines
        self.trainer_start: Any = None
        self._local_ports()

    def request_stop(self, reason: str) -> None:
        self.stop.set(reason)

    # ---- processes -----------------------------------------------------------------------
    def _local_ports(self) -> None:
        """Engines and the router take free ports on this node (the machine may run other
        jobs on the compiled ones); other nodes learn them from the leader's registry."""
        from runtime.engines.process import free_port

        host = self._bind_host()
        taken: set[int] = set()

        def fresh() -> int:
            port = free_port(host)
            while port in taken:
                port = free_port(host)
            taken.add(port)
            return port

        plan = self.cfg.placement
        self.engines = [
            e.model_copy(update={"port": fresh()}) if e.node == self.ident.rank else e
            for e in plan.engines
        ]
        self.router_port = fresh() if plan.router is not None else None

    def _bind_host(self) -> str:
        return "127.0.0.1" if self.ident.count == 1 else "0.0.0.0"

    def _url(self, port: int) -> str:
        """How other nodes reach a port of this node."""
        return f"http://{self.ident.address}:{port}"

    def start_engines(self) -> None:
        cfg = self.cfg
        mine = [e for e in self.engines if e.node == self.ident.rank]
        manifest = str(cfg.manifest_path or "")
        servers = []
        for e in mine:
            try:
                argv, env = engine_process(cfg, e, manifest=manifest)
            except SubstitutionError as exc:
                raise RunFailure(str(exc)) from None
            servers.append((f"engine:{e.id}", argv, env, e.port))
        self.sup.start_servers(
            servers,
            cfg.runtime.health_timeout_s,
            cfg.runtime.startup_timeout_s,
            after_spawn=self._after_spawn,
        )
        for e in mine:
            self.registry.register(f"engine:{e.id}", self._url(e.port))

    def _after_spawn(self) -> None:
        """Once the engine processes exist (a fork beside a thread that loads libraries
        could hang the child): the preload's imports, and the trainer's start."""
        if self.preload is not None:
            self.preload.start()
        start = self.trainer_start
        if start is not None:
            # the trainer compiles in this process from here: its own cache directories
            os.environ.update(self.compiler_cache.env_for("trainer"))
            self.sup.watch = start.check  # a failed build ends the wait for the engines
            start.start()

    def _register_judges(self) -> None:
        """Managed judges are roles like engines: their node registers them, and a trainer
        on another node reaches them at the registered address, not at loopback."""
        from runtime.node.judges import planned_judges

        placed = planned_judges(self.cfg.spec, self.cfg.placement)
        for j in placed:
            if j.node == self.ident.rank:
                self.registry.register(f"judge:{j.name}", self._url(j.port))
        if self.roles.trainer and placed and self.ident.count > 1:
            owners = {f"judge:{j.name}": j.node for j in placed}
            found = self.registry.lookup(list(owners), owners, self.cfg.runtime.startup_timeout_s)
            bindings = with_judge_urls(self.cfg.judge_bindings, found)
            self.cfg = replace(self.cfg, judge_bindings=bindings)

    def lookup_engines(self) -> None:
        """Every engine's address, as its node registered it (waits for other nodes)."""
        roles = [f"engine:{e.id}" for e in self.engines]
        owners = {f"engine:{e.id}": e.node for e in self.engines}
        found = self.registry.lookup(roles, owners, self.cfg.runtime.startup_timeout_s)
        self.urls_by_role = dict(found)
        self.engine_urls = [found[r] for r in roles]

    def start_router(self) -> None:
        from runtime.engines.process import free_port
        from runtime.engines.router import _workers_ready

        cfg = self.cfg
        port = self.router_port or 29000
        # the router's metrics exporter exits when its port is taken: a free one here too
        try:
            argv = router_process(cfg, self.engine_urls, port, free_port(self._bind_host()))
        except SubstitutionError as exc:
            raise RunFailure(str(exc)) from None
        self.sup.start("router", argv)
        url = f"http://127.0.0.1:{port}"
        # healthy AND every worker registered (the router adds workers in the background)
        self.sup.wait_ready(
            "router", lambda: _workers_ready(url, self.engine_urls), cfg.runtime.startup_timeout_s
        )
        self.registry.register("router", self._url(port))

    # ---- heartbeats ----------------------------------------------------------------------
    def start_heartbeats(self) -> None:
        """Beat for this node and its roles; watch the others (``runtime.node.heartbeat``)."""
        from runtime.node.heartbeat import Heartbeats, MemoryStore, store_client

        timeout = self.cfg.launch.coordination.heartbeat_timeout
        if self.ident.count == 1:
            store: Any = MemoryStore()
        else:
            store = store_client(self.ident.leader_host, self.ident.registry_port, timeout)
        self.heartbeats = Heartbeats(
            store, self.ident.rank, self.ident.count, timeout, self._local_roles, self._silent
        ).start()
        self._stop_heartbeats = lambda: self.heartbeats.stop(
            finished=self.finished,
            # this node's own failure (not a silent peer's: the leader may be the silent one)
            cause=self.failed_cause if self.silence is None else None,
        )
        self.on_close.append(self._stop_heartbeats)

    def _local_roles(self) -> dict[str, int]:
        roles = {c.name: c.pid for c in list(self.sup.children) if c.alive()}
        if self.rank_pids is not None:
            roles.update({f"trainer-rank:{r}": pid for r, pid in self.rank_pids().items()})
        return roles

    def _silent(self, silence: Any) -> None:
        """A silent peer ends the run: the next health check raises it as the cause; a hung
        process of this node is killed so that nothing stays blocked on it."""
        from runtime.node.heartbeat import stop_hung

        if self.silence is None:
            self.silence = silence
        print(f"rlc: error: {silence}", file=sys.stderr, flush=True)
        stop_hung(silence.pid)
        if silence.name == "node:0" and not self.roles.leader:
            # this node's calls to the leader's store may be blocked for good: if the run
            # has not ended by itself shortly, take this node's roles down and leave
            timer = threading.Timer(2 * self.heartbeats.interval_s + 1.0, self._abandon)
            timer.daemon = True
            timer.start()

    def _abandon(self) -> None:
        if self.closing:
            return
        print(f"rlc: run failed: {self.silence}", file=sys.stderr, flush=True)
        self.closing = True
        for fn in reversed(self.on_close):
            if fn is not self._stop_heartbeats:  # that thread may be blocked on the leader
                with contextlib.suppress(Exception):
                    fn()
        self.sup.shutdown()
        os._exit(EXIT_RUNTIME)

    def failure_cause(self, exc: BaseException) -> str:
        """The line a failed run ends with: a silent peer, when one was seen, is the cause
        of whatever failed after it (a collective or a request to the hung process)."""
        if self.silence is not None:
            return str(self.silence)
        if isinstance(exc, RunFailure):
            return str(exc)
        died = self.sup.first_death(grace_s=2.0)
        if died is not None:  # a request to it failed first: its exit is the cause
            return str(died)
        return f"{type(exc).__name__}: {exc}"

    def health_check(self) -> None:
        """Called at every collection boundary.

        A peer whose heartbeat stopped fails the run. A dead engine behind the router is
        dropped (router, publication) and the run goes on with the others (in-flight groups
        were already retried by the client); the run fails when no engine is left or any
        other child died.
        """
        from runtime.node.supervisor import ChildDied

        if self.silence is not None:
            raise RunFailure(str(self.silence))

        for child in self.sup.dead():
            lost = child.name.startswith("engine:") and self.router_port is not None
            url = self._engine_url_of(child.name) if lost else None
            survivors = [u for u in self.engine_urls if u != url]
            if not lost or url is None or not survivors:
                raise RunFailure(str(ChildDied(child.name, child.proc.returncode, child.log_path)))
            child.expected_exit = True
            self.engine_urls[:] = survivors
            if self.publisher is not None:
                self.publisher.urls = [u for u in self.publisher.urls if u != url]
            self._router_forget(url)
            print(
                f"rlc: warning: {child.name} ({url}) exited with code {child.proc.returncode}; "
                f"continuing with {len(survivors)} engine(s)",
                file=sys.stderr,
                flush=True,
            )

    def _engine_url_of(self, name: str) -> str | None:
        return self.urls_by_role.get(name)

    def _router_forget(self, url: str) -> None:
        """Remove a dead worker from sglang-router (it is addressed by its UUID)."""
        import httpx

        from runtime import control_http

        base = self.gen_url
        try:
            workers = control_http.get(f"{base}/workers", timeout=5).json().get("workers", [])
            for w in workers:
                if str(w.get("url", "")).rstrip("/") == url.rstrip("/"):
                    control_http.delete(f"{base}/workers/{w['id']}", timeout=5)
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            print(f"rlc: warning: could not remove {url} from the router: {exc}", file=sys.stderr)

    # ---- driver --------------------------------------------------------------------------
    def run(self) -> dict[str, Any] | None:
        from runtime.node.registry import LocalRegistry, Registry, RegistryError

        cfg = self.cfg
        cfg.paths.ensure()
        if self.roles.trainer:  # bad data fails here, before any engine starts
            from runtime.data.manifest import DataManifestError
            from runtime.data.tasks import DataError
            from runtime.rollout.driver import _make_data

            try:
                self.prompts = _make_data(cfg)
            except (DataError, DataManifestError) as exc:
                raise RunFailure(f"data: {exc}") from None
            self.startup.mark("data")
        try:
            if self.ident.count == 1:
                self.registry = LocalRegistry()
            else:
                self.registry = Registry(
                    self.ident.leader_host,
                    self.ident.registry_port,
                    node=self.ident.rank,
                    is_leader=self.roles.leader,
                    timeout_s=cfg.runtime.startup_timeout_s,
                )
            self.start_heartbeats()
            if self.roles.trainer and self.ident.rank == min(cfg.placement.trainer.nodes):
                from runtime.rollout.driver import trainer_start

                self.trainer_start = trainer_start(self)
                if self.trainer_start is not None:  # a run that fails first closes it
                    self.on_close.append(self._close_unclaimed_trainer)
            try:
                self.start_engines()
            finally:  # an unloadable architecture is the cause an engine failure shows
                self._join_preload()
            if self.roles.router or self.roles.trainer:
                self.lookup_engines()
            if self.roles.router:
                self.start_router()
            if self.roles.trainer and self.router_port is not None:
                owner = {"router": cfg.placement.router.node if cfg.placement.router else 0}
                self.gen_url = self.registry.lookup(["router"], owner)["router"]
            elif self.roles.trainer:
                self.gen_url = self.engine_urls[0]
            from runtime.node.judges import start_managed_judges
            from runtime.node.teacher import start_teacher

            start_managed_judges(self)
            self._register_judges()
            self.startup.mark("engines ready")
            self.teacher_url = start_teacher(self)
        except (TimeoutError, RuntimeError, RegistryError, SubstitutionError) as exc:
            raise RunFailure(f"startup failed: {exc}") from None
        self.compiler_cache.start_publisher()
        if not self.roles.trainer:
            self._serve_only()
            self.finished = True
            return None
        if self.ident.rank != min(cfg.placement.trainer.nodes):
            try:
                self._follow_trainer()
                self.finished = True
                return None
            finally:
                self.registry.acknowledge()  # the leader need not wait for this node
        from runtime.rollout.driver import train

        os.environ.update(self.compiler_cache.env_for("trainer"))  # the loop runs here
        outcome = "failed"
        try:
            summary = train(self)
            outcome = "done"
            self.finished = True
            return summary
        finally:  # a silent node will not read the outcome: no waiting for it
            self.registry.finish(outcome, nodes=1 if self.silence else self.ident.count)

    def _close_unclaimed_trainer(self) -> None:
        if self.trainer_start is not None:
            self.trainer_start.close(lambda trainer: trainer.close())

    def _join_preload(self) -> None:
        """Wait for the imports and the architecture check begun at start-up; a source
        the runtime cannot load raises ``ModelLoadError`` (exit 2)."""
        preload, self.preload = self.preload, None
        if preload is not None:
            preload.result()

    def _serve_only(self) -> None:
        """A node without the trainer: serve until the trainer's node says the run is over,
        a child dies, the leader's registry goes away, or this node is told to stop."""
        from runtime.node.registry import RegistryError

        while not self.stop:
            self.health_check()
            try:
                outcome = self.registry.done()
            except RegistryError as exc:
                raise RunFailure(str(exc)) from None
            if outcome is not None:
                self.registry.acknowledge()
                if outcome != "done":
                    raise RunFailure(f"the trainer's node ended the run: {outcome}")
                return None
            time.sleep(1.0)
        return None

    def _follow_trainer(self) -> None:
        """A trainer node after the first: its ranks follow trainer rank 0 (on node 0)."""
        from runtime.node.registry import RegistryError
        from runtime.trainer.ranks import RankFailure, start_ranks

        cfg, plan = self.cfg, self.cfg.placement
        nodes = len(plan.trainer.nodes)
        world = plan.trainer.world_size
        try:  # trainer rank 0 announces where it waits
            where = self.registry.lookup(["trainer"], {"trainer": min(plan.trainer.nodes)})
        except RegistryError as exc:
            raise RunFailure(str(exc)) from None
        host, port = where["trainer"].rsplit(":", 1)
        try:
            ranks = start_ranks(
                cfg.contract.commands.trainer_rank,
                cfg.manifest_path or "",
                node_rank=plan.trainer.nodes.index(self.ident.rank),
                nprocs=world // nodes,
                addr=host,
                port=int(port),
                log_dir=cfg.paths.root / "logs" / f"trainer-ranks-node{self.ident.rank}",
            )
        except RankFailure as exc:
            raise RunFailure(str(exc)) from None
        self.on_close.append(ranks.close)
        self.rank_pids = ranks.pids
        while not self.stop:
            self.health_check()
            if ranks.ctx is None or ranks.ctx.wait(timeout=0) is not None:
                break
            time.sleep(1.0)
        ranks.check(clean_exit_ok=True)  # a rank that failed fails this node
        return None

    def close(self) -> None:
        self.closing = True
        for fn in [*reversed(self.on_close), self.sup.shutdown, self.compiler_cache.close]:
            try:
                fn()
            except Exception as exc:  # the rest must still be taken down
                print(f"rlc: warning: shutdown: {exc}", file=sys.stderr)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m runtime.entrypoints.execute", description=__doc__)
    ap.add_argument("manifest", help="compiled manifest.json")
    ap.add_argument(
        "--resume",
        choices=["auto", "never", "required", "manifest"],
        default="manifest",
        help="resume from the newest complete checkpoint (default: the manifest's setting)",
    )
    ap.add_argument(
        "--no-progress",
        action="store_true",
        help="no live progress bar (nor, without a terminal, the plain progress lines)",
    )
    ap.add_argument(
        "--bench",
        action="store_true",
        help="print the phase table and tokens/s/GPU at the end (also <output.root>/bench.json)",
    )
    ap.add_argument(
        "--print-effective",
        action="store_true",
        help="print every component's settings and every process's argv/env (JSON) as this "
        "manifest would run them, and start nothing",
    )
    return ap.parse_args(argv)


def _output_root_conflict(cfg: Any, resume: str) -> str | None:
    """An output.root holding checkpoints of a different experiment is refused before
    anything starts (whatever the resume mode: a fresh run there would prune the other
    experiment's checkpoints). A continuation - the same spec with a longer run or other
    checkpoint/evaluation/tracking/launch/runtime settings - may reuse it; see
    ``runtime.checkpoints.identity``."""
    from runtime.checkpoints import latest_complete
    from runtime.checkpoints.identity import differing_fields, resume_key, resume_view
    from runtime.checkpoints.manager import read_meta

    newest = latest_complete(cfg.paths.checkpoints)
    if newest is None:
        return None
    try:
        meta = read_meta(newest)
    except (OSError, ValueError):
        return None
    digest, key = meta.get("digest"), meta.get("resume_key")
    if key:
        if key == resume_key(cfg.config_document):
            return None
    elif not digest or digest == cfg.digest:
        return None
    changed = ""
    old = _manifest_of(cfg.paths.root, str(digest or ""))
    if old is not None:
        fields = differing_fields(
            resume_view(old.get("config", {})), resume_view(cfg.config_document)
        )
        if fields:
            shown = ", ".join(fields[:8]) + (", ..." if len(fields) > 8 else "")
            changed = f" (they differ in {shown})"
    return (
        f"output.root {cfg.paths.root} holds checkpoints of another experiment ({digest}); "
        f"this manifest is {cfg.digest}{changed}. A run directory is continued only by the "
        "same spec, up to run length, checkpoint, evaluation, tracking, launch and runtime "
        "settings: set output.root to a fresh directory (e.g. --set "
        "'output.root=\"runs/NEW\"'), or rerun the spec that wrote it"
    )


def _manifest_of(root: Path, digest: str) -> dict[str, Any] | None:
    """The manifest `rlc run` filed under ``root/manifests`` for ``digest``, if present."""
    short = digest.removeprefix("sha256:")[:16]
    if not short:
        return None
    for path in sorted((Path(root) / "manifests").glob(f"*-{short}.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("digest") == digest:
            return data
    return None


EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a Ctrl-C


def print_effective(path: str) -> int:
    """``--print-effective``: the effective view as JSON (``runtime.effective``); no torch."""
    from runtime.config import ConfigError
    from runtime.effective import effective

    try:
        from runtime.manifest import document, verify

        verify(path)
        view = effective(document(path), str(Path(path).resolve()))
    except (ManifestError, ConfigError, ValueError) as exc:
        print(f"rlc: error: {exc}", file=sys.stderr)
        return EXIT_USER
    print(json.dumps(view, indent=2, sort_keys=True))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Run the manifest; Ctrl-C in any phase ends with exit 130 and one line, no traceback."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("rlc: interrupted during start-up; nothing was trained", file=sys.stderr)
        return EXIT_INTERRUPTED


def _main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.print_effective:
        return print_effective(args.manifest)
    from runtime.node.stacks import dump_stacks_on_sigusr1

    dump_stacks_on_sigusr1()
    print("rlc: checking the manifest and loading the runtime", file=sys.stderr, flush=True)
    from runtime.compiler_cache import CompilerCache
    from runtime.config import ConfigError, RunConfig
    from runtime.manifest import load
    from runtime.models.source import ModelLoadError, check_source_files
    from runtime.node.placement import PlacementError, node_identity, roles_for

    try:
        cfg = RunConfig.from_contract(load(args.manifest), args.manifest)
        CompilerCache.from_contract(cfg.compiler_cache)  # the job's env agrees
        check_source_files(cfg.model.source, hf_template=cfg.model.hf_template)
        ident = node_identity()
        roles = roles_for(cfg.placement, ident)
    except (ManifestError, ConfigError, PlacementError) as exc:
        print(f"rlc: error: {exc}", file=sys.stderr)
        return EXIT_USER
    except ModelLoadError as exc:  # before any engine starts
        print(f"rlc: error: model.source: {exc}", file=sys.stderr)
        return EXIT_USER

    resume = cfg.checkpoint.resume if args.resume == "manifest" else args.resume
    problem = _output_root_conflict(cfg, resume)
    if problem:
        print(f"rlc: error: {problem}", file=sys.stderr)
        return EXIT_USER
    progress = not args.no_progress and sys.stderr.isatty()
    every = 0
    if not args.no_progress and not progress:
        from runtime.metrics import plain_every

        every = plain_every(cfg.training.num_rollouts)
    runner = NodeRunner(cfg, roles, ident, resume=resume, progress=progress, progress_every=every)
    runner.freeze_heap = True  # this process lives for the run: freeze after start-up
    from runtime.node.preload import TRAINER_MODULES, Preload

    # the architecture check and the trainer's imports run while the engines start
    # (NodeRunner.start_engines starts them once the engine processes exist)
    runner.preload = Preload(
        cfg.model.source, cfg.model.hf_template, TRAINER_MODULES if roles.trainer else ()
    )
    print(
        f"rlc: starting {cfg.name} ({cfg.training.num_rollouts} collections); "
        "engines and trainer load first",
        file=sys.stderr,
        flush=True,
    )
    prev = _install_signal_handlers(runner)
    try:
        summary = runner.run()
    except ModelLoadError as exc:  # the architecture check, joined once the engines started
        print(f"rlc: error: model.source: {exc}", file=sys.stderr)
        return EXIT_USER
    except RunFailure as exc:
        runner.failed_cause = runner.failure_cause(exc)
        print(f"rlc: run failed: {runner.failed_cause}", file=sys.stderr)
        return EXIT_RUNTIME
    except KeyboardInterrupt:
        where = "during start-up" if runner.stop.reason == "" else "before saving"
        print(f"rlc: interrupted {where} (aborted by a second Ctrl-C)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # the boundary: a clear line, the traceback with RLC_DEBUG
        if os.environ.get("RLC_DEBUG"):
            import traceback

            traceback.print_exc()
        runner.failed_cause = runner.failure_cause(exc)
        print(f"rlc: run failed: {runner.failed_cause}", file=sys.stderr)
        return EXIT_RUNTIME
    finally:
        runner.close()
        for sig, handler in prev.items():
            signal.signal(sig, handler)
    if summary and args.bench:
        _print_bench(cfg)
    if summary and not sys.stdout.isatty():  # for scripts; a terminal ends on the report path
        print(json.dumps(summary, sort_keys=True))
    if runner.stop.reason == "SIGINT":  # stopped and saved at a collection boundary
        return EXIT_INTERRUPTED
    return EXIT_OK


def _print_bench(cfg: Any) -> None:
    """The phase table on stderr (beside the run's own lines), the numbers as bench.json."""
    from runtime.entrypoints.bench import bench, table

    data = bench(cfg.paths.root, max(cfg.placement.used_gpus, 1))
    (cfg.paths.root / "bench.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(table(data), file=sys.stderr, flush=True)


def _install_signal_handlers(runner: Any) -> dict[int, Any]:
    """First SIGINT/SIGTERM: stop at the next collection boundary and save; second: abort."""
    hits = {"n": 0}

    def handler(signum: int, frame: object) -> None:
        hits["n"] += 1
        if hits["n"] == 1:
            print(
                f"\nrlc: {signal.Signals(signum).name}: finishing this collection, saving, "
                "stopping (again to abort)",
                file=sys.stderr,
            )
            runner.request_stop(signal.Signals(signum).name)
        else:
            raise KeyboardInterrupt

    prev = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        prev[sig] = signal.signal(sig, handler)
    return prev


if __name__ == "__main__":
    raise SystemExit(main())
