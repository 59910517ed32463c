"""Our Beaker spec v2 model: the anchors example validates, mistakes are caught by name."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest
import yaml

from compiler.diagnostics import DiagnosticError
from compiler.emit.beaker_model import (
    ExperimentSpec,
    beaker_json_schema,
    beaker_schema_text,
    duration_seconds,
    validate_beaker_spec,
)
from compiler.resources import schemas_dir

# shared/reference/anchors.md A.4, with the placeholders filled in.
MULTINODE = """\
version: v2
budget: ai2/oe-adapt
description: "rlc demo (manifest sha256 abc)"
tasks:
  - name: rlc-train
    image:
      beaker: 01JABCDEF
    command: ["bash", "-lc"]
    arguments: ["python -m runtime.entrypoints.execute /rlc/manifest.json"]
    replicas: 2
    leaderSelection: true
    hostNetworking: true
    propagateFailure: true
    propagatePreemption: true
    synchronizedStartTimeout: 30m
    timeout: 24h
    envVars:
      - {name: RLC_MANIFEST_SHA256, value: "abc"}
      - {name: HF_TOKEN, secret: HF_TOKEN}
    datasets:
      - mountPath: /weka/oe-adapt-default
        source: {weka: oe-adapt-default}
    result:
      path: /results
    resources:
      gpuCount: 8
      sharedMemory: 64GiB
    context:
      priority: normal
      preemptible: true
    constraints:
      cluster: [ai2/jupiter]
retry:
  allowedTaskRetries: 2
"""


def data() -> dict:
    return yaml.safe_load(MULTINODE)


def messages(d: dict) -> list[str]:
    with pytest.raises(DiagnosticError) as exc:
        validate_beaker_spec(d)
    return [x.message for x in exc.value.diagnostics]


def test_anchor_multinode_example_validates():
    spec = validate_beaker_spec(MULTINODE)
    t = spec.tasks[0]
    assert t.replicas == 2 and t.leader_selection and t.host_networking
    assert t.resources is not None and t.resources.gpu_count == 8
    assert t.env_vars is not None and t.env_vars[1].secret == "HF_TOKEN"
    assert t.datasets is not None and t.datasets[0].source.weka == "oe-adapt-default"
    assert spec.retry is not None and spec.retry.allowed_task_retries == 2
    out = spec.to_json()
    assert out["tasks"][0]["synchronizedStartTimeout"] == "30m"
    assert "hostPath" not in out["tasks"][0]["datasets"][0]["source"]  # None fields dropped
    # JSON form round-trips through the model.
    assert ExperimentSpec.model_validate(out).to_json() == out


def test_typo_key_is_rejected_with_did_you_mean():
    d = data()
    d["tasks"][0]["resources"]["gpuCont"] = d["tasks"][0]["resources"].pop("gpuCount")
    (msg,) = messages(d)
    assert msg.startswith("tasks[0].resources.gpuCont: unknown key 'gpuCont'")
    with pytest.raises(DiagnosticError) as exc:
        validate_beaker_spec(d)
    assert "did you mean 'gpuCount'" in exc.value.diagnostics[0].help[0]
    d = data()
    d["tasks"][0]["hostNetwork"] = True
    with pytest.raises(DiagnosticError) as exc:
        validate_beaker_spec(d)
    assert "hostNetworking" in exc.value.diagnostics[0].help[0]


def test_snake_case_names_are_accepted_too():
    spec = ExperimentSpec.model_validate(
        {
            "tasks": [
                {
                    "name": "t",
                    "image": {"docker": "python:3.11"},
                    "result": {"path": "/out"},
                    "context": {"priority": "low"},
                    "env_vars": [{"name": "A", "value": "1"}],
                }
            ]
        }
    )
    assert spec.to_json()["tasks"][0]["envVars"] == [{"name": "A", "value": "1"}]


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda d: d["tasks"][0]["image"].update(docker="x"), "image needs exactly one"),
        (lambda d: d["tasks"][0]["image"].pop("beaker"), "image needs exactly one"),
        (lambda d: d["tasks"][0]["envVars"][0].update(secret="S"), "exactly one of value, secret"),
        (lambda d: d["tasks"][0]["datasets"][0]["source"].update(beaker="ds"), "dataset source"),
        (lambda d: d["tasks"][0]["datasets"][0].update(mountPath="weka"), "absolute"),
        (
            lambda d: d["tasks"][0]["datasets"].append(
                {"mountPath": "/WEKA/oe-adapt-default/x", "source": {"weka": "b"}}
            ),
            "overlap",
        ),
        (
            lambda d: d["tasks"][0]["envVars"].append({"name": "HF_TOKEN", "value": "x"}),
            "more than once",
        ),
        (lambda d: d["tasks"].append(copy.deepcopy(d["tasks"][0])), "task names must be unique"),
        (lambda d: d["tasks"][0]["context"].update(priority="medium"), "priority"),
        (
            lambda d: d["tasks"][0]["context"].update(minRuntime="2h"),
            "preemptible cannot be combined",
        ),
        (lambda d: d["tasks"][0]["constraints"].update(hostname=["h1"]), "mutually exclusive"),
        (lambda d: d["tasks"][0].update(timeout="24 hours"), "timeout"),
        (lambda d: d["tasks"][0].update(synchronizedStartTimeout="49h"), "at most 48h"),
        (lambda d: d["tasks"][0].update(leaderSelection=False), "leaderSelection"),
        (lambda d: d["tasks"][0].update(replicas=0), "replicas"),
        (lambda d: d["tasks"][0]["resources"].update(gpuCount=-1), "gpuCount"),
        (lambda d: d["tasks"][0]["resources"].update(sharedMemory="lots"), "sharedMemory"),
        (lambda d: d["retry"].update(allowedTaskRetries=11), "allowedTaskRetries"),
        (lambda d: d.update(version="v3"), "version"),
        (lambda d: d.update(tasks=[]), "tasks"),
        (lambda d: d["tasks"][0].pop("result"), "result"),
        (lambda d: d["tasks"][0]["result"].update(path="results"), "absolute"),
        (
            lambda d: d["tasks"][0]["datasets"].append(
                {"mountPath": "/r", "source": {"result": "nope"}}
            ),
            "unknown task",
        ),
    ],
)
def test_cross_field_checks(edit, needle):
    d = data()
    edit(d)
    joined = " | ".join(messages(d))
    assert needle in joined


def test_context_new_style_fields():
    d = data()
    d["tasks"][0]["context"] = {"priority": "high", "minRuntime": "2h", "autoResume": True}
    spec = validate_beaker_spec(d)
    assert spec.tasks[0].context.min_runtime == "2h"


def test_durations():
    assert duration_seconds("30m") == 1800
    assert duration_seconds("1h30m") == 5400
    assert duration_seconds(5_000_000_000) == 5
    assert duration_seconds("1.5s") == 1.5
    with pytest.raises(ValueError):
        duration_seconds("5 minutes")


def test_yaml_errors_are_diagnostics():
    with pytest.raises(DiagnosticError):
        validate_beaker_spec("tasks: [unclosed")
    with pytest.raises(DiagnosticError):
        validate_beaker_spec("- just a list")


def test_committed_schema_matches_models():
    committed = (schemas_dir() / "beaker-v2.schema.json").read_text(encoding="utf-8")
    assert committed == beaker_schema_text(), (
        "schemas/beaker-v2.schema.json is stale: run "
        "`python -c 'from compiler.emit.beaker_model import write_beaker_schema as w; w()'`"
    )


def test_json_schema_agrees_with_model_on_example_and_typo():
    schema = beaker_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    v = jsonschema.Draft202012Validator(schema)
    assert not list(v.iter_errors(data()))
    bad = data()
    bad["tasks"][0]["resources"]["gpuCont"] = 8
    assert list(v.iter_errors(bad))
    bad = data()
    bad["tasks"][0]["timeout"] = "24 hours"
    assert list(v.iter_errors(bad))
    assert json.loads(beaker_schema_text()) == schema


def test_beaker_py_accepts_our_json(tmp_path):
    """beaker-py 2.x's own spec classes load what our model accepts (skipped without it)."""
    beaker = pytest.importorskip("beaker", reason="beaker-py 2.x not installed")
    spec_cls = getattr(beaker, "BeakerExperimentSpec", None)
    if spec_cls is None:
        pytest.skip("beaker-py without BeakerExperimentSpec (1.x?)")
    ours = validate_beaker_spec(MULTINODE).to_json()
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(ours))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # `preemptible` is deprecated
        theirs = spec_cls.from_file(path)
    t = theirs.tasks[0]
    assert t.name == "rlc-train" and t.replicas == 2 and t.leader_selection
    assert t.synchronized_start_timeout == 30 * 60 * 10**9  # beaker-py converts to ns
    back = theirs.to_json()
    assert back["tasks"][0]["resources"] == ours["tasks"][0]["resources"]
    assert back["tasks"][0]["envVars"] == ours["tasks"][0]["envVars"]
    assert back["tasks"][0]["datasets"] == ours["tasks"][0]["datasets"]
    # What beaker-py writes back (durations in ns, priority by name) still passes our model.
    validate_beaker_spec(back)
