"""One GRPO collection end to end on rlc's components, timed by phase.

generation (embedded engine, continuous batching, optional CUDA graphs) -> scoring
(``task.reward``) -> update (``runtime.trainer.Trainer.train_step``, GRPO) -> publication
(``--publish disk``: safetensors snapshot + ``Engine.update_weights``, the embedded
default; ``tensor``: ``runtime.publication.tensor.ColocatedPublisher``, device copies into
the in-process engine plus the device checksum audit). The components are composed directly here (not
through ``rlc run``), so this measures the work of a collection, not orchestration.
Compare with ``benchmarks/trl_grpo.py`` on the same prompts/reward/lengths/batch.

One-time costs are kept out of the timed collections and reported on their own: a warm-up
collection (``--warmup``, default on a GPU) pays the decode step's torch.compile + CUDA
graph capture and the FlexAttention compile; ``--compile-cache DIR`` points Inductor and
Triton at a directory that a later run reuses (``compile_cache_warm`` says whether it
already held kernels). The JSON is rewritten after every collection, and ``--deadline-s``
starts no collection that would end past it, so a killed stage still leaves its numbers.

    python benchmarks/gpu/e2e.py --prompts 8 --group 8 --new-tokens 256 --collections 3
    python benchmarks/gpu/e2e.py --dry-run      # CPU smoke: tiny model, 2x2 samples, 8 tokens
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))

import task  # noqa: E402
from stacks import StackSampler  # noqa: E402

from runtime.engines.embedded.__main__ import KV_CACHE_DTYPE_NAMES  # noqa: E402


def generate(eng: Any, prompt_ids: list[list[int]], group: int, params: Any) -> list[dict]:
    results: list[dict | None] = [None] * (len(prompt_ids) * group)
    done = threading.Event()
    left = [len(results)]
    lock = threading.Lock()

    def make_cb(i: int) -> Any:
        def cb(res: dict) -> None:
            results[i] = res
            with lock:
                left[0] -= 1
                if left[0] == 0:
                    done.set()

        return cb

    k = 0
    for ids in prompt_ids:  # one submission per group, as the server queues a request's n
        reqs = []
        for _ in range(group):
            reqs.append(eng.make_request(ids, params, make_cb(k), return_logprob=True))
            k += 1
        eng.submit_many(reqs)
    if not done.wait(900):
        raise TimeoutError("generation did not finish")
    for r in results:
        assert r is not None and r["meta_info"]["finish_reason"]["type"] != "abort", r
    return results  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default="builtin:olmo3-1b?vocab_size=100352")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--collections", type=int, default=3)
    ap.add_argument("--publish", default="disk", choices=["disk", "tensor"])
    ap.add_argument("--no-cuda-graph", action="store_true")
    ap.add_argument("--attention-backend", default=None, help="trainer attention (default flex)")
    ap.add_argument("--label", default="dense")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu")
    ap.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=None)
    ap.add_argument("--compile-cache", type=Path, default=Path("/tmp/rlc-compile-cache"))
    ap.add_argument("--deadline-s", type=float, default=None, help="start no collection past it")
    ap.add_argument("--dry-run", action="store_true", help="CPU smoke on the tiny model")
    ap.add_argument(
        "--compile-blocks",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="trainer.compile_model (default: on with CUDA, as derived for dense GPU runs)",
    )
    ap.add_argument("--recompute", action="store_true", help="trainer.activation_recompute")
    ap.add_argument(
        "--freeze-heap",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="gc.freeze() after the warm-up, as a run does after its start-up (default: on, "
        "but for --dry-run, which may run inside another process)",
    )
    ap.add_argument(
        "--decode-attention",
        choices=["sdpa", "flex", "triton"],
        default=None,
        help="the engine's decode attention (default: the engine's)",
    )
    ap.add_argument(
        "--radix-cache",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="the engine's prefix tree (inference.radix_cache; default off, as in a run): "
        "with it the tree keeps the finished sequences' K/V through the update; a group's "
        "samples share their prompt's prefill either way",
    )
    ap.add_argument(
        "--shared-prompts",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a group's samples read their prompt's K/V from one slot (the engine's default "
        "with the split-KV kernel); --no-shared-prompts: each sample's slot holds a copy",
    )
    ap.add_argument(
        "--kv-cache-dtype",
        choices=KV_CACHE_DTYPE_NAMES,
        default="auto",
        help="the engine's KV cache storage type (inference.kv_cache_dtype; default: the "
        "model's dtype)",
    )
    ap.add_argument(
        "--graph-kv-step",
        type=int,
        default=None,
        help="the engine's KV-length bucket for decode graphs (--cuda-graph-kv-step; default: "
        "the engine's 256): finer buckets read less padding and capture more graphs",
    )
    ap.add_argument(
        "--sample-admission",
        action="store_true",
        help="sample the engine thread's stack during admissions (stacks.py): where the "
        "host time of prefill_s goes, per collection",
    )
    ap.add_argument(
        "--prefill-cudnn",
        action="store_true",
        help="let prefill's attention use cuDNN's SDPA backend too (the engine leaves it out: "
        "a plan built per new shape)",
    )
    ap.add_argument(
        "--mem-fraction-static",
        type=float,
        default=0.4,
        help="the engine's share of the GPU: weights, KV slots and prefix cache (default 0.4, "
        "what the compiler derives for an engine colocated with the trainer; 0: unbounded, "
        "the slots sized by the batch and the prefix cache by half the memory left)",
    )
    args = ap.parse_args(argv)
    if args.dry_run:
        args.source, args.device, args.label = "builtin:tiny", "cpu", "dry-run"
        args.prompts, args.group, args.new_tokens, args.collections = 2, 2, 8, 2
        args.publish = "disk"
        args.out = Path(tempfile.mkdtemp(prefix="rlc-e2e-dry-"))
    cache_warm = args.compile_cache.is_dir() and any(args.compile_cache.iterdir())
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(args.compile_cache / "inductor"))
    os.environ.setdefault("TRITON_CACHE_DIR", str(args.compile_cache / "triton"))
    t_main = time.perf_counter()

    from runtime.engines.embedded import forward as engine_forward
    from runtime.engines.embedded.engine import Engine

    if args.prefill_cudnn:
        from torch.nn.attention import SDPBackend

        engine_forward.PREFILL_SDPA_BACKENDS = (
            *engine_forward.PREFILL_SDPA_BACKENDS,
            SDPBackend.CUDNN_ATTENTION,
        )
    from runtime.engines.embedded.sampling import SamplingParams
    from runtime.publication.disk import write_snapshot
    from runtime.trainer import Sample, Trainer, TrainerConfig, group_advantages
    from runtime.trainer.trainer import compiled_graphs

    cuda = args.device == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def allocator_counts() -> dict[str, int]:
        if not cuda:
            return {}
        stats = torch.cuda.memory_stats(args.device)
        keys = ("num_alloc_retries", "num_device_alloc", "num_device_free")
        return {k: int(stats.get(k, 0)) for k in keys}

    t0 = time.perf_counter()
    backend = args.attention_backend or ("flex" if cuda else "sdpa")
    trainer = Trainer(
        TrainerConfig(
            model_source=args.source,
            device=args.device,
            lr=1e-6,
            attention_backend=backend,
            # as the compiler derives it for dense GPU runs (pass --no-compile-blocks for MoE)
            compile_model=cuda if args.compile_blocks is None else args.compile_blocks,
            activation_recompute=args.recompute,
        )
    )
    # the engine's copy comes from the trainer's (on-device) weights: building the 1.5B
    # builtin a second time on the CPU costs ~30 s on one NVIDIA H200 host
    loaded = dataclasses.replace(
        trainer.loaded, model=copy.deepcopy(trainer.model).to(dtype=dtype).eval()
    )
    tok = loaded.tokenizer
    texts = task.prompts(args.prompts * args.collections)
    prompt_ids = [tok.encode(t) for t in texts]
    batch = args.prompts * args.group
    graph = cuda and not args.no_cuda_graph
    engine_fraction = None
    if cuda and args.mem_fraction_static > 0:
        # the engine counts its process's memory as its own; in a run it has a process of
        # its own, here the trainer's memory shares it, so add that to keep the engine's
        # share what the fraction gives it in a run
        torch.cuda.empty_cache()
        _, total = torch.cuda.mem_get_info()
        engine_fraction = min(0.98, args.mem_fraction_static + torch.cuda.memory_reserved() / total)
    eng = Engine(
        loaded,
        model_path="e2e",
        device=args.device,
        max_running_requests=batch,
        context_length=max(map(len, prompt_ids)) + args.new_tokens + 8,
        cuda_graph=graph,
        mem_fraction_static=engine_fraction,
        kv_cache_dtype=args.kv_cache_dtype,
        radix_cache=args.radix_cache,
        **({"decode_attention": args.decode_attention} if args.decode_attention else {}),
        **({"graph_kv_step": args.graph_kv_step} if args.graph_kv_step is not None else {}),
    )
    if not args.shared_prompts:
        eng.im.shares_prompts = False
    eng.start()
    setup_s = time.perf_counter() - t0
    params = SamplingParams(
        max_new_tokens=args.new_tokens,
        min_new_tokens=args.new_tokens,
        temperature=1.0,
        ignore_eos=True,
    )
    from runtime.publication.tensor import ColocatedPublisher

    colocated = ColocatedPublisher([eng], audit=True)
    pub_detail: list[dict[str, float]] = []
    colls: list[dict[str, Any]] = []
    warm: dict[str, float] = {}
    warmup = cuda if args.warmup is None else args.warmup
    report: dict[str, Any] = {}

    def write() -> Path:
        steady = colls[1:] if len(colls) > 1 and not warmup else colls
        med = {k: statistics.median(r[k] for r in steady) for k in steady[0] if k.endswith("_s")}
        report.update(
            {
                "benchmark": "gpu_e2e",
                "label": args.label,
                "compile_model": trainer.cfg.compile_model,
                "activation_recompute": trainer.cfg.activation_recompute,
                "source": args.source,
                "family": loaded.family,
                "device_name": torch.cuda.get_device_name() if cuda else "cpu",
                "prompts": args.prompts,
                "group": args.group,
                "new_tokens": args.new_tokens,
                "publish": args.publish,
                "cuda_graph": graph,
                "fused_sampling": eng.fused_sampling,
                "decode_attention": eng.im.decode_attention,
                "graph_kv_step": eng.im.graph_kv_step,
                "mem_fraction_static": args.mem_fraction_static if engine_fraction else None,
                "kv_cache_dtype": args.kv_cache_dtype,
                "radix_cache": args.radix_cache,
                "shared_prompts": eng.im.shares_prompts,
                "shared_prompt_rows": eng.stats["num_shared_prompt_rows"],
                "engine_slots": eng.max_running,
                "prefix_cache_max_tokens": eng.prefix.max_tokens if eng.prefix else 0,
                "decode_graphs": eng.im.captured_graphs(),
                "attention_backend": backend,
                "compile_cache": args.compile_cache.name,
                "prefill_sdpa_backends": [b.name for b in engine_forward.PREFILL_SDPA_BACKENDS],
                "scores_on_training_graph": trainer.scores_on_training_graph,
                "compile_cache_warm": cache_warm,
                "freeze_heap": args.freeze_heap,
                "decode_compile_and_capture_s": eng.im.capture_s,
                "setup_s": setup_s,
                "warmup": warm,
                "collections": colls,
                "tensor_publication": pub_detail,
                "median_s": med,
                "median_over": "all timed collections" if warmup else "collections after the first",
                "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        )
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / f"gpu_e2e-{args.label}-{args.publish}.json"
        path.write_text(json.dumps(report, indent=2) + "\n")
        return path

    if warmup:  # one untimed collection (generation, update, publication): compiles, captures
        sync()
        t_w = time.perf_counter()
        res_w = generate(eng, prompt_ids[: args.prompts], args.group, params)
        sync()
        warm["generation_s"] = time.perf_counter() - t_w
        warm["decode_compile_and_capture_s"] = eng.im.capture_s
        t_w = time.perf_counter()
        trainer.train_step(
            [
                Sample(prompt_ids[i // args.group], list(r["output_ids"]), advantage=i % 2 - 0.5)
                for i, r in enumerate(res_w)
            ]
        )
        sync()
        warm["update_s"] = time.perf_counter() - t_w
        if args.publish == "tensor":  # the copy and the audit's kernel, as a run's start-up
            t_w = time.perf_counter()
            colocated.publish(trainer.state_dict_for_publication(device=args.device), 0)
            sync()
            warm["publication_s"] = time.perf_counter() - t_w
        print(f"warm-up (not timed below): {warm}", flush=True)
    from runtime.heap import freeze_heap, gc_pauses

    pauses = gc_pauses()
    if args.freeze_heap is None:
        args.freeze_heap = not args.dry_run
    if args.freeze_heap:
        t_f = time.perf_counter()
        warm["frozen_objects"] = freeze_heap()
        warm["freeze_s"] = time.perf_counter() - t_f

    def peak_gib() -> float | None:
        """The allocated peak since the last call (GiB), the counter reset for the next."""
        if not cuda:
            return None
        peak = torch.cuda.max_memory_allocated() / 2**30
        torch.cuda.reset_peak_memory_stats()
        return peak

    with tempfile.TemporaryDirectory() as tmp:
        for c in range(args.collections):
            elapsed = time.perf_counter() - t_main
            if args.deadline_s and colls and elapsed + colls[-1]["total_s"] > args.deadline_s:
                print(f"deadline: collection {c} would end past {args.deadline_s:.0f} s; stopping")
                break
            ids = prompt_ids[c * args.prompts : (c + 1) * args.prompts]
            sync()
            stats0, timings0, gc0 = dict(eng.stats), dict(eng.timings), pauses.snapshot()
            gen_graphs0 = compiled_graphs()  # a compile inside generation is host time
            alloc0 = allocator_counts()
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            sampler = None
            if args.sample_admission and eng._thread is not None and eng._thread.ident:
                sampler = StackSampler(eng._thread.ident, "_admit").start()
            t_start = time.perf_counter()
            results = generate(eng, ids, args.group, params)
            t_gen = time.perf_counter()
            memory = {"generation_peak": peak_gib()}
            gen_graphs = compiled_graphs() - gen_graphs0
            admission_stacks = sampler.stop() if sampler is not None else None
            # where generation went: decode steps (256 new tokens need ~256), prefill seconds
            # (prefix_cache_s: the radix tree's host time, inside prefill_s and decode_s;
            # prefill_wait_s: of prefill_s, waiting for the device's first tokens)
            engine_delta: dict[str, float] = {
                k.removeprefix("num_"): eng.stats[k] - stats0[k]
                for k in ("num_decode_steps", "num_admissions", "num_overlapped_steps")
            }
            for k in ("prefill_s", "prefill_wait_s", "decode_s", "prefix_cache_s"):
                engine_delta[k] = eng.timings[k] - timings0[k]
            engine_delta["capture_s"] = float(getattr(eng.im, "capture_s", 0.0))
            rewards = [task.reward(r["text"]) for r in results]
            samples = []
            for p in range(args.prompts):
                grp = results[p * args.group : (p + 1) * args.group]
                adv = group_advantages(rewards[p * args.group : (p + 1) * args.group])
                for r, a in zip(grp, adv, strict=True):
                    lps = [float(x[0]) for x in r["meta_info"]["output_token_logprobs"]]
                    samples.append(
                        Sample(ids[p], list(r["output_ids"]), advantage=a, rollout_logprobs=lps)
                    )
            # what the update's time may depend on: packed rows (their lengths set the
            # FlexAttention block masks) and compiles it triggers
            rows = trainer._rows(samples)
            graphs0 = compiled_graphs()
            # what the engine still holds while the trainer updates: its prefix tree keeps
            # the finished sequences' K/V until the publication drops it
            memory["prefix_cache_tokens_at_update"] = eng.prefix_cache_tokens
            memory["allocated_before_update"] = (
                torch.cuda.memory_allocated() / 2**30 if cuda else None
            )
            t_score = time.perf_counter()
            metrics = trainer.train_step(samples)
            sync()
            t_upd = time.perf_counter()
            memory["update_peak"] = peak_gib()
            if args.publish == "disk":
                sd = trainer.state_dict_for_publication(dtype=dtype, device="cpu")
                path = write_snapshot(sd, Path(tmp), c + 1)
                res = eng.update_weights(str(path), version=str(c + 1), abort_all=False)
                if not res.get("success"):
                    raise RuntimeError(res)
            else:  # the runtime's colocated path: device copies into the in-process engine
                res = colocated.publish(
                    trainer.state_dict_for_publication(device=args.device), c + 1
                )
                pub_detail.append({"copy_s": res.send_s, "audit_s": res.audit_s})
            sync()
            t_pub = time.perf_counter()
            memory["publication_peak"] = peak_gib()
            row = {
                "generation_s": t_gen - t_start,
                "scoring_s": t_score - t_gen,
                "update_s": t_upd - t_score,
                "publication_s": t_pub - t_upd,
                "total_s": t_pub - t_start,
                "gen_tokens": sum(len(r["output_ids"]) for r in results),
                "update_rows": [int(r.input_ids.numel()) for r in rows],
                "generation_new_compiled_graphs": gen_graphs,
                "update_new_compiled_graphs": compiled_graphs() - graphs0,
                "logprob_abs_diff": metrics.get("logprob_abs_diff"),
                "mean_reward": sum(rewards) / len(rewards),
                "engine": engine_delta,
                # the caching allocator over the collection (device-wide, both sides):
                # retries flush the cache and synchronize; segments are cudaMalloc calls
                "allocator": {k: v - alloc0.get(k, 0) for k, v in allocator_counts().items()},
                # this process's GC pauses over the collection (every thread's)
                "gc": pauses.since(gc0),
                "prompt_tokens": [len(x) for x in ids],
                # the collection's peak, trainer and engine together (one process), and
                # each phase's (GiB allocated)
                "peak_allocated_gib": max(
                    (v for k, v in memory.items() if k.endswith("_peak") and v is not None),
                    default=None,
                ),
                "memory_gib": memory,
            }
            if admission_stacks is not None:
                row["admission_stacks"] = admission_stacks
            colls.append(row)
            print(f"collection {c}: {row}", flush=True)
            write()
    eng.stop()
    if not colls:
        print("no collection ran")
        return 1
    path = write()
    med = report["median_s"]
    print(f"wrote {path}\n")
    print(
        f"{args.label} {args.source}: {args.prompts}x{args.group} samples, {args.new_tokens} new "
        f"tokens, KV cache {str(eng.im.kv_dtype).removeprefix('torch.')}, {eng.max_running} slots"
    )
    print(f"{'phase':<14} {'median s':>9}")
    for k, v in med.items():
        print(f"{k:<14} {v:>9.3f}")
    trainer.close()
    if args.dry_run:
        shutil.rmtree(args.out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
