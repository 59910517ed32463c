#!/usr/bin/env bash
# One NVIDIA H200, under 3 minutes: `rlc run` from a ~0.87B OLMoE-shaped HF checkpoint
# (d_model 1024, 16 layers, 64 experts, top-8) that transformers writes here through
# scripts/make_hf_checkpoint.py, with router replay on (specs/examples/gpu-moe.toml, 2
# collections), the end-of-run HF export, `rlc export` of the newest checkpoint, and a
# transformers-vs-rlc logits comparison of the export on the GPU.
#
#   bash benchmarks/gpu/olmoe_hf.sh        # wheels installed and PYTHONPATH set as for run_all.sh
#   bash benchmarks/gpu/olmoe_hf.sh --dry-run   # CPU: compile the run's spec, print the steps
#
# The run's metrics and logs are copied to $RES (and $OUT) every 15 s while it runs and on
# any exit (a timeout's SIGTERM included), so a cut run still shows where its time went.
set -euo pipefail
OUT=${OUT:-/tmp/gpu-out}
RES=${RES:-benchmarks/results/gpu/runs/olmoe-hf}
SRC=${SRC:-/tmp/olmoe-hf}
ROOT_DIR=${ROOT_DIR:-/tmp/runs/olmoe-hf}
EXPORT=${EXPORT:-/tmp/olmoe-hf-export}
PY=${PY:-python3}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
RUN_SETS=(--set "model.source=\"$SRC\"" --set "output.root=\"$ROOT_DIR\""
  --set training.num_rollouts=2 --set checkpoint.interval=2 --set output.export_hf=true
  --set trainer.packing_max_tokens=4096)
if [[ ${1:-} == --dry-run ]]; then
  # the checkpoint does not exist here: compile with the builtin MoE in its place
  "$PY" -m rlc_cli.main validate specs/examples/gpu-moe.toml "${RUN_SETS[@]}" \
    --set 'model.source="builtin:smallmoe"' --set output.export_hf=false
  echo "would run: make_hf_checkpoint.py -> rlc run specs/examples/gpu-moe.toml ${RUN_SETS[*]} -> rlc export -> logits check"
  exit 0
fi
rm -rf "$SRC" "$ROOT_DIR" "$EXPORT"
mkdir -p "$OUT" "$RES"
copy_logs() {
  cp "$ROOT_DIR/metrics.jsonl" "$RES/" 2>/dev/null || true
  cp -r "$ROOT_DIR/logs" "$RES/" 2>/dev/null || true
  cp -r "$RES" "$OUT/" 2>/dev/null || true
}
trap 'exit 143' TERM INT
(while sleep 15; do copy_logs; done) &
COPIER=$!
trap 'kill $COPIER 2>/dev/null || true; copy_logs' EXIT
t0=$SECONDS
"$PY" scripts/make_hf_checkpoint.py --family olmoe --out "$SRC" --d-model 1024 \
  --n-layers 16 --n-heads 16 --hidden 256 --experts 64 --top-k 8 --dtype bfloat16
echo "checkpoint written in $((SECONDS - t0))s"
"$PY" -m rlc_cli.main run specs/examples/gpu-moe.toml --no-progress "${RUN_SETS[@]}" 2>&1 | tee "$RES/run.log"
echo "run finished at $((SECONDS - t0))s"
"$PY" -m rlc_cli.main export "$ROOT_DIR" --out "$EXPORT"
"$PY" - "$ROOT_DIR" "$EXPORT" "$RES/check.json" <<'PY'
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
echo "done in $((SECONDS - t0))s"
