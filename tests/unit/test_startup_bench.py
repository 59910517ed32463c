"""The start-up breakdown and the `--bench` phase table read back from a run's record."""

from __future__ import annotations

import json
from pathlib import Path

from runtime.entrypoints.bench import bench, run_gpus, table
from runtime.node.startup import StartupClock, read_startup


def test_clock_counts_from_the_command_and_keeps_every_phase(tmp_path: Path) -> None:
    clock = StartupClock.from_env({"RLC_RUN_T0": "100.0", "RLC_RUN_COMPILED": "101.5"})
    assert clock.phases[0] == ("compile", 1.5)
    assert clock.phases[1][0] == "runtime import"
    clock.mark("engines ready")
    clock.details["graphs"] = 12
    assert [n for n, _ in clock.phases] == ["compile", "runtime import", "engines ready"]
    assert clock.line().startswith("start-up ")
    clock.write(tmp_path)
    back = read_startup(tmp_path)
    assert back is not None and back["graphs"] == 12
    assert [p["name"] for p in back["phases"]] == ["compile", "runtime import", "engines ready"]
    # a runtime started by hand counts from its own start
    assert StartupClock.from_env({}).phases == []


def test_bench_table_first_collection_apart_and_tokens_per_gpu(tmp_path: Path) -> None:
    rows = [
        {"collection": 0, "time/generate_s": 50.0, "time/train_s": 10.0, "time/collection_s": 61.0,
         "tokens/generated": 1000, "tokens/total": 3000},
        {"collection": 1, "time/generate_s": 1.0, "time/train_s": 1.0, "time/collection_s": 2.0,
         "tokens/generated": 1000, "tokens/total": 3000},
        {"collection": 2, "time/generate_s": 1.0, "time/train_s": 3.0, "time/collection_s": 4.0,
         "tokens/generated": 1000, "tokens/total": 3000, "train/new_compiled_graphs": 2.0,
         "mismatch/logprob_abs_mean": 0.0556},
    ]  # fmt: skip
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = bench(tmp_path, gpus=2)
    assert data["phases"]["generate_s"] == {"first": 50.0, "steady": 1.0}
    assert data["phases"]["collection_s"] == {"first": 61.0, "steady": 3.0}
    # (1000 generated + 3000 trained) / 2 s / 2 GPUs and / 4 s / 2 GPUs -> median 750
    assert data["tokens_per_s_per_gpu"]["steady"] == 750.0
    text = table(data)
    assert "steady (median of 2)" in text and "tokens/s/GPU (2)" in text
    # an update that compiled mid-run shows (records without the count read as 0)
    assert data["update_compiles"] == {"first": 0, "later": 2}
    assert "graphs compiled by updates: 0 in the first collection, 2 later" in text
    assert run_gpus({"used_gpus": 0}) == 1 and run_gpus({"used_gpus": 8}) == 8
    # the engines' log-prob gap beside the speed (a record without it is left out)
    assert data["logprob_gap"] == {"first": None, "steady": 0.0556}
    assert "log-prob gap" in text and "0.0556" in text


def test_bench_table_shows_the_gc_pauses_of_each_collection(tmp_path: Path) -> None:
    rows = [
        {"collection": c, "time/collection_s": 2.0, "tokens/generated": 10, "tokens/total": 30,
         "gc/pause_s": pause, "gc/longest_pause_s": longest, "gc/full_collections": 1}
        for c, pause, longest in ((0, 0.9, 0.8), (1, 0.02, 0.01), (2, 0.04, 0.03))
    ]  # fmt: skip
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = bench(tmp_path, gpus=1)
    assert data["gc"]["pause_s"] == {"first": 0.9, "steady": 0.03}
    assert data["gc"]["longest_pause_s"] == {"first": 0.8, "steady": 0.02}
    text = table(data)
    assert "GC pauses" in text and "longest GC pause" in text


def test_process_start_time_is_this_process() -> None:
    """A child's start-up phases count from its interpreter's start (``/proc``)."""
    import sys
    import time

    from runtime.node.startup import phase_line, process_started_at

    started = process_started_at()
    if not sys.platform.startswith("linux"):
        assert started is None
        return
    assert started is not None
    assert time.time() - 24 * 3600 < started <= time.time()
    assert phase_line([{"name": "model", "seconds": 1.234}]) == "model 1.2s"


def test_bench_table_names_the_prefill_compile_inside_the_warm_up(tmp_path: Path) -> None:
    clock = StartupClock.from_env({})
    clock.mark("engines ready")
    clock.mark("decode graph warm-up")
    clock.details.update(graphs=24, prefill_compile_s=3.25)
    clock.write(tmp_path)
    rows = [{"collection": 0, "time/collection_s": 2.0, "tokens/generated": 10, "tokens/total": 30}]
    (tmp_path / "metrics.jsonl").write_text(json.dumps(rows[0]) + "\n")
    text = table(bench(tmp_path, gpus=1))
    assert "decode graphs captured before the first collection: 24" in text
    assert "of that warm-up, the prefill's compile: 3.2 s" in text
