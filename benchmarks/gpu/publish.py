"""Publication: seconds to move a trainer's weights into the embedded engine.

Paths timed (each ``--repeats`` times, median reported):

- ``disk``: ``Trainer.state_dict_for_publication`` (GPU fp32 -> CPU bf16), write the
  safetensors snapshot (``runtime.publication.disk.write_snapshot``), then
  ``Engine.update_weights`` (read the file, ``load_state_dict`` onto the GPU);
- ``tensor``: the in-process path an ``/update_weights_from_tensor`` would take when the
  engine shares the process (and GPU) with the trainer: a bf16 GPU copy of each tensor
  straight into the engine's parameters. The embedded engine does not expose this path
  yet; this measures what it would cost.
- ``checksum``: the startup audit's ``state_checksum`` of the engine weights.

    python benchmarks/gpu/publish.py --source "builtin:olmo3-1b?vocab_size=100352"
"""

from __future__ import annotations

import argparse
import json
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
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default="builtin:olmo3-1b?vocab_size=100352")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-checksum", action="store_true")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu")
    args = ap.parse_args()

    from runtime.engines.embedded.engine import Engine
    from runtime.models import load_model, state_checksum
    from runtime.publication.disk import write_snapshot
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
    rows: dict[str, list[float]] = {
        k: [] for k in ("gather_cpu", "write", "engine_load", "disk_total", "tensor_copy")
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for v in range(1, args.repeats + 1):
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
            rows["gather_cpu"].append(t1 - t0)
            rows["write"].append(t2 - t1)
            rows["engine_load"].append(t3 - t2)
            rows["disk_total"].append(t3 - t0)
            del sd
            # tensor path: GPU bf16 copies straight into the engine's parameters
            sync()
            t0 = time.perf_counter()
            with torch.no_grad():
                src = trainer.state_dict_for_publication(dtype=dtype, device=args.device)
                dst = loaded.model.state_dict()
                for name, t in dst.items():
                    t.copy_(src[name])
            sync()
            rows["tensor_copy"].append(time.perf_counter() - t0)
            del src
    checksum_s = None
    if not args.skip_checksum:
        t0 = time.perf_counter()
        state_checksum(loaded.model.state_dict())
        checksum_s = time.perf_counter() - t0
    eng.stop()
    med = {k: statistics.median(v) for k, v in rows.items()}
    report: dict[str, Any] = {
        "benchmark": "gpu_publish",
        "source": args.source,
        "device_name": torch.cuda.get_device_name() if cuda else "cpu",
        "weight_bytes": n_bytes,
        "repeats": args.repeats,
        "median_s": med,
        "all_s": rows,
        "checksum_s": checksum_s,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "gpu_publish.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {path}\n")
    print(f"{args.source}: {n_bytes / 1e9:.2f} GB of {dtype} weights")
    print(f"{'stage':<14} {'median s':>9}")
    for k, v in med.items():
        print(f"{k:<14} {v:>9.3f}")
    if checksum_s is not None:
        print(f"{'checksum':<14} {checksum_s:>9.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
