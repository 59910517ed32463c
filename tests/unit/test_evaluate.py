"""Evaluation pieces without engines: config, schedule, task names, sampling, scoring."""

from __future__ import annotations

import copy
import typing
from pathlib import Path
from typing import Any

import pytest
from compiled_run import compile_manifest, run_config

from contract.run import parse
from contract.spec.judges import Rubric as SpecRubric
from runtime.config import ConfigError
from runtime.data.eval_tasks import eval_task_kind, known_eval_tasks, load_eval_set
from runtime.data.records import Prompt
from runtime.data.tasks import DataError
from runtime.metrics import MetricsWriter, read_metrics
from runtime.rewards.base import RewardResult, Verifier
from runtime.rewards.judge import RUBRICS
from runtime.rollout.evaluation import EvalSampling, evaluate_pool
from runtime.rollout.evaluators import milestone_due


def test_evaluation_config_is_read_with_defaults_and_tasks(tmp_path: Path) -> None:
    cfg = run_config(
        tmp_path,
        inference={"max_response_length": 16, "max_context_length": 64},
        evaluation={
            "mode": "background",
            "image": "01JAAAAAAAAAAAAAAAAAAAAAAA",
            "interval": 5,
            "tasks": [{"task": "gsm8k", "interval": 10, "generation": {"temperature": 0.6}}],
        },
    )
    ev = cfg.evaluation
    assert (ev.mode, ev.interval, ev.max_response_length, ev.temperature) == (
        "background",
        5,
        16,  # derived from inference.max_response_length
        0.0,
    )
    assert ev.tasks[0].task == "gsm8k" and ev.tasks[0].interval == 10
    assert cfg.training.skip_eval_before_train is True
    # the evaluator's command line is compiled; a milestone fills in update and checkpoint
    from runtime.effective import processes

    view = processes(cfg, cfg.contract.commands.model_dump(), "/m.json")["evaluator"]
    assert view["argv"][1:] == [
        "-m", "runtime.entrypoints.evaluate", "/m.json",
        "--update", "{update}", "--checkpoint", "{checkpoint}",
    ]  # fmt: skip
    assert cfg.paths.eval_dir == cfg.paths.root / "eval"


def test_bad_evaluation_config_is_refused(tmp_path: Path) -> None:
    m = compile_manifest(tmp_path)
    bad = copy.deepcopy(m)
    bad["config"]["evaluation"]["mode"] = "sometimes"
    with pytest.raises(ConfigError, match="evaluation.mode"):
        parse(bad)
    bad = copy.deepcopy(m)
    bad["config"]["evaluation"]["tasks"] = [{"interval": 2}]
    with pytest.raises(ConfigError, match="evaluation.tasks.0.task"):
        parse(bad)


def test_milestones() -> None:
    due = [u for u in range(11) if milestone_due(u, u == 10, 4, True, True)]
    assert due == [0, 4, 8, 10]
    assert [u for u in range(11) if milestone_due(u, u == 10, None, False, False)] == []


def test_olmo_eval_task_names_map_to_our_tasks() -> None:
    assert eval_task_kind("gsm8k::tulu") == "gsm8k"
    assert eval_task_kind("minerva_math_500") == "math"
    assert eval_task_kind("codex_humaneval::tulu") == "code"
    assert "ifeval" in known_eval_tasks()
    with pytest.raises(DataError, match="unknown evaluation task 'mmlu'"):
        eval_task_kind("mmlu")


def test_eval_sets_are_prompt_records(tmp_path: Any) -> None:
    good = tmp_path / "good.jsonl"
    p = Prompt("a", "t", [{"role": "user", "content": "1+1="}], "2", "arithmetic")
    good.write_text(__import__("json").dumps(p.to_json()) + "\n")
    (out,) = load_eval_set("mine", good)
    assert out.id == "a" and out.metadata["pool"] == "mine"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x"}\n')
    with pytest.raises(DataError, match="bad.jsonl:1: eval prompt lacks messages, verifier"):
        load_eval_set("bad", bad)


def test_generation_overrides() -> None:
    base = EvalSampling(temperature=0.0, samples_per_prompt=1, max_new_tokens=32)
    s = base.with_overrides({"temperature": 0.7, "max_gen_toks": 8, "repeats": 4})
    assert (s.temperature, s.max_new_tokens, s.samples_per_prompt) == (0.7, 8, 4)
    with pytest.raises(ValueError, match="unknown generation override"):
        base.with_overrides({"do_sample": True})


class _Exact(Verifier):
    def score(self, response: str, target: Any, metadata: Any) -> RewardResult:
        return RewardResult(1.0 if response == target else 0.0)


def test_evaluate_pool_scores_every_sample_with_eval_sampling() -> None:
    seen: list[dict[str, Any]] = []

    def generate(
        ids: list[int], sampling: dict[str, Any], seeds: list[int]
    ) -> list[dict[str, Any]]:
        seen.append(sampling)
        return [
            {
                "text": "2" if i == 0 else "3",
                "output_ids": [5],
                "meta_info": {
                    "output_token_logprobs": [[-0.1, 5, None]],
                    "finish_reason": {"type": "stop"},
                },
            }
            for i in range(len(seeds))
        ]

    prompts = [
        Prompt(f"p{i}", "t", [{"role": "user", "content": "q"}], "2", "exact") for i in range(3)
    ]
    res = evaluate_pool(
        generate,
        lambda p: [1, 2],
        lambda name: _Exact(),
        prompts,
        EvalSampling(temperature=0.5, samples_per_prompt=2, max_new_tokens=7),
        run_seed=1,
        version=4,
        prefix="eval/t",
    )
    assert seen[0]["max_new_tokens"] == 7 and seen[0]["temperature"] == 0.5
    m = res.metrics
    assert (m["eval/t/score"], m["eval/t/best_of_n"], m["eval/t/prompts"]) == (0.5, 1.0, 3)
    assert m["eval/t/samples"] == 6 and len(res.rows) == 6


def test_eval_log_truncates_by_update(tmp_path: Any) -> None:
    log = MetricsWriter(tmp_path / "eval.jsonl", key="update")
    for u in (0, 2, 4):
        log.write({"update": u})
    log.truncate_from(3)
    assert [r["update"] for r in read_metrics(log.path)] == [0, 2]


def test_every_spec_rubric_profile_has_a_runtime_rubric() -> None:
    profile = SpecRubric.model_fields["profile"].annotation
    for name in typing.get_args(profile):
        assert name in RUBRICS, name


def test_evaluator_spec_fills_the_milestone(tmp_path: Any) -> None:
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
    import eval_helpers as eh

    from compiler.pipeline import compile_spec
    from runtime.launch.evaluator import EvaluatorSubmitError, evaluator_spec

    # background evaluator jobs read milestone snapshots from output.root: shared storage
    spec = eh.write_spec(tmp_path, sections=eh.BACKGROUND)
    shared = 'output.root="/weka/oe-training-default/rlc/runs/eval"'
    manifest = compile_spec(str(spec), [shared]).manifest()
    spec = evaluator_spec(manifest, 40, tmp_path / "snap" / "update-000040")
    script = spec["tasks"][0]["arguments"][0]
    assert "--update 40" in script and "update-000040" in script
    assert "__RLC_EVAL" not in json.dumps(spec)
    with pytest.raises(EvaluatorSubmitError, match="characters"):
        evaluator_spec(manifest, 1, tmp_path / 'we"ird')


def test_evaluator_spec_is_the_compiled_artifact_filled_in(tmp_path: Any) -> None:
    """The runtime submits `rlc compile`'s beaker/evaluator.yaml with only the milestone's
    update and snapshot path filled in (derived through the manifest contract)."""
    import sys
    from pathlib import Path

    import yaml

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
    import eval_helpers as eh

    from compiler.emit import emit_artifacts
    from compiler.pipeline import compile_spec
    from runtime.launch.evaluator import evaluator_spec

    spec = eh.write_spec(tmp_path, sections=eh.BACKGROUND)
    shared = 'output.root="/weka/oe-training-default/rlc/runs/eval"'
    manifest = compile_spec(str(spec), [shared]).manifest()
    emit_artifacts(manifest, tmp_path / "out")
    template = (tmp_path / "out" / "beaker" / "evaluator.yaml").read_text()
    snap = "/weka/oe-training-default/rlc/runs/eval/eval-snapshots/update-000012"
    filled = template.replace("__RLC_EVAL_UPDATE__", "12").replace("__RLC_EVAL_CHECKPOINT__", snap)
    assert evaluator_spec(manifest, 12, Path(snap)) == yaml.safe_load(filled)
