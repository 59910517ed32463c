"""Every rule in schemas/rules/*.rules: one tiny spec that triggers it (code + line) and
one that does not. Specs are built from a body; [model], [data] and [output] default to a
CPU builtin:tiny arithmetic run when the body does not give them. ``# <-`` marks the line
the diagnostic must point at.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from compiler.pipeline import compile_spec

GPU = '[model]\nsource = "builtin:olmo3-190m"\n[trainer]\ngpus = 1\n'
JUDGE_EXT = '[judges.j]\nmode = "external"\nmodel = "m"\nendpoint = "http://judge:8000/v1"\n'
RUBRIC = '[rubrics.r]\nprofile = "open-instruct/general-quality"\n'
BIND = '[judging.bindings.quality]\njudge = "j"\nrubric = "r"\n'
MANAGED = (
    '[judges.j]\nmode = "managed"\nmodel = "Qwen/Qwen3-8B"\nrevision = "' + "a" * 40 + '"\n'
    'prepared_dir = "/weka/oe-training-default/judge"\n'
)
EVAL_BG = (
    '[evaluation]\nmode = "background"\nimage = "01JABCDEFGHJKMNPQRSTVWXYZ0"\n'
    '[[evaluation.tasks]]\ntask = "gsm8k"\n'
)
TASKS_EVAL = '[[data.tasks]]\ntask = "arithmetic"\neval_count = 8\n'
ASYNC = "[async]\nenabled = true\n"
TOOLS = '[environment]\nmax_turns = 2\ntools = ["calculator"]\n'
PYTHON_TOOL = '[environment]\nmax_turns = 2\ntools = ["python"]\n'
OPD = '[training]\nalgorithm = "opd"\nfilter_zero_std_groups = false\n'
TEACHER = '[teacher]\nsource = "builtin:tiny"\n'
SOURCES = Path(__file__).resolve().parents[1] / "fixtures" / "model-sources"
HYBRID = f'[model]\nsource = "{SOURCES / "olmo-hybrid-tiny"}"\n'
OC_HYBRID = (
    f'[model]\nsource = "{SOURCES / "olmo-core-hybrid-moe"}"\nformat = "olmo_core"\n'
    'hf_template = "{tpl}"'
)

# (rule id, triggering body, clean body)
CASES: list[tuple[str, str, str]] = [
    # fields without effect in their context (context.rules)
    (
        "allow-outside-unused",
        '[output]\nroot = "out"\nallow_outside = true  # <-\n',
        '[output]\nroot = "out"\n',
    ),
    (
        "sync-off-policy-correction",
        '[async]\noff_policy_correction = "tis"  # <-\n',
        "[async]\n",
    ),
    (
        "sync-buffer-factor",
        "[async]\nbuffer_factor = 3.0  # <-\n",
        "[async]\n",
    ),
    (
        "sync-producer-budget",
        "[async]\nproducer_budget = 64  # <-\n",
        "[async]\n",
    ),
    (
        "sync-unused-sample-handler",
        '[async]\nunused_sample_handler = "drop"  # <-\n',
        "[async]\n",
    ),
    (
        "tis-clip-without-tis",
        "[async]\ntis_clip = 3.0  # <-\n",
        "[async]\n",
    ),
    (
        "wandb-off-wandb-project",
        '[tracking]\nwandb_project = "p"  # <-\n',
        '[tracking]\nwandb_mode = "offline"\nwandb_project = "p"\n',
    ),
    (
        "wandb-off-wandb-team",
        '[tracking]\nwandb_team = "t"  # <-\n',
        '[tracking]\nwandb_mode = "offline"\nwandb_team = "t"\n',
    ),
    (
        "wandb-off-wandb-group",
        '[tracking]\nwandb_group = "g"  # <-\n',
        '[tracking]\nwandb_mode = "offline"\nwandb_group = "g"\n',
    ),
    (
        "wandb-off-wandb-run-name",
        '[tracking]\nwandb_run_name = "r"  # <-\n',
        '[tracking]\nwandb_mode = "offline"\nwandb_run_name = "r"\n',
    ),
    (
        "wandb-off-log-interval",
        "[tracking]\nlog_interval = 5  # <-\n",
        '[tracking]\nwandb_mode = "offline"\nlog_interval = 5\n',
    ),
    (
        "dense-router-aux-loss-reduction",
        '[trainer]\nrouter_aux_loss_reduction = "response"  # <-\n',
        '[model]\nsource = "builtin:tiny-moe"\n[trainer]\nrouter_aux_loss_reduction = "response"\n',
    ),
    (
        "dense-router-z-loss-reduction",
        '[trainer]\nrouter_z_loss_reduction = "response"  # <-\n',
        '[model]\nsource = "builtin:tiny-moe"\n[trainer]\nrouter_z_loss_reduction = "response"\n',
    ),
    (
        "kl-estimator-without-kl",
        '[optimizer]\nkl_estimator = "k1"  # <-\n',
        '[optimizer]\nkl_coef = 0.01\nkl_estimator = "k1"\n',
    ),
    (
        "refill-without-filtering",
        "[training]\nfilter_zero_std_groups = false\nmax_refill_rounds = 3  # <-\n",
        "[training]\nfilter_zero_std_groups = true\nmax_refill_rounds = 3\n",
    ),
    (
        "shared-eval-initial",
        "[evaluation]\ninitial = false  # <-\n",
        "[evaluation]\n",
    ),
    (
        "shared-eval-interval",
        "[evaluation]\ninterval = 5  # <-\n",
        "[evaluation]\n",
    ),
    (
        "shared-eval-gpus",
        "[evaluation]\ngpus = 2  # <-\n",
        "[evaluation]\n",
    ),
    (
        "shared-eval-submit-timeout",
        "[evaluation]\nsubmit_timeout = 60  # <-\n",
        "[evaluation]\n",
    ),
    (
        "shared-eval-timeout",
        '[evaluation]\ntimeout = "1h"  # <-\n',
        "[evaluation]\n",
    ),
    (
        "shared-eval-server-args",
        '[evaluation]\nserver_args = ["--enable-metrics"]  # <-\n',
        "[evaluation]\n",
    ),
    (
        "shared-eval-cluster",
        '[evaluation]\ncluster = "ai2/x"  # <-\n',
        "[evaluation]\n",
    ),
    (
        "shared-eval-workspace",
        '[evaluation]\nworkspace = "ai2/w"  # <-\n',
        "[evaluation]\n",
    ),
    (
        "shared-eval-budget",
        '[evaluation]\nbudget = "ai2/b"  # <-\n',
        "[evaluation]\n",
    ),
    (
        "cpu-engine-mem-fraction-static",
        "[inference]\nmem_fraction_static = 0.5  # <-\n",
        "[inference]\n",
    ),
    (
        "cpu-engine-cuda-graph-decode",
        "[inference]\ncuda_graph_decode = false  # <-\n",
        "[inference]\n",
    ),
    (
        "cpu-engine-cuda-graph-max-bs",
        "[inference]\ncuda_graph_max_bs = 32  # <-\n",
        "[inference]\n",
    ),
    (
        "router-cache-threshold-policy",
        '[inference]\nrouter_policy = "round_robin"\nrouter_cache_threshold = 0.4  # <-\n',
        "[inference]\nrouter_cache_threshold = 0.4\n",
    ),
    (
        "router-balance-abs-threshold-policy",
        '[inference]\nrouter_policy = "round_robin"\nrouter_balance_abs_threshold = 16  # <-\n',
        "[inference]\nrouter_balance_abs_threshold = 16\n",
    ),
    (
        "router-balance-rel-threshold-policy",
        '[inference]\nrouter_policy = "round_robin"\nrouter_balance_rel_threshold = 1.5  # <-\n',
        "[inference]\nrouter_balance_rel_threshold = 1.5\n",
    ),
    (
        "router-policy-without-router",
        '[inference]\nrouter = false\nrouter_policy = "random"  # <-\n',
        '[inference]\nrouter_policy = "random"\n',
    ),
    (
        "min-lr-above-lr",
        "[optimizer]\nlr = 1e-5\nmin_lr = 1e-4  # <-\n",
        "[optimizer]\nlr = 1e-5\nmin_lr = 1e-6\n",
    ),
    (
        "num-params-builtin",
        '[model]\nsource = "builtin:tiny"\nnum_params = 1000  # <-\n',
        '[model]\nsource = "builtin:tiny"\n',
    ),
    (
        "native-sglang-embedded",
        "[native.sglang]  # <-\nenable_metrics = true\n",
        "[native]\n",
    ),
    (
        "scoring-check-interval-unused",
        "[optimizer]\nscoring_pass = true\nscoring_check_interval = 10  # <-\n",
        "[optimizer]\nscoring_check_interval = 10\n",
    ),
    (
        "scoring-check-tolerance-unused",
        "[optimizer]\nscoring_pass = true\nscoring_check_tolerance = 0.01  # <-\n",
        "[optimizer]\nscoring_check_tolerance = 0.01\n",
    ),
    # model / data
    (
        "model-builtin-format",
        '[model]\nsource = "builtin:tiny"\nformat = "hf"  # <-\n',
        '[model]\nsource = "builtin:tiny"\n',
    ),
    (
        "model-builtin-unknown",
        '[model]\nsource = "builtin:huge"  # <-\n',
        '[model]\nsource = "builtin:tiny"\n',
    ),
    (
        "model-builtin-override",
        '[model]\nsource = "builtin:olmo3-1b?vocab=5"  # <-\n',
        '[model]\nsource = "builtin:tiny?n_layers=4"\n',
    ),
    (
        "model-format-builtin-path",
        '[model]\nsource = "ckpt"\nformat = "builtin"  # <-\n',
        '[model]\nsource = "ckpt"\nformat = "hf"\n',
    ),
    (
        "model-olmo-core-template",
        '[model]\nsource = "ckpt"\nformat = "olmo_core"  # <-\n',
        '[model]\nsource = "ckpt"\nformat = "olmo_core"\nhf_template = "tmpl"\n',
    ),
    (
        "model-source-unloadable",
        f'[model]\nsource = "{SOURCES / "olmo-hybrid"}"  # <-\n',
        f'[model]\nsource = "{SOURCES / "olmoe"}"\n',
    ),
    (
        "model-source-architecture",
        f'[model]\nsource = "{SOURCES / "olmoe"}"\narchitecture = "dense"  # <-\n',
        f'[model]\nsource = "{SOURCES / "olmoe"}"\narchitecture = "moe"\n',
    ),
    (
        "model-template-unusable",
        OC_HYBRID.format(tpl=SOURCES / "no-tokenizer") + "  # <-\n",
        OC_HYBRID.format(tpl=SOURCES / "olmoe") + "\n",
    ),
    (
        "model-export-no-hf-architecture",
        '[model]\nsource = "builtin:tiny-moe"\n[output]\nroot = "out"\nexport_hf = true  # <-\n',
        '[model]\nsource = "builtin:tiny"\n[output]\nroot = "out"\nexport_hf = true\n',
    ),
    (
        "model-sglang-no-hf-architecture",
        '[model]\nsource = "builtin:tiny-moe"\n[inference]\nengine = "sglang"  # <-\n',
        '[model]\nsource = "builtin:tiny-moe"\n[inference]\nengine = "embedded"\n',
    ),
    (
        "model-sglang-no-recurrent-layers",
        HYBRID + '[inference]\nengine = "sglang"  # <-\n',
        HYBRID + '[inference]\nengine = "embedded"\n',
    ),
    (
        "data-selector-missing",
        "[data]  # <-\nseed = 1\n",  # the [data] header, not a key inside it
        '[data]\nseed = 1\n[[data.tasks]]\ntask = "arithmetic"\n',
    ),
    (
        "data-selector-conflict",
        '[data]\nprompt_data = "p.jsonl"\nreward_config = "r.json"\n[[data.tasks]]  # <-\ntask = "arithmetic"\n',
        '[data]\nprompt_data = "p.jsonl"\nreward_config = "r.json"\n',
    ),
    (
        "data-tasks-empty",
        "[data]\ntasks = []  # <-\n",
        '[data]\ntasks = [{ task = "arithmetic" }]\n',
    ),
    (
        "data-prompt-data-reward-config",
        '[data]\nprompt_data = "p.jsonl"  # <-\n',
        '[data]\nprompt_data = "p.jsonl"\nreward_config = "r.json"\n',
    ),
    (
        "data-reward-config-without-prompt-data",
        '[data]\nreward_config = "r.json"  # <-\n[[data.tasks]]\ntask = "arithmetic"\n',
        '[[data.tasks]]\ntask = "arithmetic"\n',
    ),
    (
        "data-duplicate-task",
        '[[data.tasks]]\ntask = "arithmetic"\n[[data.tasks]]\ntask = "arithmetic"  # <-\n',
        '[[data.tasks]]\ntask = "arithmetic"\n[[data.tasks]]\ntask = "multiplication"\n',
    ),
    (
        "code-executor-unsandboxed",
        "[rewards.code]\nallow_unsandboxed = true  # <-\n",
        "[rewards.code]\nallow_unsandboxed = false\n",
    ),
    (
        "code-executor-unsandboxed-remote",
        '[rewards.code]\nendpoint = "http://executor:8080"\nallow_unsandboxed = true  # <-\n',
        '[rewards.code]\nendpoint = "http://executor:8080"\n',
    ),
    (
        "filter-zero-std-single-sample",
        "[inference]\nsamples_per_prompt = 1\n[training]\nfilter_zero_std_groups = true  # <-\n",
        "[inference]\nsamples_per_prompt = 2\n[training]\nfilter_zero_std_groups = true\n",
    ),
    # on-policy distillation
    (
        "opd-needs-teacher",
        '[training]\nalgorithm = "opd"  # <-\nfilter_zero_std_groups = false\n',
        OPD + TEACHER,
    ),
    ("teacher-without-opd", '[teacher]  # <-\nsource = "builtin:tiny"\n', OPD + TEACHER),
    (
        "algorithm-opd-one-node",
        '[training]\nalgorithm = "opd"  # <-\nfilter_zero_std_groups = false\n'
        + TEACHER
        + "[trainer]\nnodes = 2\n",
        OPD + TEACHER + "[trainer]\nnodes = 1\n",
    ),
    (
        "teacher-source-unloadable",
        OPD + f'[teacher]\nsource = "{SOURCES / "no-tokenizer"}"  # <-\n',
        OPD + TEACHER,
    ),
    (  # a Hub id written in the spec is refused like model.source's, not left to run time
        "teacher-source-unloadable",
        OPD + '[teacher]\nsource = "allenai/OLMo-2-0425-1B"  # <-\n',
        OPD + TEACHER,
    ),
    (
        "teacher-context",
        OPD + TEACHER + "max_context_length = 64  # <-\n[inference]\nmax_context_length = 64\n",
        OPD + TEACHER + "max_context_length = 65\n[inference]\nmax_context_length = 64\n",
    ),
    (
        "teacher-gpus-cpu-run",
        OPD + TEACHER + "gpus = 1  # <-\n",
        OPD + TEACHER + "gpus = 0\n",
    ),
    (
        "teacher-tokenizer-mismatch",
        OPD + '[teacher]\nsource = "builtin:tiny-digits"  # <-\n',
        OPD + '[teacher]\nsource = "builtin:small"\n',
    ),
    (
        "teacher-vocab-mismatch",
        OPD + f'[teacher]\nsource = "{SOURCES / "olmo2-vocab-1000"}"  # <-\n',
        OPD + '[teacher]\nsource = "builtin:tiny?vocab_size=1000"\n',
    ),
    (
        "teacher-olmo-core-template",
        OPD
        + f'[teacher]\nsource = "{SOURCES / "olmo-core-hybrid-moe"}"\nformat = "olmo_core"  # <-\n',
        OPD
        + f'[teacher]\nsource = "{SOURCES / "olmo-core-hybrid-moe"}"\nformat = "olmo_core"\n'
        + f'hf_template = "{SOURCES / "olmoe"}"\n',
    ),
    (
        "teacher-sglang-hf",
        GPU + OPD + '[teacher]\nsource = "builtin:olmo3-190m"\nengine = "sglang"  # <-\n',
        GPU + OPD + '[teacher]\nsource = "builtin:olmo3-190m"\nengine = "embedded"\n',
    ),
    (
        "teacher-sglang-cpu",
        OPD + TEACHER + 'engine = "sglang"  # <-\n',
        OPD + TEACHER + 'engine = "embedded"\n',
    ),
    (
        "teacher-embedded-one-gpu",
        GPU + OPD + '[teacher]\nsource = "builtin:olmo3-190m"\ngpus = 2  # <-\n',
        GPU + OPD + '[teacher]\nsource = "builtin:olmo3-190m"\ngpus = 1\n',
    ),
    (
        "teacher-cpu-beside-gpus",
        GPU + OPD + '[teacher]\nsource = "builtin:olmo3-190m"\ngpus = 0  # <-\n',
        GPU + OPD + '[teacher]\nsource = "builtin:olmo3-190m"\ngpus = 1\n',
    ),
    (
        "teacher-memory-fit",
        GPU
        + OPD
        + '[teacher]\nsource = "builtin:olmo3-1b"\nmax_running_requests = 64  # <-\n'
        + "[launch]\ngpu_memory_gib = 8\n",
        GPU
        + OPD
        + '[teacher]\nsource = "builtin:olmo3-1b"\nmax_running_requests = 1\n'
        + "[launch]\ngpu_memory_gib = 8\n",
    ),
    (
        "opd-filter-zero-std",
        '[training]\nalgorithm = "opd"\nfilter_zero_std_groups = true  # <-\n' + TEACHER,
        OPD + TEACHER,
    ),
    # launch
    (
        "launch-weka-mount",
        '[output]\nroot = "/weka/other/run"  # <-\n',
        '[output]\nroot = "/weka/oe-training-default/run"\n',
    ),
    (
        "launch-weka-mount-overlap",
        '[[launch.weka_mounts]]\nweka = "a"\nmount_path = "/weka/a"\n'
        '[[launch.weka_mounts]]\nweka = "b"\nmount_path = "/weka/a/b"  # <-\n',
        '[[launch.weka_mounts]]\nweka = "a"\nmount_path = "/weka/a"\n'
        '[[launch.weka_mounts]]\nweka = "b"\nmount_path = "/weka/b"\n',
    ),
    (
        "launch-env-secret-overlap",
        '[launch]\nenv = { FOO = "1" }\nsecrets = { FOO = "foo-secret" }  # <-\n',
        '[launch]\nenv = { FOO = "1" }\nsecrets = { BAR = "bar-secret" }\n',
    ),
    (
        "output-root-system",
        '[output]\nroot = "/weka/x/../../etc"  # <-\n',
        '[output]\nroot = "/tmp/rlc-run"\n',
    ),
    (
        "output-root-outside",
        '[output]\nroot = "/opt/rlc-run"  # <-\n',
        '[output]\nroot = "/opt/rlc-run"\nallow_outside = true\n',
    ),
    (
        "launch-multinode-shared-storage",
        '[model]\nsource = "builtin:olmo3-190m"\n[trainer]\nnodes = 2\ngpus = 8\n[inference]\nplacement = "disaggregated"\n[output]\nroot = "out"  # <-\n',
        '[model]\nsource = "builtin:olmo3-190m"\n[trainer]\nnodes = 2\ngpus = 8\n[inference]\nplacement = "disaggregated"\n[output]\nroot = "/weka/oe-training-default/run"\n',
    ),
    (
        "engine-nodes-cpu-only",
        GPU + '[inference]\nplacement = "disaggregated"\nnodes = 1  # <-\n',
        '[inference]\nplacement = "disaggregated"\nnodes = 1\n',
    ),
    (
        "engine-nodes-disaggregated",
        '[inference]\nplacement = "colocated"\nnodes = 1  # <-\n',
        '[inference]\nplacement = "disaggregated"\nnodes = 1\n',
    ),
    (
        "distributed-publication-embedded-cpu",
        '[inference]\nplacement = "colocated"\n[runtime]\npublication_transport = "distributed"  # <-\n',
        '[inference]\nplacement = "disaggregated"\n[runtime]\npublication_transport = "distributed"\n',
    ),
    (
        "launch-multinode-full-nodes",
        '[model]\nsource = "builtin:olmo3-190m"\n[trainer]\nnodes = 2\ngpus = 4\n[inference]\nplacement = "disaggregated"\n[launch]\ngpus_per_replica = 4  # <-\n',
        '[model]\nsource = "builtin:olmo3-190m"\n[trainer]\nnodes = 2\ngpus = 4\n[inference]\nplacement = "disaggregated"\n',
    ),
    (
        "launch-runtime-without-checkpoints",
        GPU + "[training]\nsave_checkpoints = false  # <-\n",
        GPU + "[training]\nsave_checkpoints = true\n",
    ),
    # placement
    (
        "inference-whole-engines",
        GPU
        + '[inference]\nplacement = "disaggregated"\ngpus = 3  # <-\ntensor_parallel = 2\nengine = "sglang"\n',
        GPU
        + '[inference]\nplacement = "disaggregated"\ngpus = 4\ntensor_parallel = 2\nengine = "sglang"\n',
    ),
    (
        "inference-engine-count",
        '[model]\nsource = "builtin:olmo3-190m"\n[trainer]\ngpus = 2\n[inference]\nnum_engines = 1  # <-\n',
        '[model]\nsource = "builtin:olmo3-190m"\n[trainer]\ngpus = 2\n[inference]\nnum_engines = 2\n',
    ),
    (
        "colocated-gpus-match",
        '[model]\nsource = "builtin:olmo3-190m"\n[trainer]\ngpus = 2\n[inference]\ngpus = 1  # <-\n',
        '[model]\nsource = "builtin:olmo3-190m"\n[trainer]\ngpus = 2\n[inference]\ngpus = 2\n',
    ),
    (
        "tensor-publication-same-node",
        '[model]\nsource = "builtin:olmo3-190m"\n[trainer]\nnodes = 2\ngpus = 8\n[inference]\n'
        'placement = "disaggregated"\n[runtime]\npublication_transport = "tensor"  # <-\n',
        '[model]\nsource = "builtin:olmo3-190m"\n[trainer]\nnodes = 2\ngpus = 8\n[inference]\n'
        'placement = "disaggregated"\n[runtime]\npublication_transport = "disk"\n',
    ),
    (
        "colocated-multinode",
        '[model]\nsource = "builtin:olmo3-190m"\n[trainer]\nnodes = 2\ngpus = 8\n[inference]\nplacement = "colocated"  # <-\n',
        '[model]\nsource = "builtin:olmo3-190m"\n[trainer]\nnodes = 2\ngpus = 8\n[inference]\nplacement = "disaggregated"\n',
    ),
    (
        "colocated-full-model",
        '[model]\nsource = "ckpt"\narchitecture = "moe"\n[trainer]\ngpus = 1\n[inference]\nplacement = "colocated"  # <-\n',
        '[model]\nsource = "ckpt"\narchitecture = "moe"\n[trainer]\ngpus = 1\n[inference]\nplacement = "disaggregated"\n',
    ),
    (
        "colocated-gpu-unqualified",
        '[model]\nsource = "ckpt"\n[trainer]\ngpus = 1\n[inference]\nplacement = "colocated"  # <-\n',
        GPU + '[inference]\nplacement = "colocated"\n',
    ),
    (
        "trainer-fits-replica",
        '[model]\nsource = "builtin:olmo3-190m"\n[trainer]\ngpus = 4  # <-\n[launch]\ngpus_per_replica = 2\n',
        '[model]\nsource = "builtin:olmo3-190m"\n[trainer]\ngpus = 4\n[launch]\ngpus_per_replica = 4\n',
    ),
    (
        "engine-fits-replica",
        GPU
        + '[inference]\nplacement = "disaggregated"\nengine = "sglang"\ngpus = 3\ntensor_parallel = 3  # <-\n',
        GPU
        + '[inference]\nplacement = "disaggregated"\nengine = "sglang"\ngpus = 3\ntensor_parallel = 1\n',
    ),
    (
        "placement-overflows-replica",
        '[model]\nsource = "builtin:olmo3-190m"\n[trainer]\ngpus = 2\n[launch]\ngpus_per_replica = 1  # <-\n',
        '[model]\nsource = "builtin:olmo3-190m"\n[trainer]\ngpus = 2\n[launch]\ngpus_per_replica = 2\n',
    ),
    (
        "inference-tp-unqualified",
        GPU
        + '[inference]\nplacement = "disaggregated"\nengine = "sglang"\ngpus = 2\ntensor_parallel = 2  # <-\n',
        GPU + '[inference]\nplacement = "disaggregated"\nengine = "sglang"\ngpus = 2\n',
    ),
    (
        "sglang-needs-gpus",
        '[inference]\nengine = "sglang"  # <-\n',
        '[inference]\nengine = "embedded"\n',
    ),
    (
        "sglang-builtin-model",
        '[model]\nsource = "builtin:tiny"\n[trainer]\ngpus = 1\n[inference]\nengine = "sglang"  # <-\n',
        GPU + '[inference]\nengine = "sglang"\n',
    ),
    (
        "cpu-engines-gpu-trainer",
        GPU + "[inference]\ngpus = 0  # <-\n",
        GPU + "[inference]\ngpus = 1\n",
    ),
    (
        "managed-judge-fits-replica",
        GPU + "[launch]\ngpus_per_replica = 2\n" + MANAGED + "gpus = 4  # <-\n" + RUBRIC + BIND,
        GPU + "[launch]\ngpus_per_replica = 2\n" + MANAGED + "gpus = 1\n" + RUBRIC + BIND,
    ),
    ("managed-judge-cpu", MANAGED + "gpus = 1  # <-\n" + RUBRIC + BIND, JUDGE_EXT + RUBRIC + BIND),
    # batch / lengths / cadence
    (
        "batch-world-multiple",
        '[model]\nsource = "builtin:olmo3-190m"\n[trainer]\ngpus = 3  # <-\n',
        '[model]\nsource = "builtin:olmo3-190m"\n[trainer]\ngpus = 4\n',
    ),
    (
        "batch-whole-updates",
        "[inference]\nglobal_batch_size = 48  # <-\n",
        "[inference]\nglobal_batch_size = 32\n",
    ),
    (
        "batch-steps-consistent",
        "[optimizer]\nsteps_per_collection = 2  # <-\n",
        "[optimizer]\nsteps_per_collection = 1\n",
    ),
    (
        "batch-steps-limit",
        "[inference]\nprompts_per_collection = 64\nsamples_per_prompt = 8\nglobal_batch_size = 4  # <-\n",
        "[inference]\nprompts_per_collection = 64\nsamples_per_prompt = 8\nglobal_batch_size = 64\n",
    ),
    (
        "lengths-response-below-context",
        "[inference]\nmax_context_length = 64\nmax_response_length = 64  # <-\n",
        "[inference]\nmax_context_length = 64\nmax_response_length = 32\n",
    ),
    (
        "lengths-prompt-below-context",
        "[inference]\nmax_context_length = 64\nmax_prompt_length = 64  # <-\n",
        "[inference]\nmax_context_length = 64\nmax_prompt_length = 32\n",
    ),
    (
        "lengths-budget",
        "[inference]\nmax_context_length = 64\nmax_prompt_length = 40  # <-\nmax_response_length = 32\n",
        "[inference]\nmax_context_length = 64\nmax_prompt_length = 32\nmax_response_length = 32\n",
    ),
    (
        "eval-response-below-context",
        "[inference]\nmax_context_length = 64\n[evaluation]\nmax_response_length = 64  # <-\n",
        "[inference]\nmax_context_length = 64\n[evaluation]\nmax_response_length = 16\n",
    ),
    (
        "save-interval-without-saving",
        "[training]\nsave_checkpoints = false\n[checkpoint]\ninterval = 5  # <-\n",
        "[training]\nsave_checkpoints = false\n",
    ),
    (
        "eval-interval-without-data",
        "[training]\neval_interval = 5  # <-\n",
        TASKS_EVAL + "[training]\neval_interval = 5\n",
    ),
    (
        "frequent-save",
        GPU + "[checkpoint]\ninterval = 2  # <-\n",
        GPU + "[checkpoint]\ninterval = 50\n",
    ),
    (
        "frequent-eval",
        GPU + TASKS_EVAL + "[training]\neval_interval = 2  # <-\n",
        GPU + TASKS_EVAL + "[training]\neval_interval = 20\n",
    ),
    # trainer / MoE
    (
        "trainer-parallelism",
        "[trainer]\ntensor_parallel = 2  # <-\n",
        "[trainer]\ntensor_parallel = 1\n",
    ),
    (
        "trainer-micro-batch",
        "[trainer]\nmicro_batch_size = 2  # <-\n",
        "[trainer]\nmicro_batch_size = 1\n",
    ),
    (
        "trainer-dynamic-batching",
        "[trainer]\ndynamic_batching = true  # <-\n",
        "[trainer]\ndynamic_batching = false\n",
    ),
    (
        "expert-parallel-divides-world",
        '[model]\nsource = "builtin:tiny-moe"\n[trainer]\ncpu_processes = 2\nexpert_parallel = 3  # <-\n',
        '[model]\nsource = "builtin:tiny-moe"\n[trainer]\ncpu_processes = 2\nexpert_parallel = 2\n',
    ),
    (
        "dense-expert-parallel",
        "[trainer]\ncpu_processes = 2\nexpert_parallel = 2  # <-\n",
        '[model]\nsource = "builtin:tiny-moe"\n[trainer]\ncpu_processes = 2\nexpert_parallel = 2\n',
    ),
    (
        "dense-router-replay",
        "[trainer]\nrouter_replay = true  # <-\n",
        '[model]\nsource = "builtin:tiny-moe"\n[trainer]\nrouter_replay = true\n',
    ),
    (
        "replay-needs-router",
        '[model]\nsource = "builtin:tiny-moe"\n[trainer]\nrouter_replay = true  # <-\n[inference]\nrouter = false\n',
        '[model]\nsource = "builtin:tiny-moe"\n[trainer]\nrouter_replay = true\n[inference]\nrouter = true\n',
    ),
    (
        "dense-router-losses",
        "[trainer]\nrouter_aux_loss_coef = 0.01  # <-\n",
        '[model]\nsource = "builtin:tiny-moe"\n[trainer]\nrouter_aux_loss_coef = 0.01\n',
    ),
    (
        "moe-ep-unqualified",
        '[model]\nsource = "builtin:tiny-moe"\n[trainer]\ncpu_processes = 4\nexpert_parallel = 4  # <-\n',
        '[model]\nsource = "builtin:tiny-moe"\n[trainer]\ncpu_processes = 4\nexpert_parallel = 2\n',
    ),
    (
        "memory-fit",
        '[model]\nsource = "builtin:olmo3-1b"\n[trainer]\ngpus = 1  # <-\n[launch]\ngpu_memory_gib = 10.0\n',
        '[model]\nsource = "builtin:olmo3-1b"\n[trainer]\ngpus = 1\n[launch]\ngpu_memory_gib = 141.0\n',
    ),
    (
        "memory-fit-colocated",
        '[model]\nsource = "builtin:olmo3-1b"\n[trainer]\ngpus = 1\n[inference]\nplacement = "colocated"  # <-\n[launch]\ngpu_memory_gib = 40.0\n',
        '[model]\nsource = "builtin:olmo3-1b"\n[trainer]\ngpus = 1\n[inference]\nplacement = "colocated"\n[launch]\ngpu_memory_gib = 141.0\n',
    ),
    # packing
    (
        "packing-budget-without-packing",
        "[trainer]\npacking_max_tokens = 128  # <-\n",
        "[trainer]\nsequence_packing = true\npacking_max_tokens = 8192\n",
    ),
    (
        "packing-budget-below-context",
        "[inference]\nmax_context_length = 64\n[trainer]\nsequence_packing = true\npacking_max_tokens = 32  # <-\n",
        "[inference]\nmax_context_length = 64\n[trainer]\nsequence_packing = true\npacking_max_tokens = 64\n",
    ),
    (
        "packing-attention-isolation",
        '[trainer]\nsequence_packing = true\nattention_backend = "torch"  # <-\n',
        '[trainer]\nsequence_packing = true\nattention_backend = "sdpa"\n',
    ),
    (
        "flash-needs-gpu",
        '[trainer]\nattention_backend = "flash"  # <-\n',
        '[trainer]\nattention_backend = "sdpa"\n',
    ),
    (
        "flex-needs-gpu",
        '[trainer]\nattention_backend = "flex"  # <-\n',
        '[trainer]\nattention_backend = "sdpa"\n',
    ),
    (
        "recompute-long-context",
        "[inference]\nmax_context_length = 16384\n[trainer]\nactivation_recompute = false  # <-\n",
        "[inference]\nmax_context_length = 16384\n[trainer]\nactivation_recompute = true\n",
    ),
    # async / publication
    (
        "async-disaggregated",
        '[async]\nenabled = true  # <-\n[inference]\nplacement = "colocated"\n',
        ASYNC,
    ),
    (
        "async-correction",
        ASYNC + 'off_policy_correction = "none"  # <-\n',
        ASYNC + 'off_policy_correction = "tis"\n',
    ),
    (
        "tis-with-rollout-anchor",
        '[async]\noff_policy_correction = "tis"  # <-\n[optimizer]\nuse_rollout_logprobs = true\n',
        '[async]\noff_policy_correction = "tis"\n[optimizer]\nuse_rollout_logprobs = false\n',
    ),
    ("async-lag-positive", ASYNC + "max_policy_lag = 0  # <-\n", ASYNC + "max_policy_lag = 2\n"),
    (
        "async-lag-steps",
        ASYNC + "max_policy_lag = 1  # <-\n[inference]\nglobal_batch_size = 16\n",
        ASYNC + "max_policy_lag = 3\n[inference]\nglobal_batch_size = 16\n",
    ),
    ("sync-lag", "[async]\nmax_policy_lag = 3  # <-\n", "[async]\nenabled = false\n"),
    ("async-buffer-group", ASYNC + "buffer_factor = 0.05  # <-\n", ASYNC + "buffer_factor = 1.0\n"),
    (
        "publication-needs-async",
        '[async]\npublication_mode = "refresh"  # <-\n',
        '[async]\npublication_mode = "barrier"\n',
    ),
    (
        "publication-one-step",
        ASYNC + 'publication_mode = "engine_drain"  # <-\n[inference]\nglobal_batch_size = 32\n',
        ASYNC + 'publication_mode = "engine_drain"\n[inference]\nglobal_batch_size = 64\n',
    ),
    (
        "publication-tp1",
        GPU
        + ASYNC
        + 'publication_mode = "engine_drain"  # <-\n[inference]\nengine = "sglang"\ngpus = 2\ntensor_parallel = 2\n',
        GPU
        + ASYNC
        + 'publication_mode = "engine_drain"\n[inference]\nengine = "sglang"\ngpus = 2\n',
    ),
    (
        "refresh-needs-tis",
        ASYNC + 'publication_mode = "refresh"  # <-\n[optimizer]\nuse_rollout_logprobs = true\n',
        ASYNC + 'publication_mode = "refresh"\n',
    ),
    (
        "refresh-sampling",
        ASYNC + 'publication_mode = "refresh"\n[inference]\ntemperature = 0.7  # <-\n',
        ASYNC + 'publication_mode = "refresh"\n[inference]\ntemperature = 1.0\n',
    ),
    (
        "refresh-router",
        ASYNC + 'publication_mode = "refresh"\n[inference]\nrouter = false  # <-\n',
        ASYNC + 'publication_mode = "refresh"\n[inference]\nrouter = true\n',
    ),
    (
        "engine-drain-transport",
        ASYNC
        + 'publication_mode = "engine_drain"  # <-\n[runtime]\npublication_transport = "distributed"\n',
        ASYNC + 'publication_mode = "engine_drain"\n[runtime]\npublication_transport = "tensor"\n',
    ),
    (
        "engine-drain-experimental",
        ASYNC + 'publication_mode = "engine_drain"  # <-\n',
        ASYNC + 'publication_mode = "barrier"\n',
    ),
    (
        "async-producer-whole-groups",
        ASYNC + "producer_budget = 100  # <-\n",
        ASYNC + "producer_budget = 96\n",
    ),
    (
        "async-producer-below-slots",
        ASYNC + "producer_budget = 8  # <-\n",
        ASYNC + "producer_budget = 128\n",
    ),
    (
        "async-concurrency-below-admission",
        "[inference]\nserver_concurrency = 8  # <-\n",
        "[inference]\nserver_concurrency = 64\n",
    ),
    (
        "async-buffer-below-collection",
        ASYNC + "buffer_factor = 0.5  # <-\n",
        ASYNC + "buffer_factor = 2.0\n",
    ),
    (
        "async-buffer-beyond-lag",
        ASYNC + "max_policy_lag = 1\nbuffer_factor = 4.0  # <-\n",
        ASYNC + "max_policy_lag = 1\nbuffer_factor = 2.0\n",
    ),
    (
        "async-producer-beyond-lag",
        ASYNC + "max_policy_lag = 1\nproducer_budget = 256  # <-\n",
        ASYNC + "max_policy_lag = 1\nproducer_budget = 128\n",
    ),
    (
        "sync-underfeeds-fleet",
        '[model]\nsource = "builtin:olmo3-190m"\n[trainer]\ngpus = 2\n[inference]\nprompts_per_collection = 8  # <-\n',
        '[model]\nsource = "builtin:olmo3-190m"\n[trainer]\ngpus = 2\n[inference]\nprompts_per_collection = 16\n',
    ),
    # serving
    (
        "token-pool-below-context",
        "[inference]\nmax_context_length = 64\nmax_total_tokens = 32  # <-\n",
        "[inference]\nmax_context_length = 64\nmax_total_tokens = 4096\n",
    ),
    (
        "token-pool-limits-concurrency",
        "[inference]\nmax_context_length = 64\nmax_total_tokens = 128  # <-\n",
        "[inference]\nmax_context_length = 64\nmax_total_tokens = 4096\n",
    ),
    (
        "prefill-chunk-above-pool",
        "[inference]\nchunked_prefill_size = 999999  # <-\n",
        "[inference]\nchunked_prefill_size = 2048\n",
    ),
    (
        "mamba-cache-admission",
        HYBRID + "[inference]\nmax_mamba_cache_size = 16  # <-\n",
        HYBRID + "[inference]\nmax_mamba_cache_size = 128\n",
    ),
    (
        "mamba-radix-capacity",
        HYBRID + "[inference]\nradix_cache = true\nmax_mamba_cache_size = 128  # <-\n",
        HYBRID + "[inference]\nradix_cache = true\nmax_mamba_cache_size = 512\n",
    ),
    (
        "embedded-engine-gpu-tp",
        "[inference]\ntensor_parallel = 2  # <-\n",
        "[inference]\ntensor_parallel = 1\n",
    ),
    (
        "decode-graphs-disabled",
        GPU + ASYNC + '[inference]\nengine = "sglang"\ncuda_graph_decode = false  # <-\n',
        GPU + ASYNC + '[inference]\nengine = "sglang"\ncuda_graph_decode = true\n',
    ),
    # judges
    (
        "judges-without-bindings",
        JUDGE_EXT.replace("[judges.j]\n", "[judges.j]  # <-\n"),
        JUDGE_EXT + RUBRIC + BIND,
    ),
    (
        "binding-unknown-judge",
        JUDGE_EXT + RUBRIC + '[judging.bindings.quality]\njudge = "nope"  # <-\nrubric = "r"\n',
        JUDGE_EXT + RUBRIC + BIND,
    ),
    (
        "binding-unknown-rubric",
        JUDGE_EXT + RUBRIC + '[judging.bindings.quality]\njudge = "j"\nrubric = "nope"  # <-\n',
        JUDGE_EXT + RUBRIC + BIND,
    ),
    (
        "rubric-reservation",
        JUDGE_EXT + RUBRIC + "max_response_tokens = 50000  # <-\n" + BIND,
        JUDGE_EXT + RUBRIC + "max_response_tokens = 4096\n" + BIND,
    ),
    (
        "judge-yarn-model",
        GPU + MANAGED + 'context_extension = "qwen3-yarn-128k"  # <-\n' + RUBRIC + BIND,
        GPU + MANAGED + 'context_extension = "none"\n' + RUBRIC + BIND,
    ),
    (
        "embedded-judge-tp",
        GPU + MANAGED + 'engine = "embedded"\ngpus = 2  # <-\n' + RUBRIC + BIND,
        GPU + MANAGED + 'engine = "sglang"\ngpus = 2\n' + RUBRIC + BIND,
    ),
    (
        "embedded-judge-context-extension",
        GPU
        + MANAGED.replace("Qwen3-8B", "Qwen3-32B")
        + 'engine = "embedded"\ncontext_extension = "qwen3-yarn-128k"  # <-\n'
        + RUBRIC
        + BIND,
        GPU
        + MANAGED.replace("Qwen3-8B", "Qwen3-32B")
        + 'context_extension = "qwen3-yarn-128k"\n'
        + RUBRIC
        + BIND,
    ),
    # evaluation
    (
        "background-eval-image",
        '[evaluation]\nmode = "background"  # <-\n[[evaluation.tasks]]\ntask = "gsm8k"\n',
        EVAL_BG,
    ),
    (
        "background-eval-tasks",
        '[evaluation]\nmode = "background"  # <-\nimage = "01JABCDEFGHJKMNPQRSTVWXYZ0"\n',
        EVAL_BG,
    ),
    # reference rules carried over with the contract
    (
        "eval-set-names-unique",
        '[[data.eval]]\nname = "a"\npath = "x.jsonl"\n[[data.eval]]\nname = "a"  # <-\npath = "y.jsonl"\n',
        '[[data.eval]]\nname = "a"\npath = "x.jsonl"\n[[data.eval]]\nname = "b"\npath = "y.jsonl"\n',
    ),
    (
        "background-eval-tasks-unique",
        EVAL_BG + '[[evaluation.tasks]]\ntask = "gsm8k"  # <-\n',
        EVAL_BG + '[[evaluation.tasks]]\ntask = "math"\n',
    ),
    (
        "eval-task-credentials",
        EVAL_BG.replace(
            'task = "gsm8k"\n',
            'task = "gsm8k"\n[evaluation.tasks.generation]\napi_key = "x"  # <-\n',
        ),
        EVAL_BG.replace(
            'task = "gsm8k"\n', 'task = "gsm8k"\n[evaluation.tasks.generation]\ntemperature = 0.5\n'
        ),
    ),
    (
        "background-eval-shared-root",
        GPU + '[output]\nroot = "out"  # <-\n' + EVAL_BG,
        GPU + '[output]\nroot = "/weka/oe-training-default/x"\n[[launch.weka_mounts]]\n'
        'weka = "oe-training-default"\nmount_path = "/weka/oe-training-default"\n' + EVAL_BG,
    ),
    (
        "expert-parallel-divides-experts",
        '[model]\nsource = "builtin:tiny-moe"\n[trainer]\ncpu_processes = 3\nexpert_parallel = 3  # <-\n',
        '[model]\nsource = "builtin:tiny-moe"\n[trainer]\ncpu_processes = 2\nexpert_parallel = 2\n',
    ),
    (
        "compiler-cache-weka-ttl",
        GPU + '[compiler_cache]\nshared_root = "/weka/oe-training-default/cache"  # <-\n',
        GPU + '[compiler_cache]\nshared_root = "/weka/oe-training-default/cache/tmp-7d"\n',
    ),
    (
        "group-requests-share-a-seed",
        f'[model]\nsource = "{SOURCES / "olmoe"}"\n[trainer]\ngpus = 1\n'
        '[inference]\nengine = "sglang"\n'
        "[native.sglang]\nenable_deterministic_inference = true  # <-\n",
        f'[model]\nsource = "{SOURCES / "olmoe"}"\n[trainer]\ngpus = 1\n'
        '[inference]\nengine = "sglang"\n[async]\nsubmission_granularity = "sample"\n'
        "[native.sglang]\nenable_deterministic_inference = true\n",
    ),
    # the contract: values the runtime does not honour yet
    (
        "startup-timeout-moved",
        "[runtime]\nstartup_timeout_s = 60  # <-\n",
        "[launch.coordination]\nstartup_timeout = 600\nheartbeat_timeout = 60\n",
    ),
    (
        "evaluation-revision-unused",
        EVAL_BG.replace(
            "[[evaluation.tasks]]", 'revision = "' + "b" * 40 + '"  # <-\n[[evaluation.tasks]]'
        ),
        EVAL_BG,
    ),
    # multi-turn tool use
    (
        "environment-turns-need-tools",
        "[environment]\nmax_turns = 3  # <-\n",
        '[environment]\nmax_turns = 3\ntools = ["calculator"]\n',
    ),
    (
        "environment-tools-need-turns",
        '[environment]\ntools = ["calculator"]  # <-\n',
        '[environment]\ntools = ["calculator"]\nmax_turns = 2\n',
    ),
    (
        "environment-turns-fit-response",
        '[environment]\ntools = ["calculator"]\nmax_turns = 4  # <-\n'
        "[inference]\nmax_response_length = 6\n",
        '[environment]\ntools = ["calculator"]\nmax_turns = 4\n[inference]\nmax_response_length = 7\n',
    ),
    (
        "environment-result-placeholder",
        TOOLS + 'result_template = "<output>"  # <-\n',
        TOOLS + 'result_template = "<tool_response>{output}</tool_response>"\n',
    ),
    (
        "environment-final-answer-pattern",
        TOOLS + 'stop = "final_answer"  # <-\n',
        TOOLS + 'stop = "final_answer"\nfinal_answer_pattern = "ANSWER: \\\\d+"\n',
    ),
    (
        "environment-final-answer-regex",
        TOOLS + 'stop = "final_answer"\nfinal_answer_pattern = "ANSWER: (\\\\d+"  # <-\n',
        TOOLS + 'stop = "final_answer"\nfinal_answer_pattern = "ANSWER: (\\\\d+)"\n',
    ),
    (
        "environment-final-answer-unused",
        TOOLS + 'final_answer_pattern = "ANSWER"  # <-\n',
        TOOLS + 'stop = "final_answer"\nfinal_answer_pattern = "ANSWER"\n',
    ),
    (
        "environment-tools-one-syntax",
        '[environment]\nmax_turns = 2\ntools = ["calculator", "python"]\n'
        'call_open = "<call>"  # <-\ncall_close = "</call>"\n',
        '[environment]\nmax_turns = 2\ntools = ["calculator", "python"]\n'
        'call_open = "<call>"\ncall_close = "</{tool}>"\n',
    ),
    (
        "environment-python-timeout",
        PYTHON_TOOL + "tool_timeout_s = 30.0  # <-\n",
        PYTHON_TOOL + "tool_timeout_s = 30.0\n[rewards.code]\ntime_limit_s = 30.0\n",
    ),
    (
        "environment-python-network",
        PYTHON_TOOL + "[rewards.code]\nnetwork = true  # <-\n",
        PYTHON_TOOL + "[rewards.code]\nnetwork = false\n",
    ),
    (
        "environment-router-replay",
        '[model]\nsource = "builtin:tiny-moe"\n'
        + TOOLS
        + "[trainer]\nrouter_replay = true  # <-\n",
        '[model]\nsource = "builtin:tiny-moe"\n' + TOOLS + "[trainer]\nrouter_replay = false\n",
    ),
    (
        "environment-prefix-cache",
        GPU
        + '[environment]\ntools = ["calculator"]\nmax_turns = 2  # <-\n'
        + '[inference]\nengine = "sglang"\ngpus = 1\n',
        GPU
        + '[environment]\ntools = ["calculator"]\nmax_turns = 2\n'
        + '[inference]\nengine = "sglang"\ngpus = 1\nradix_cache = true\n',
    ),
    (
        "single-turn-call-open",
        '[environment]\ncall_open = "<call>"  # <-\n',
        "[environment]\n",
    ),
    (
        "single-turn-call-close",
        '[environment]\ncall_close = "</call>"  # <-\n',
        "[environment]\n",
    ),
    (
        "single-turn-result-template",
        '[environment]\nresult_template = "<out>{output}</out>"  # <-\n',
        "[environment]\n",
    ),
    (
        "single-turn-stop",
        '[environment]\nstop = "final_answer"  # <-\nfinal_answer_pattern = "ANSWER"\n',
        "[environment]\n",
    ),
    (
        "single-turn-final-answer-pattern",
        '[environment]\nfinal_answer_pattern = "ANSWER"  # <-\n',
        "[environment]\n",
    ),
    (
        "single-turn-max-tool-output-chars",
        "[environment]\nmax_tool_output_chars = 100  # <-\n",
        "[environment]\n",
    ),
    (
        "single-turn-tool-timeout-s",
        "[environment]\ntool_timeout_s = 2.0  # <-\n",
        "[environment]\n",
    ),
    (
        "environment-single-turn-eval",
        TASKS_EVAL + TOOLS + "[training]\neval_interval = 5  # <-\n",
        TASKS_EVAL + "[training]\neval_interval = 5\n",
    ),
    ("background-eval-shared-settings", "[training]\neval_interval = 5  # <-\n" + EVAL_BG, EVAL_BG),
    (
        "shared-eval-background-fields",
        '[evaluation]\nimage = "01JABCDEFGHJKMNPQRSTVWXYZ0"  # <-\n',
        '[evaluation]\nmode = "shared"\n',
    ),
    (
        "background-eval-server-args",
        EVAL_BG.replace(
            "[[evaluation.tasks]]", 'server_args = ["--port=1"]  # <-\n[[evaluation.tasks]]'
        ),
        EVAL_BG.replace(
            "[[evaluation.tasks]]", 'server_args = ["--enable-metrics"]\n[[evaluation.tasks]]'
        ),
    ),
]

BASE = {
    "[model": '[model]\nsource = "builtin:tiny"\n',
    "[data": '[[data.tasks]]\ntask = "arithmetic"\n',
    "[output": '[output]\nroot = "out"\n',
}


def write_spec(tmp_path: Path, body: str, name: str = "spec.toml") -> tuple[Path, int | None]:
    text = 'schema_version = 1\nname = "t"\n' + body
    for marker, section in BASE.items():
        if marker not in body and "[" + marker not in body:
            text += section
    path = tmp_path / name
    path.write_text(text)
    marker_line = next((i for i, ln in enumerate(text.splitlines(), 1) if "# <-" in ln), None)
    return path, marker_line


def test_every_rule_has_a_case() -> None:
    from compiler.resources import rules_dir
    from compiler.rules import load_rules

    ids = set(load_rules(rules_dir()).ids)
    covered = {c[0] for c in CASES}
    assert ids - covered == set(), "rules without a test case"
    assert covered - ids == set(), "cases for rules that do not exist"


@pytest.mark.parametrize(("code", "bad", "good"), CASES, ids=[c[0] for c in CASES])
def test_rule(tmp_path: Path, code: str, bad: str, good: str) -> None:
    path, line = write_spec(tmp_path, bad, "bad.toml")
    assert line is not None
    result = compile_spec(str(path))
    hits = [d for d in result.diagnostics if d.code == code]
    shown = "\n".join(f"{d.code} {d.span} {d.message}" for d in result.diagnostics)
    assert hits, f"{code} did not fire:\n{shown}"
    assert any(
        d.span is not None and d.span.source == str(path) and d.span.line == line for d in hits
    ), f"{code} points at {[str(d.span) for d in hits]}, expected line {line}"
    assert result.bound is not None and result.bound.spec is not None, (
        "the trigger must bind cleanly"
    )
    for d in hits:  # every template placeholder was rendered
        for text in (d.message, *d.help):
            assert not re.search(r"\{[A-Za-z_][\w.]*[^}]*\}", text), f"{code}: unrendered {text!r}"

    path, _ = write_spec(tmp_path, good, "good.toml")
    result = compile_spec(str(path))
    assert result.bound is not None and result.bound.spec is not None, [
        f"{d.code} {d.span} {d.message}" for d in result.diagnostics
    ]
    assert not [d for d in result.diagnostics if d.code == code], [
        f"{d.code} {d.span} {d.message}" for d in result.diagnostics
    ]
