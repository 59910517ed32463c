"""Verifier throughput on the real data sets: items scored per second, single thread.

Workloads (the data rlc ships; the IFEval reference responses from ../shared/data):
- gsm8k: the 1,319 test reference solutions scored against their gold (extraction + match);
- math: 1,000 boxed responses to MATH-500: each gold re-spelled (``\\dfrac``, spaces) and
  the next problem's answer (wrong; these mostly need sympy to reject), through the sympy
  worker process (the default), in process, and in ``string`` mode (no sympy);
- ifeval: the 541 GPT-4 responses with their instruction lists, strict and loose;
- arithmetic / multiplication: 1,000 generated prompts answered correctly.

The code and judge verifiers are measured by their own benchmark (benchmarks/executor.py).
Each row is the median of ``--repeats`` passes after one warm-up pass. Prints a table last
and writes ``benchmarks/results/verifiers.json``.

    python benchmarks/verifiers.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = Path(os.environ.get("RLC_DATA_ROOT", ROOT / "runtime" / "data" / "datasets"))
# the reference verdicts of the IFEval checker are not shipped: a folder beside the checkout
IFEVAL_REFERENCE = ROOT / ".." / "shared" / "data" / "ifeval-reference"
RESULTS = ROOT / "benchmarks" / "results" / "verifiers.json"

from runtime.rewards.base import ScoreItem, get_verifier  # noqa: E402


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def workloads() -> list[tuple[str, str, dict[str, Any], list[ScoreItem]]]:
    """(row name, verifier, config, items)."""
    from runtime.data.tasks import load_task
    from runtime.rewards.gsm8k import gold_answer

    out: list[tuple[str, str, dict[str, Any], list[ScoreItem]]] = []
    gsm = _jsonl(DATA / "gsm8k" / "test.jsonl")
    out.append(
        ("gsm8k", "gsm8k", {}, [ScoreItem(r["answer"], gold_answer(r["answer"]), {}) for r in gsm])
    )
    math = _jsonl(DATA / "math500" / "test.jsonl")
    # half right (re-spelled gold), half wrong (the next problem's answer): the wrong ones
    # reach sympy whenever both sides are not plain numbers
    math_items = []
    for i, r in enumerate(math):
        respelled = r["answer"].replace("\\frac", "\\dfrac").replace("+", " + ")
        other = math[(i + 1) % len(math)]["answer"]
        math_items.append(
            ScoreItem(f"The final answer is $\\boxed{{{respelled}}}$.", r["answer"], {})
        )
        math_items.append(ScoreItem(f"The final answer is $\\boxed{{{other}}}$.", r["answer"], {}))
    out.append(("math (sympy worker)", "math", {}, math_items))
    out.append(("math (in process)", "math", {"use_worker": False}, math_items))
    out.append(("math (string mode)", "math", {"equivalence": "string"}, math_items))
    ref = IFEVAL_REFERENCE
    inputs = _jsonl(ref / "input_data_gpt4_20231107_145030.jsonl")
    responses = {
        r["prompt"]: r["response"]
        for r in _jsonl(ref / "input_response_data_gpt4_20231107_145030.jsonl")
    }
    if_items = [
        ScoreItem(
            responses[r["prompt"]],
            {"instruction_id_list": r["instruction_id_list"], "kwargs": r["kwargs"]},
            {},
        )
        for r in inputs
    ]
    out.append(("ifeval (strict)", "ifeval", {"strict": True}, if_items))
    out.append(("ifeval (loose)", "ifeval", {"strict": False}, if_items))
    for task in ("arithmetic", "multiplication"):
        prompts = load_task({"task": task, "train_count": 1000}, 17).train
        out.append((task, task, {}, [ScoreItem(str(p.target), p.target, {}) for p in prompts]))
    return out


def measure(
    verifier: str, config: dict[str, Any], items: list[ScoreItem], repeats: int
) -> dict[str, Any]:
    v = get_verifier(verifier, config)
    try:
        results = v.score_batch(items)  # warm-up (worker start, langdetect profiles, caches)
        times = []
        for _ in range(repeats):
            from runtime.rewards.ifeval_text import detect_language

            detect_language.cache_clear()  # time language detection, not the cache
            t = time.perf_counter()
            v.score_batch(items)
            times.append(time.perf_counter() - t)
    finally:
        v.close()
    med = statistics.median(times)
    return {
        "items": len(items),
        "seconds_median": round(med, 4),
        "items_per_s": round(len(items) / med, 1),
        "mean_score": round(sum(r.score for r in results) / len(results), 4),
        "failures": sum(not r.ok for r in results),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    rows = []
    for name, verifier, config, items in workloads():
        res = measure(verifier, config, items, args.repeats)
        rows.append({"name": name, "verifier": verifier, "config": config, **res})
        print(f"measured {name}: {res['items_per_s']} items/s", file=sys.stderr)
    report = {
        "benchmark": "verifiers",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "repeats": args.repeats,
        "rows": rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {RESULTS.relative_to(ROOT)}\n")
    print(
        f"{'workload':<22} {'items':>6} {'median s':>9} {'items/s':>10} {'mean score':>11} {'failures':>9}"
    )
    for r in rows:
        print(
            f"{r['name']:<22} {r['items']:>6} {r['seconds_median']:>9.3f} {r['items_per_s']:>10.1f} "
            f"{r['mean_score']:>11.3f} {r['failures']:>9}"
        )


if __name__ == "__main__":
    main()
