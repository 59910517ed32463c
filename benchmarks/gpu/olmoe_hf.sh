#!/usr/bin/env bash
# One NVIDIA H200, under 3 minutes: `rlc run` from a ~0.87B OLMoE-shaped HF checkpoint
# (d_model 1024, 16 layers, 64 experts, top-8) that transformers writes here through
# scripts/make_hf_checkpoint.py, with router replay on (specs/examples/gpu-moe.toml, 2
# collections), the end-of-run HF export, `rlc export` of the newest checkpoint, and a
# transformers-vs-rlc logits comparison of the export on the GPU.
#
#   bash benchmarks/gpu/olmoe_hf.sh        # wheels installed and PYTHONPATH set as for run_all.sh
set -euo pipefail
OUT=${OUT:-/tmp/gpu-out}
RES=benchmarks/results/gpu/runs/olmoe-hf
SRC=/tmp/olmoe-hf
ROOT_DIR=/tmp/runs/olmoe-hf
EXPORT=/tmp/olmoe-hf-export
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
rm -rf "$SRC" "$ROOT_DIR" "$EXPORT"
mkdir -p "$OUT" "$RES"
t0=$SECONDS
python3 scripts/make_hf_checkpoint.py --family olmoe --out "$SRC" --d-model 1024 \
  --n-layers 16 --n-heads 16 --hidden 256 --experts 64 --top-k 8 --dtype bfloat16
echo "checkpoint written in $((SECONDS - t0))s"
python3 -m rlc_cli.main run specs/examples/gpu-moe.toml --no-progress \
  --set "model.source=\"$SRC\"" --set "output.root=\"$ROOT_DIR\"" \
  --set training.num_rollouts=2 --set checkpoint.interval=2 --set output.export_hf=true \
  --set trainer.packing_max_tokens=4096
echo "run finished at $((SECONDS - t0))s"
python3 -m rlc_cli.main export "$ROOT_DIR" --out "$EXPORT"
python3 - "$ROOT_DIR" "$EXPORT" "$RES/check.json" <<'PY'
import json, sys
from pathlib import Path

import torch
import transformers

from runtime.models import load_model

root, export, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
newest = sorted((root / "checkpoints").glob("step-*"))[-1]
ours = load_model(str(newest / "model"), device="cuda", dtype=torch.bfloat16).model
x = torch.randint(0, 60, (2, 64), device="cuda", generator=torch.Generator("cuda").manual_seed(0))
result = {"checkpoint": newest.name}
for name, d in (("rlc_export", export), ("final_export", root / "export-hf")):
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(d), dtype=torch.bfloat16).cuda()
    with torch.no_grad():
        a, b = ours(x).float(), hf.eval()(x).logits.float()
    result[name] = {
        "class": type(hf).__name__,
        "max_abs_diff": float((a - b).abs().max()),
        "logit_scale": float(a.abs().max()),
        "argmax_agreement": float((a.argmax(-1) == b.argmax(-1)).float().mean()),
    }
    del hf
metrics = [json.loads(l) for l in (root / "metrics.jsonl").read_text().splitlines() if l.strip()]
result["collections"] = len([m for m in metrics if "collection" in m])
result["replay_decisions"] = [v for m in metrics for k, v in m.items() if k.endswith("replay/decisions")]
out.write_text(json.dumps(result, indent=2) + "\n")
print(json.dumps(result, indent=2))
PY
cp "$ROOT_DIR/metrics.jsonl" "$RES/" 2>/dev/null || true
cp -r "$ROOT_DIR/logs" "$RES/" 2>/dev/null || true
cp "$RES/check.json" "$OUT/" 2>/dev/null || true
echo "done in $((SECONDS - t0))s"
