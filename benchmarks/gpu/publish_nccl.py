"""Disaggregated publication: trainer and engine as separate processes, weights over NCCL.

The trainer (this process, GPU 0) publishes with ``DistributedPublisher`` — SGLang's
``/init_weights_update_group`` + ``/update_weights_from_distributed`` protocol, bucketed
broadcasts — to an embedded engine server in a second process pinned (CUDA_VISIBLE_DEVICES)
to ``--engine-gpu``. For comparison the same weights go to an engine process on the
trainer's GPU through CUDA IPC (``TensorPublisher``), the colocated path. Each is timed
``--repeats`` times after a warm-up; medians land in ``gpu_publish_nccl.json``.

    python benchmarks/gpu/publish_nccl.py --source "builtin:olmo3-1b?vocab_size=100352"

NCCL refuses two ranks on one device, so the NCCL leg needs a second GPU; on a one-GPU
machine the same two processes and protocol run with gloo broadcasting the CUDA tensors
(``notes.backend`` says which ran). ``--device cpu`` runs the same code with gloo.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--source", default="builtin:olmo3-1b?vocab_size=100352")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--engine-gpu", type=int, default=None, help="default: 1 if present")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bucket-mb", type=int, default=512)
    ap.add_argument("--skip-ipc", action="store_true")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu")
    args = ap.parse_args()

    from runtime.engines.embedded.launch import embedded_argv
    from runtime.engines.process import ServerProcess, free_port
    from runtime.publication.distributed import DistributedPublisher
    from runtime.publication.tensor import TensorPublisher
    from runtime.trainer import Trainer, TrainerConfig

    cuda = args.device == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    gpus = torch.cuda.device_count() if cuda else 0
    engine_gpu = args.engine_gpu if args.engine_gpu is not None else (1 if gpus > 1 else 0)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def engine(gpu: int, root: Path, tag: str) -> tuple[ServerProcess, str]:
        port = free_port("127.0.0.1")
        argv = embedded_argv(
            args.source,
            port=port,
            device=args.device,
            max_running_requests=4,
            extra=["--dtype", str(dtype).removeprefix("torch.")],
        )
        proc = ServerProcess(
            name=f"engine-{tag}",
            argv=argv,
            health_url=f"http://127.0.0.1:{port}/health",
            log_path=root / f"engine-{tag}.log",
            env={"CUDA_VISIBLE_DEVICES": str(gpu)} if cuda else None,
        ).start()
        proc.wait_healthy(600.0)
        return proc, f"http://127.0.0.1:{port}"

    t_start = time.perf_counter()
    trainer = Trainer(TrainerConfig(model_source=args.source, device=args.device))
    live = trainer.state_dict_for_publication(device=args.device)
    n_bytes = sum(t.numel() for t in live.values()) * torch.finfo(dtype).bits // 8
    rows: dict[str, list[float]] = {
        "broadcast": [],
        "broadcast_audit": [],
        "ipc": [],
        "ipc_audit": [],
    }
    notes: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        procs: list[ServerProcess] = []
        try:
            backend = "nccl" if cuda else "gloo"
            if cuda and engine_gpu == 0:
                # NCCL refuses two ranks on one device: the same processes and protocol, with
                # gloo broadcasting the CUDA tensors (staged through host memory)
                backend = "gloo"
                notes["nccl"] = "one GPU: NCCL refuses two ranks on one device; gloo timed"
            proc, url = engine(engine_gpu, root, "nccl")
            procs.append(proc)
            pub = DistributedPublisher(
                [url],
                600.0,
                master_address="127.0.0.1",
                master_port=free_port("127.0.0.1"),
                backend=backend,
                dtype=dtype,
                bucket_bytes=args.bucket_mb * 1024**2,
                audit=False,
            )
            try:
                t0 = time.perf_counter()
                pub.connect()
                notes["backend"] = backend
                notes["group_init_s"] = f"{time.perf_counter() - t0:.3f}"
                for v in range(args.repeats + 1):
                    sync()
                    t0 = time.perf_counter()
                    pub.publish(live, v + 1)
                    sync()
                    t1 = time.perf_counter()
                    pub.audit(live)
                    t2 = time.perf_counter()
                    if v:
                        rows["broadcast"].append(t1 - t0)
                        rows["broadcast_audit"].append(t2 - t1)
            except Exception as exc:  # record the cause, keep the IPC figure
                notes["broadcast"] = f"failed: {type(exc).__name__}: {exc}"[:500]
            finally:
                pub.close()
            if not args.skip_ipc:
                proc, url = engine(0, root, "ipc")
                procs.append(proc)
                ipc = TensorPublisher(
                    [url], 600.0, bucket_bytes=args.bucket_mb * 1024**2, audit=False
                )
                for v in range(args.repeats + 1):
                    sync()
                    t0 = time.perf_counter()
                    ipc.publish(live, v + 1)
                    sync()
                    t1 = time.perf_counter()
                    ipc.audit(live)
                    t2 = time.perf_counter()
                    if v:
                        rows["ipc"].append(t1 - t0)
                        rows["ipc_audit"].append(t2 - t1)
        finally:
            for p in procs:
                p.stop()
            for p in procs:
                log = p.log_path.read_text(errors="replace").splitlines()[-5:]
                notes[f"{p.name}_log_tail"] = "\n".join(log)
    med = {k: statistics.median(v) for k, v in rows.items() if v}
    report: dict[str, Any] = {
        "benchmark": "gpu_publish_nccl",
        "source": args.source,
        "device_name": torch.cuda.get_device_name() if cuda else "cpu",
        "gpus": gpus,
        "engine_gpu": engine_gpu,
        "weight_bytes": n_bytes,
        "engine_dtype": str(dtype),
        "bucket_mb": args.bucket_mb,
        "repeats": args.repeats,
        "median_s": med,
        "all_s": rows,
        "notes": notes,
        "wall_s": time.perf_counter() - t_start,
        "pid": os.getpid(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / "gpu_publish_nccl.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}\n{args.source}: {n_bytes / 1e9:.2f} GB of {dtype} weights")
    for k, v in med.items():
        print(f"{k:<12} {v:>9.4f} s (median of {len(rows[k])})")
    for k, v in notes.items():
        if not k.endswith("log_tail"):
            print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
