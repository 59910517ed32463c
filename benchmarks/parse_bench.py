"""TOML front-end latency: parse time of a realistic 300-line spec, import and CLI start-up.

Reports (each in a fresh interpreter where start-up matters):
- median ``parse_document`` time over N runs of a 300-line spec (parser warm), and tomllib's
  time on the same text for scale;
- ``import compiler.parse`` and import + first parse (tables loaded, cold caches);
- ``rlc --help`` and, when that command exists, ``rlc validate SPEC`` cold start;
- the bare interpreter floor (``python -c pass``).

Prints a table last and writes ``benchmarks/results/parse.json``.

    python benchmarks/parse_bench.py [--runs 200] [--starts 10]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "parse.json"

_HEAD = """\
# A GRPO run of a mid-size MoE model on math + code + instruction following.
schema_version = 1
name = "olmoe-grpo-mix-v3"
recipe = "moe-async"

[model]
source = "/weka/oe-training-default/checkpoints/olmoe-1b-7b-0924-instruct"
format = "hf"          # hf | olmo_core
architecture = "moe"
hf_template = "olmo"

[data]
tasks = ["gsm8k", "math", "ifeval", "code"]
seed = 1234
shuffle = true
prompt_wrapper = "default"
eval = [
  { name = "gsm8k-test", path = "data/gsm8k/test.jsonl", every = 20 },
  { name = "math500", path = "data/math500/test.jsonl", every = 20 },
]

[output]
root = "/weka/oe-adapt-default/rl-runs/olmoe-grpo-mix-v3"
export_hf = true
rollout_sample_rate = 0.05

[launch]
workspace = "ai2/rl-research"
budget = "ai2/oe-adapt"
cluster = ["ai2/jupiter", "ai2/titan"]
priority = "high"
min_runtime = "2h"
timeout = "3d"
auto_resume = true
max_retries = 3
gpus_per_replica = 8
shared_memory = "256GiB"
weka_mounts = [
  { bucket = "oe-training-default", mount = "/weka/oe-training-default" },
  { bucket = "oe-adapt-default", mount = "/weka/oe-adapt-default" },
]
env = { NCCL_DEBUG = "WARN", TOKENIZERS_PARALLELISM = "false" }
secrets = ["HF_TOKEN", "WANDB_API_KEY"]

[training]
num_rollouts = 400
eval_interval = 20
save_interval = 50
save_checkpoints = true
filter_zero_std_groups = true
max_run_seconds = 259_200
algorithm = "grpo"

[trainer]
nodes = 2
gpus = 16
expert_parallel = 8
tensor_parallel = 1
pipeline_parallel = 1
context_parallel = 1
micro_batch_size = 1
activation_recompute = "full"
attention_backend = "flash"
sequence_packing = true
packing_max_tokens = 16_384
fp32_lm_head = true
router_aux_loss_weight = 1e-3
router_z_loss_weight = 1e-5
router_replay = true

[inference]
engine = "sglang"
placement = "disaggregated"
gpus = 16
tensor_parallel = 1
prompts_per_collection = 64
samples_per_prompt = 8
global_batch = 512
max_context_length = 8192
max_response_length = 4096
max_prompt_length = 2048
temperature = 1.0
top_p = 1.0
top_k = -1
max_running_requests = 128
mem_fraction = 0.85
radix_cache = true
cuda_graph_max_bs = 256
router_policy = "cache_aware"

[optimizer]
lr = 1e-6
schedule = "constant"
warmup_steps = 10
weight_decay = 0.0
adam_betas = [0.9, 0.95]
adam_eps = 1e-8
clip_grad = 1.0
ppo_clip_low = 0.2
ppo_clip_high = 0.28
kl_coef = 0.0
entropy_coef = 0.0

[async]
enabled = true
max_policy_lag = 2
off_policy_correction = "tis"
tis_clip = 2.0
buffer_factor = 2
publication = "barrier"

[checkpoint]
interval = 50
keep_last = 2
keep_every = 200
resume = "newest"

[rewards.math]
equivalence = "sympy"
timeout_seconds = 5.0

[rewards.code]
executor = "http://127.0.0.1:8765"
time_limit_s = 10
memory_limit_mb = 2048
max_processes = 16

[tracking]
wandb_mode = "online"
wandb_project = "olmoe-rl"
wandb_group = "grpo-mix"

[native.sglang]
chunked_prefill_size = 8192
enable_mixed_chunk = true
"""

_JUDGE = '''
# Judge {i}: a managed judge for rubric "rubric-{i}".
[judges.judge-{i}]
kind = "managed"
model = "/weka/judges/qwen-judge-{i}"
gpus = 1
max_concurrency = 32
timeout_s = 30.5
started = 2026-11-{day:02d}T08:30:00Z

[rubrics.rubric-{i}]
prompt = """
Score the response from 1 to 10.
Be strict about correctness.\\n"""
scale = [1, 10]
weights = {{ helpful = 0.5, correct = 0.5 }}
'''


def realistic_spec(lines: int = 300) -> str:
    """A spec shaped like a real one: sections, comments, arrays, inline tables, judges."""
    text = _HEAD
    i = 0
    while text.count("\n") < lines:
        text += _JUDGE.format(i=i, day=i % 28 + 1)
        i += 1
    return "\n".join(text.splitlines()[:lines]) + "\n"


def _median_ms(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def _best_ms(fn, runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1000


def _cold(argv: list[str], starts: int, cwd: Path) -> float | None:
    times = []
    for _ in range(starts):
        t0 = time.perf_counter()
        proc = subprocess.run(argv, cwd=cwd, capture_output=True)
        times.append(time.perf_counter() - t0)
        if proc.returncode not in (0, 1, 2):
            return None
    return statistics.median(times) * 1000


def _in_fresh(code: str, starts: int) -> float:
    """Median of a time measured inside fresh interpreters (ms)."""
    values = []
    for _ in range(starts):
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
        values.append(float(out.strip()))
    return statistics.median(values)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--starts", type=int, default=10)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from compiler.parse import parse_document

    spec = realistic_spec()
    parse_document(spec, "spec.toml")  # warm the parser
    rows: dict[str, float | None] = {}
    rows["parse 300-line spec (median, warm)"] = _median_ms(
        lambda: parse_document(spec, "spec.toml"), args.runs
    )
    rows["parse 300-line spec (best run)"] = _best_ms(
        lambda: parse_document(spec, "spec.toml"), args.runs
    )
    rows["tomllib.loads same spec (median)"] = _median_ms(lambda: tomllib.loads(spec), args.runs)
    rows["import compiler.parse (fresh process)"] = _in_fresh(
        "import time; t=time.perf_counter(); import compiler.parse; "
        "print((time.perf_counter()-t)*1000)",
        args.starts,
    )
    rows["import + first parse (fresh process)"] = _in_fresh(
        "from benchmarks.parse_bench import realistic_spec; s=realistic_spec(); "
        "import time; t=time.perf_counter(); from compiler.parse import parse_document; "
        "parse_document(s, 'spec.toml'); print((time.perf_counter()-t)*1000)",
        args.starts,
    )
    python = [sys.executable]
    rows["python -c pass (floor)"] = _cold([*python, "-c", "pass"], args.starts, ROOT)
    rows["rlc --help (cold)"] = _cold([*python, "-m", "rlc_cli.main", "--help"], args.starts, ROOT)
    with tempfile.TemporaryDirectory() as tmp:
        spec_path = Path(tmp) / "spec.toml"
        spec_path.write_text(spec)
        has_validate = (ROOT / "compiler" / "commands" / "validate.py").exists()
        rows["rlc validate spec (cold)"] = (
            _cold([*python, "-m", "rlc_cli.main", "validate", str(spec_path)], args.starts, ROOT)
            if has_validate
            else None
        )
    result = {
        "spec_lines": spec.count("\n"),
        "runs": args.runs,
        "starts": args.starts,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "timings_ms": rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    width = max(len(k) for k in rows)
    print(f"{'measurement':<{width}}  ms")
    for key, value in rows.items():
        shown = f"{value:8.2f}" if value is not None else "     n/a"
        print(f"{key:<{width}}  {shown}")
    print(f"(written to {RESULTS.relative_to(ROOT)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
