"""Loading a checkpoint: what the trainer and each engine pay before serving, CPU.

Writes an HF checkpoint of a builtin model (``--model``, the 1.5B-shaped builtin by
default) into a temporary directory, then times, each in a fresh process (so no page or
allocator state carries over, apart from the file in the page cache after the first read):

- ``load_model`` of that checkpoint, as the runtime does it (allocate, then load);
- OLMo-core's ``init_weights`` on the same architecture: the random initialisation the
  loader ran before every load, which the checkpoint then overwrote.

    .venv/bin/python benchmarks/model_load.py [--model builtin:olmo3-1b] [--repeats 2]
        [--code-root CHECKOUT]   # another commit's loader, to compare

Prints a table last and writes JSON to benchmarks/results/model_load.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from results_file import write_results

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHILD = """
import json, sys, time
sys.path.insert(0, {root!r})
import torch
from runtime.models import load_model
from runtime.models.hf import hf_config_to_olmo_core
what, path = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
if what == "load_model":
    load_model(path)
else:
    cfg = json.loads(open(path + "/config.json").read())
    _, config = hf_config_to_olmo_core(cfg)
    model = config.build(init_device="meta")
    model.init_weights(device=torch.device("cpu"))
print(json.dumps({{"s": time.perf_counter() - t0}}))
"""


def _child(what: str, path: Path, code_root: Path) -> float:
    code = CHILD.format(root=str(code_root))
    out = subprocess.run(
        [sys.executable, "-c", code, what, str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1])["s"])


def _write_checkpoint(model: str, out: Path) -> int:
    from runtime.models import export_hf, load_model

    loaded = load_model(model)
    export_hf(loaded, loaded.tokenizer, out)
    return sum(p.numel() for p in loaded.model.parameters())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="builtin:olmo3-1b")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument(
        "--code-root",
        type=Path,
        default=ROOT,
        help="the checkout whose loader runs (another commit's, to compare)",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/model_load.json")
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="rlc-load-") as tmp:
        ckpt = Path(tmp) / "hf"
        t0 = time.perf_counter()
        params = _write_checkpoint(args.model, ckpt)
        print(
            f"wrote {ckpt.name} ({params / 1e9:.2f}B parameters) in {time.perf_counter() - t0:.1f} s"
        )
        for what, label in (
            ("load_model", "load_model (allocate, load)"),
            ("init_weights", "init_weights (no longer run)"),
        ):
            times = [_child(what, ckpt, args.code_root) for _ in range(args.repeats)]
            rows.append({"step": what, "label": label, "seconds": times, "best_s": min(times)})
    write_results(
        args.out,
        rows,
        model=args.model,
        parameters=params,
        torch=__import__("torch").__version__,
    )
    print(f"{'step':<32}{'best s':>10}{'all s':>24}")
    for r in rows:
        runs = ", ".join(f"{s:.2f}" for s in r["seconds"])
        print(f"{r['label']:<32}{r['best_s']:>10.2f}{runs:>24}")


if __name__ == "__main__":
    main()
