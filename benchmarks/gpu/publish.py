"""Publication: seconds to move a trainer's weights into the embedded engine.

Paths timed (each ``--repeats`` times after one warm-up, median reported):

- ``disk``: ``Trainer.state_dict_for_publication`` (GPU fp32 -> CPU bf16), write the
  safetensors snapshot, then ``Engine.update_weights`` (read the file, load onto the GPU);
- ``colocated``: ``ColocatedPublisher`` into an engine in this process: a device copy of
  each fp32 trainer tensor into the bf16 parameters (cast in the copy kernel), through the
  engine's pause protocol; its ``wsum64`` audit (trainer and engine checksums) separately;
- ``ipc``: ``TensorPublisher`` to an engine in a second process on the same GPU: CUDA IPC
  handles of the trainer's own tensors in ``/update_weights_from_tensor`` bodies, in
  ``--bucket-mb`` buckets, the engine copies; its ``wsum64`` audit separately;
- ``checksum``: the startup audit's CPU ``sha256`` and the device ``wsum64`` of the engine.

    python benchmarks/gpu/publish.py --source "builtin:olmo3-1b?vocab_size=100352"

On CPU (``--device cpu``, a small ``--source``) the same paths run with shared memory.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def _timed(fn: Callable[[], Any], sync: Callable[[], None]) -> tuple[float, Any]:
    sync()
    t0 = time.perf_counter()
    out = fn()
    sync()
    return time.perf_counter() - t0, out


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--source", default="builtin:olmo3-1b?vocab_size=100352")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bucket-mb", type=int, default=512)
    ap.add_argument("--skip-ipc", action="store_true", help="no second engine process")
    ap.add_argument("--skip-checksum", action="store_true")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu")
    args = ap.parse_args()

    from runtime.engines.embedded.engine import Engine
    from runtime.engines.embedded.launch import start_embedded
    from runtime.engines.process import free_port
    from runtime.models import load_model, state_checksum
    from runtime.publication.checksum import device_checksum
    from runtime.publication.disk import write_snapshot
    from runtime.publication.tensor import ColocatedPublisher, TensorPublisher
    from runtime.trainer import Trainer, TrainerConfig

    cuda = args.device == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    trainer = Trainer(TrainerConfig(model_source=args.source, device=args.device))
    loaded = load_model(args.source, device=args.device, dtype=dtype)
    eng = Engine(loaded, model_path="bench", device=args.device, max_running_requests=4)
    eng.start()
    n_bytes = sum(p.numel() * p.element_size() for p in loaded.model.parameters())
    keys = ["gather_cpu", "write", "engine_load", "disk_total", "colocated", "colocated_audit"]
    if not args.skip_ipc:
        keys += ["ipc", "ipc_audit"]
    rows: dict[str, list[float]] = {k: [] for k in keys}
    colocated = ColocatedPublisher([eng], audit=False)
    proc = None
    ipc: TensorPublisher | None = None
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if not args.skip_ipc:
            port = free_port("127.0.0.1")
            proc = start_embedded(
                args.source,
                port=port,
                log_path=root / "engine.log",
                device=args.device,
                max_running_requests=4,
                timeout=600.0,
                extra=["--dtype", str(dtype).removeprefix("torch.")],
            )
            ipc = TensorPublisher(
                [f"http://127.0.0.1:{port}"],
                600.0,
                bucket_bytes=args.bucket_mb * 1024**2,
                audit=False,
            )
        try:
            for v in range(0, args.repeats + 1):  # v == 0 is the warm-up
                keep = v > 0
                sync()
                t0 = time.perf_counter()
                sd = trainer.state_dict_for_publication(dtype=dtype, device="cpu")
                t1 = time.perf_counter()
                path = write_snapshot(sd, root, v)
                t2 = time.perf_counter()
                res = eng.update_weights(str(path), version=str(v), abort_all=False)
                sync()
                t3 = time.perf_counter()
                if not res.get("success"):
                    raise RuntimeError(f"engine refused weights: {res}")
                del sd
                live = trainer.state_dict_for_publication(device=args.device)
                s_col, _ = _timed(partial(colocated.publish, live, v), sync)
                s_col_audit, _ = _timed(partial(colocated.audit, live), sync)
                timings = {
                    "gather_cpu": t1 - t0,
                    "write": t2 - t1,
                    "engine_load": t3 - t2,
                    "disk_total": t3 - t0,
                    "colocated": s_col,
                    "colocated_audit": s_col_audit,
                }
                if ipc is not None:
                    timings["ipc"], _ = _timed(partial(ipc.publish, live, v), sync)
                    timings["ipc_audit"], _ = _timed(partial(ipc.audit, live), sync)
                del live
                if keep:
                    for k, s in timings.items():
                        rows[k].append(s)
        finally:
            if proc is not None:
                proc.stop()
    checksums: dict[str, float] = {}
    if not args.skip_checksum:
        state = loaded.model.state_dict()
        device_checksum(state)  # warm-up (multiplier ramps, kernels)
        checksums["sha256_cpu"], _ = _timed(partial(state_checksum, state), sync)
        checksums["wsum64_device"], _ = _timed(partial(device_checksum, state), sync)
    eng.stop()
    med = {k: statistics.median(v) for k, v in rows.items()}
    report: dict[str, Any] = {
        "benchmark": "gpu_publish",
        "source": args.source,
        "device_name": torch.cuda.get_device_name() if cuda else "cpu",
        "weight_bytes": n_bytes,
        "engine_dtype": str(dtype),
        "bucket_mb": args.bucket_mb,
        "repeats": args.repeats,
        "median_s": med,
        "all_s": rows,
        "checksum_s": checksums,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / "gpu_publish.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}\n")
    print(f"{args.source}: {n_bytes / 1e9:.2f} GB of {dtype} engine weights")
    print(f"{'stage':<18} {'median s':>9}")
    for k, v in med.items():
        print(f"{k:<18} {v:>9.4f}")
    for k, v in checksums.items():
        print(f"{'checksum ' + k:<18} {v:>9.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
