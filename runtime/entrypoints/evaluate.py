"""``python -m runtime.entrypoints.evaluate MANIFEST --update N --checkpoint PATH``: one evaluation job.

What a background evaluator job (``beaker/evaluator.yaml``) or a local milestone runs:
verify the manifest, serve the checkpoint's weights on an engine of our own (the
embedded engine, or SGLang from the compiled argv when ``inference.engine = "sglang"``),
generate every due evaluation task with the ``[evaluation]`` sampling, score with our
verifiers, and write ``metrics.jsonl`` (one line per task), ``samples.jsonl`` and
``summary.json`` (written last: its presence means the evaluation is complete) under
``--out`` (default ``<output.root>/eval/update-NNNNNN``).

Tasks are ``[[evaluation.tasks]]`` (olmo-eval names mapped onto our data and verifiers;
a task with its own ``interval`` runs at its multiples, at update 0 and at the final
update), or, without any, the held-out splits of ``[data]``. Exit codes: 0 done, 2 bad
input (manifest, checkpoint, task names, data), 3 the evaluation itself failed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXIT_OK = 0
EXIT_USER = 2
EXIT_RUNTIME = 3


class EvalInputError(ValueError):
    """The evaluation cannot start as asked (bad checkpoint, task, override, data)."""


@dataclass
class EvalTask:
    name: str
    prompts: list[Any]
    generation: dict[str, Any]
    scoring: dict[str, Any]


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m runtime.entrypoints.evaluate", description=__doc__)
    ap.add_argument("manifest", help="compiled manifest.json")
    ap.add_argument("--update", type=int, required=True, help="optimizer update evaluated")
    ap.add_argument(
        "--checkpoint",
        required=True,
        help="weights to evaluate: a native model / checkpoint dir, an HF dir, or builtin:NAME",
    )
    ap.add_argument("--out", help="result directory (default <output.root>/eval/update-N)")
    ap.add_argument("--engine-url", help="evaluate on this running engine instead of starting one")
    return ap.parse_args(argv)


def _check_checkpoint(source: str) -> None:
    from runtime.models import ModelLoadError, source_format

    try:
        source_format(source)
    except ModelLoadError as exc:
        raise EvalInputError(f"--checkpoint: {exc}") from None


def _tokenizer(source: str) -> Any:
    """The checkpoint's tokenizer, without loading its weights."""
    from runtime.models import Tokenizer, source_format
    from runtime.models.source import NATIVE_META
    from runtime.models.tokenizer import builtin_tokenizer

    fmt = source_format(source)
    if fmt == "builtin":
        return builtin_tokenizer(source)
    path = Path(source)
    if fmt == "native" and not (path / NATIVE_META).is_file():
        path = path / "model"
    return Tokenizer.from_dir(path)


def due_tasks(cfg: Any, update: int) -> list[EvalTask]:
    """The tasks this update evaluates (see the module docstring)."""
    from runtime.data.eval_tasks import eval_task_kind, held_out_prompts, load_eval_task, pools
    from runtime.data.tasks import DataError

    final = update >= cfg.training.num_rollouts
    out: list[EvalTask] = []
    try:
        if cfg.evaluation.tasks:
            for t in cfg.evaluation.tasks:
                eval_task_kind(t.task)  # unknown names fail before any data is read
            for t in cfg.evaluation.tasks:
                if t.interval and update and not final and update % t.interval:
                    continue
                scoring = dict(t.scoring)
                limit = scoring.pop("limit", None)
                prompts = load_eval_task(t.task, cfg.data.seed, limit)
                out.append(EvalTask(t.task, prompts, dict(t.generation), scoring))
            return out
        prompts = held_out_prompts(cfg.data)
    except DataError as exc:
        raise EvalInputError(str(exc)) from None
    if not prompts:
        raise EvalInputError(
            "nothing to evaluate: no [[evaluation.tasks]] and no held-out data "
            "(data.tasks eval_count or data.eval)"
        )
    for name in pools(prompts):
        mine = [p for p in prompts if str(p.metadata.get("pool", p.task)) == name]
        out.append(EvalTask(name, mine, {}, {}))
    return out


def _start_engine(cfg: Any, checkpoint: str, log_dir: Path) -> Any:
    """A server for the checkpoint: the compiled engine command line (engine 0's), serving
    the checkpoint on a free port (``runtime.node.launch_argv``); an SGLang evaluator also gets
    ``evaluation.server_args``."""
    from runtime.engines.backend import backend_for
    from runtime.engines.process import free_port, start_server
    from runtime.node.launch_argv import substitute

    if not cfg.engine_argv:
        raise EvalInputError("the manifest has no engine command line to evaluate with")
    port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    argv = substitute(cfg.engine_argv[0], values={"--port": str(port), "--model-path": checkpoint})
    backend = backend_for(cfg.inference.engine)
    argv += backend.eval_server_args(cfg.evaluation)
    env = backend.env()  # no placement: the evaluator's own GPUs
    return start_server(
        f"eval-engine:{port}",
        argv,
        f"http://127.0.0.1:{port}/health",
        log_dir / "engine.log",
        timeout=cfg.runtime.startup_timeout_s,
        env=env,
    )


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def evaluate(cfg: Any, update: int, checkpoint: str, out: Path, url: str) -> dict[str, Any]:
    """Run every due task against the engine at ``url``; write and return the summary."""
    from runtime.data.render import render_ids
    from runtime.rewards.judge_binding import RunVerifiers, attach_prompt_text
    from runtime.rollout.driver import _make_generator
    from runtime.rollout.evaluation import EvalSampling, evaluate_pool

    tasks = due_tasks(cfg, update)
    tokenizer = _tokenizer(checkpoint)
    eos = getattr(tokenizer, "eos_token_id", None)
    ev = cfg.evaluation
    base = EvalSampling(
        temperature=ev.temperature,
        samples_per_prompt=ev.samples_per_prompt,
        max_new_tokens=ev.max_response_length,
        top_p=cfg.inference.top_p,
        top_k=cfg.inference.top_k,
    )
    generate = _make_generator(cfg, url)
    metric_lines, sample_lines, per_task = [], [], {}
    for task in tasks:
        try:
            sampling = base.with_overrides(task.generation)
        except ValueError as exc:
            raise EvalInputError(f"evaluation task {task.name!r}: {exc}") from None
        attach_prompt_text(task.prompts, cfg.judge_bindings)
        verifiers = RunVerifiers(
            cfg.rewards, cfg.judge_bindings, "zero", cfg.executor, overrides=task.scoring
        )
        try:
            res = evaluate_pool(
                generate,
                lambda p: render_ids(p, tokenizer),
                verifiers,
                task.prompts,
                sampling,
                run_seed=cfg.runtime.seed,
                version=update,
                stop_token_ids=[int(eos)] if eos is not None else [],
                concurrency=max(1, min(cfg.inference.max_running_requests, 16)),
                prefix=task.name,
            )
        finally:
            verifiers.close()
        m = {k.removeprefix(f"{task.name}/"): v for k, v in res.metrics.items()}
        per_task[task.name] = m
        metric_lines.append({"update": update, "task": task.name, **m})
        sample_lines += [{"update": update, "task": task.name, **r} for r in res.rows]
    scores = [float(m["score"]) for m in per_task.values()]
    summary = {
        "update": update,
        "checkpoint": checkpoint,
        "manifest_digest": cfg.digest,
        "name": cfg.name,
        "tasks": per_task,
        "score": sum(scores) / len(scores) if scores else 0.0,
        "sampling": {
            "temperature": base.temperature,
            "samples_per_prompt": base.samples_per_prompt,
            "max_response_length": base.max_new_tokens,
        },
        "finished_unix": time.time(),
    }
    _write_atomic(
        out / "metrics.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in metric_lines)
    )
    _write_atomic(
        out / "samples.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in sample_lines)
    )
    _write_atomic(out / "summary.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    from runtime.config import ConfigError, RunConfig
    from runtime.manifest import ManifestError, load

    try:
        if args.update < 0:
            raise EvalInputError(f"--update must be >= 0, got {args.update}")
        cfg = RunConfig.from_contract(load(args.manifest), args.manifest)
        _check_checkpoint(args.checkpoint)
        due_tasks(cfg, args.update)  # validate names and data before starting an engine
    except (ManifestError, ConfigError, EvalInputError) as exc:
        print(f"rlc: error: {exc}", file=sys.stderr)
        return EXIT_USER
    out = Path(args.out) if args.out else cfg.paths.eval_dir / f"update-{args.update:06d}"
    engine = None
    try:
        url = args.engine_url
        if not url:
            engine = _start_engine(cfg, args.checkpoint, out / "logs")
            url = str(engine.health_url).removesuffix("/health")
        summary = evaluate(cfg, args.update, args.checkpoint, out, url)
    except EvalInputError as exc:
        print(f"rlc: error: {exc}", file=sys.stderr)
        return EXIT_USER
    except Exception as exc:  # the boundary: one clear line, the traceback with RLC_DEBUG
        if os.environ.get("RLC_DEBUG"):
            import traceback

            traceback.print_exc()
        print(f"rlc: evaluation failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_RUNTIME
    finally:
        if engine is not None:
            engine.stop()
    print(json.dumps({"update": summary["update"], "score": summary["score"], "out": str(out)}))
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
