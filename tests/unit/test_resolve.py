"""Resolution: structured defaults, derived values with provenance, placement, paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from compiler.pipeline import compile_spec
from compiler.resolve.placement import PlacementInput, place

HEAD = 'schema_version = 1\nname = "t"\n[model]\nsource = "builtin:tiny"\n[[data.tasks]]\ntask = "arithmetic"\n[output]\nroot = "out"\n'


def _resolve(tmp_path: Path, body: str = "", overrides: list[str] | None = None, sub: str = ""):  # type: ignore[no-untyped-def]
    d = tmp_path / sub if sub else tmp_path
    d.mkdir(parents=True, exist_ok=True)
    path = d / "s.toml"
    path.write_text(HEAD + body)
    r = compile_spec(str(path), overrides or [])
    assert r.ok, [f"{x.code} {x.span} {x.message}" for x in r.errors]
    return r.resolved


def test_structured_defaults(tmp_path: Path) -> None:
    r = _resolve(tmp_path)
    c = r.config
    assert (
        c["inference"]["prompts_per_collection"] == 8 and c["inference"]["samples_per_prompt"] == 8
    )
    assert c["inference"]["global_batch_size"] == 64
    assert c["optimizer"]["steps_per_collection"] == 1
    assert c["inference"]["max_context_length"] == 6144
    assert c["inference"]["max_response_length"] == 3072  # min(4096, 6144 // 2)
    assert c["inference"]["max_prompt_length"] == 3072
    assert c["inference"]["max_total_tokens"] == 524288
    assert (
        c["optimizer"]["lr"],
        c["optimizer"]["adam_beta2"],
        c["optimizer"]["eps_clip_high"],
    ) == (1e-6, 0.95, 0.28)
    assert c["inference"]["placement"] == "colocated" and c["async"]["max_policy_lag"] == 0
    assert c["async"]["off_policy_correction"] == "none"
    assert c["checkpoint"]["interval"] == 100 and c["checkpoint"]["keep_last"] == 1
    assert c["trainer"]["device"] == "cpu" and c["trainer"]["attention_backend"] == "sdpa"
    assert c["training"]["eval_interval"] is None  # no held-out data
    assert c["tracking"]["metrics_path"] == str(tmp_path / "out" / "metrics.jsonl")


def test_derived_provenance(tmp_path: Path) -> None:
    r = _resolve(tmp_path, "[inference]\nmax_context_length = 16384\nmax_running_requests = 64\n")
    assert r.config["inference"]["max_response_length"] == 4096
    assert r.config["inference"]["max_total_tokens"] == 64 * 16384
    p = r.provenance["inference.max_total_tokens"]
    assert p.kind == "derived"
    assert p.inputs == ("inference.max_running_requests", "inference.max_context_length")
    assert "max(524288" in (p.formula or "")
    assert r.provenance["inference.max_context_length"].kind == "spec"
    assert r.provenance["inference.max_context_length"].span.line == 10
    assert r.provenance["optimizer.lr"].kind == "default"


def test_async_implications(tmp_path: Path) -> None:
    r = _resolve(tmp_path, "[async]\nenabled = true\n")
    c = r.config
    assert c["inference"]["placement"] == "disaggregated"
    assert c["async"]["max_policy_lag"] == 6 and c["async"]["off_policy_correction"] == "tis"
    # producer budget: ceil(max(P*S, 2*engines*slots) / S) * S = max(64, 2*1*64) = 128
    assert c["async"]["producer_budget"] == 128
    assert r.plan["async"]["completed_buffer_groups"] == 16


def test_batch_geometry_and_scoring_pass(tmp_path: Path) -> None:
    r = _resolve(tmp_path, "[inference]\nglobal_batch_size = 16\n[async]\nenabled = true\n")
    assert r.config["optimizer"]["steps_per_collection"] == 4
    assert r.config["optimizer"]["scoring_pass"] is True
    assert r.plan["batch"]["total_optimizer_steps"] == 400
    r = _resolve(tmp_path, "[optimizer]\nkl_coef = 0.01\n")
    assert r.plan["scoring_pass"]["reason"] == "kl_coef > 0"


def test_eval_defaults(tmp_path: Path) -> None:
    body = "".join(HEAD.split('[[data.tasks]]\ntask = "arithmetic"\n'))
    path = tmp_path / "e.toml"
    path.write_text(body + '[[data.tasks]]\ntask = "arithmetic"\neval_count = 4\n')
    r = compile_spec(str(path)).resolved
    assert r.config["training"]["eval_interval"] == 20
    assert r.config["training"]["skip_eval_before_train"] is False
    assert r.provenance["training.eval_interval"].kind == "derived"


def test_paths_relative_to_spec_as_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "s.toml").write_text(HEAD.replace('"out"', '"../runs/x"'))
    monkeypatch.chdir(tmp_path)
    r = compile_spec("specs/s.toml").resolved
    assert r.config["output"]["root"] == "runs/x"
    assert r.paths["checkpoints"] == "runs/x/checkpoints"
    assert r.paths["engine_weights"] == "runs/x/publish"
    r = compile_spec(str(tmp_path / "specs" / "s.toml")).resolved
    assert r.config["output"]["root"] == str(tmp_path / "runs" / "x")


def test_recipe_layer(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text(
        'schema_version = 1\nname = "mine"\nrecipe = "quickstart"\n[training]\nnum_rollouts = 3\n'
    )
    r = compile_spec(str(path))
    assert r.ok, r.errors
    res = r.resolved
    assert res.config["name"] == "mine" and res.config["training"]["num_rollouts"] == 3
    assert res.provenance["training.num_rollouts"].kind == "spec"
    p = res.provenance["inference.max_context_length"]
    assert p.kind == "recipe" and p.recipe == "quickstart" and p.span.source == "recipe quickstart"
    assert res.config["output"]["root"] == str(tmp_path / "runs" / "quickstart")


def test_quickstart_recipe_is_the_readme_quickstart(tmp_path: Path) -> None:
    """``recipe = "quickstart"`` runs what the README's quickstart example runs."""
    root = Path(__file__).resolve().parents[2]
    path = tmp_path / "r.toml"
    path.write_text('schema_version = 1\nname = "quickstart"\nrecipe = "quickstart"\n')
    via_recipe = compile_spec(str(path))
    example = compile_spec(str(root / "specs" / "examples" / "quickstart.toml"))
    assert via_recipe.ok and example.ok
    a, b = dict(via_recipe.resolved.config), dict(example.resolved.config)
    for c in (a, b):
        for key in ("recipe", "output", "tracking"):  # paths relative to each file
            c.pop(key)
    assert a == b
    assert a["model"]["source"] == "builtin:tiny-digits"


def _p(**kw: object) -> dict[str, object]:
    base = dict(
        trainer_nodes=1,
        trainer_gpus=8,
        cpu_processes=1,
        inference_gpus=7,
        tensor_parallel=1,
        num_engines=7,
        colocated=False,
        router=True,
        judges=(("judge", 1),),
        gpus_per_replica=None,
    )
    base.update(kw)
    return place(PlacementInput(**base))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "replicas", "allocated", "unused"),
    [
        ({}, 2, 16, 0),  # 8T + 7R + 1J
        ({"trainer_gpus": 4, "inference_gpus": 11, "num_engines": 11}, 2, 16, 0),
        ({"inference_gpus": 23, "num_engines": 23}, 4, 32, 0),
        ({"inference_gpus": 8, "num_engines": 8}, 3, 24, 7),
        ({"trainer_nodes": 2, "inference_gpus": 32, "num_engines": 32}, 7, 56, 7),  # "large"
    ],
)
def test_placement_worked_examples(
    kw: dict[str, object], replicas: int, allocated: int, unused: int
) -> None:
    p = _p(**kw)
    assert (p["replicas"], p["allocated_gpus"], p["unused_gpus"]) == (replicas, allocated, unused)


def test_placement_single_node_roles() -> None:
    p = _p(trainer_gpus=2, inference_gpus=2, num_engines=2, judges=())
    assert p["replicas"] == 1 and p["gpus_per_replica"] == 4
    roles = {g["gpu"]: g["roles"] for g in p["nodes"][0]["gpus"]}
    assert roles == {0: ["trainer:0"], 1: ["trainer:1"], 2: ["engine:0"], 3: ["engine:1"]}
    assert [e["port"] for e in p["engines"]] == [30000, 30001]
    assert p["router"] == {"node": 0, "port": 29000}
    co = _p(trainer_gpus=2, inference_gpus=2, num_engines=2, judges=(), colocated=True)
    assert {g["gpu"]: g["roles"] for g in co["nodes"][0]["gpus"]} == {
        0: ["trainer:0", "engine:0"],
        1: ["trainer:1", "engine:1"],
    }


def test_placement_engines_share_last_trainer_node() -> None:
    p = _p(trainer_gpus=4, inference_gpus=6, num_engines=6, judges=(), trainer_nodes=2)
    # node 1 holds trainer ranks 4-7 on GPUs 0-3 and engines 0-3 on GPUs 4-7
    assert [e["node"] for e in p["engines"]] == [1, 1, 1, 1, 2, 2]
