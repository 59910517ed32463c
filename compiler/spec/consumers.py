"""The consumption registry: for every spec field, what makes it take effect.

"What compiles, runs as compiled" is only true if every accepted field is read by
something. Each spec field path (``section.key``; ``[]`` for array-of-table entries, ``*``
for map entries) maps to one or more uses:

* ``runtime:MODULE:QUALNAME`` - runtime code that reads the value;
* ``cli:MODULE:QUALNAME`` - the command line (``rlc launch``) reads it when it submits;
* ``argv:MODULE:QUALNAME`` / ``beaker:MODULE:QUALNAME`` - compiler code that writes it into
  the engine command lines or the Beaker specs the runtime/Beaker then carry out;
* ``template:PATH`` - a template file that writes it into an emitted artifact;
* ``compile:REASON`` - the value only steers compilation (checks, derivations, the plan);
* ``rule:RULE-ID`` - values the runtime does not honour yet are rejected by this rule
  (always next to a consumer of the values that are honoured);
* ``owner:REASON`` - consumed by code another change lands at the same time; every value
  but the derived default is rejected meanwhile (the reason names where).

``tests/unit/test_consumers.py`` walks the spec models and fails on any field without an
entry, on entries for fields that do not exist, on a consumer that does not exist or does
not mention the key, and on a rule id that is not defined. The compiler never imports the
runtime: these are plain strings, resolved only by the test and by ``rlc explain``.
"""

from __future__ import annotations

_TRAINER = "runtime:runtime.trainer.settings:contract_settings"
_DRIVER = "runtime:runtime.rollout.driver:train"
_ENGINE_ARGV = "argv:compiler.resolve.argv:embedded_engine_argv"
_SGLANG_ARGV = "argv:compiler.resolve.argv:sglang_engine_argv"
_TEACHER_ARGV = "argv:compiler.resolve.argv:teacher_argv"
_JUDGE_ARGV = "argv:compiler.resolve.argv:judge_process"
_EXECUTOR_LIMITS = "runtime:runtime.executor.settings:ExecutorSettings.limits"
_EXECUTOR_SERVICE = "runtime:runtime.executor.settings:ExecutorSettings.service_args"
_BEAKER = "beaker:compiler.emit.beaker:_common"
_RENDER = "beaker:compiler.emit.beaker:render_beaker"
_EVAL_JOB = "beaker:compiler.emit.beaker:render_beaker"
_ENV = "runtime:runtime.rollout.environment:Environment.from_contract"

CONSUMERS: dict[str, tuple[str, ...]] = {
    # top level
    "schema_version": ("compile:selects the spec schema the document is bound against",),
    "name": ("runtime:runtime.entrypoints.evaluate:evaluate", _BEAKER),
    "recipe": ("compile:a named recipe layered under the spec's own values at resolve time",),
    "description": ("compile:free text kept in the manifest for people",),
    # [model]
    "model.source": (_TRAINER, _ENGINE_ARGV),
    "model.format": (
        "runtime:runtime.entrypoints.prepare:main",
        "beaker:compiler.emit.beaker:_needs_preparation",
    ),
    "model.hf_template": ("runtime:runtime.entrypoints.prepare:_convert", _TRAINER, _ENGINE_ARGV),
    "model.chat_template": (_TRAINER,),
    "model.architecture": (_TRAINER, _SGLANG_ARGV),
    "model.dtype": (
        _ENGINE_ARGV,
        "runtime:runtime.publication.tensor:TensorPublisher._engine_dtype",
        _TRAINER,
    ),
    "model.num_params": ("compile:sizes the plan's memory-fit estimate",),
    # [data]
    "data.tasks": ("runtime:runtime.data.manifest:load_prompts",),
    "data.tasks.[].task": ("runtime:runtime.data.tasks:load_task",),
    "data.tasks.[].path": ("runtime:runtime.data.tasks:load_gsm8k",),
    "data.tasks.[].train_count": ("runtime:runtime.data.tasks:_split_rows",),
    "data.tasks.[].eval_count": ("runtime:runtime.data.tasks:_split_rows",),
    "data.tasks.[].prompt_wrapper": ("runtime:runtime.data.tasks:task_entries",),
    "data.tasks.[].weight": ("runtime:runtime.data.sampler:PromptSampler.__init__",),
    "data.tasks.[].digits": ("runtime:runtime.data.tasks:load_multiplication",),
    "data.tasks.[].allow_subtraction": ("runtime:runtime.data.tasks:load_arithmetic",),
    "data.prompt_data": ("runtime:runtime.data.manifest:load_prompts",),
    "data.reward_config": ("runtime:runtime.data.manifest:load_prompts",),
    "data.manifest": ("runtime:runtime.data.manifest:load_prompts",),
    "data.eval": ("runtime:runtime.data.eval_tasks:held_out_prompts",),
    "data.eval.[].name": ("runtime:runtime.data.eval_tasks:held_out_prompts",),
    "data.eval.[].path": ("runtime:runtime.data.eval_tasks:held_out_prompts",),
    "data.seed": ("runtime:runtime.data.manifest:load_prompts",),
    "data.shuffle": ("runtime:runtime.rollout.driver:_make_data",),
    "data.prompt_wrapper": ("runtime:runtime.data.tasks:task_entries",),
    # [output]
    "output.root": (
        "runtime:runtime.data.manifest:prepare_data",
        "compile:derives manifest.paths, where the runtime writes (runtime.config.Paths)",
    ),
    "output.allow_outside": ("rule:output-root-outside",),
    "output.export_hf": (
        "compile:derives checkpoint.export_hf_final, which the rollout driver reads",
    ),
    "output.rollout_sample_rate": ("runtime:runtime.rollout.loop:GRPOLoop._dump_rollouts",),
    # [launch]: the Beaker experiment
    "launch.workspace": ("cli:rlc_cli.launch.beaker:_submit",),
    "launch.budget": (_BEAKER,),
    "launch.cluster": (_BEAKER,),
    "launch.priority": (_BEAKER,),
    "launch.min_runtime": (_BEAKER,),
    "launch.timeout": (_BEAKER,),
    "launch.auto_resume": (_BEAKER,),
    "launch.max_retries": (_RENDER,),
    "launch.gpus_per_replica": ("beaker:compiler.emit.beaker:_gpus_per_replica",),
    "launch.gpu_memory_gib": (
        "compile:the per-GPU memory the plan's fit estimate budgets against",
    ),
    "launch.shared_memory": (_RENDER,),
    "launch.weka_mounts": (_BEAKER,),
    "launch.weka_mounts.[].weka": ("template:templates/beaker/train.yaml.j2",),
    "launch.weka_mounts.[].mount_path": (_BEAKER,),
    "launch.env": ("beaker:compiler.emit.beaker:_env_vars",),
    "launch.secrets": ("beaker:compiler.emit.beaker:_env_vars",),
    "launch.image": ("beaker:compiler.emit.beaker:_image",),
    "launch.coordination.startup_timeout": (
        _RENDER,
        "compile:derives runtime.startup_timeout_s, the runtime's bound on coordinated starts",
    ),
    "launch.coordination.heartbeat_timeout": (
        "runtime:runtime.entrypoints.execute:NodeRunner.start_heartbeats",
    ),
    # [training]
    "training.num_rollouts": ("runtime:runtime.rollout.loop:GRPOLoop.run",),
    "training.algorithm": (
        "runtime:runtime.config:teacher_of",
        "runtime:runtime.trainer.settings:_distill_config",
    ),
    "training.eval_interval": ("runtime:runtime.rollout.driver:_make_evaluator",),
    "training.skip_eval_before_train": ("runtime:runtime.rollout.driver:_make_evaluator",),
    "training.save_checkpoints": ("runtime:runtime.rollout.driver:_checkpointing",),
    "training.filter_zero_std_groups": (_DRIVER,),
    "training.max_refill_rounds": ("runtime:runtime.rollout.collect:Collector.collect",),
    "training.max_run_seconds": ("runtime:runtime.rollout.loop:GRPOLoop._out_of_time",),
    # [teacher], [distillation]: on-policy distillation
    "teacher.source": ("runtime:runtime.config:teacher_of", _TEACHER_ARGV),
    "teacher.format": (
        "compile:checked against the engine that serves it (rule teacher-sglang-hf) and its "
        "template (rule teacher-olmo-core-template)",
    ),
    "teacher.hf_template": (_TEACHER_ARGV,),
    "teacher.engine": (_TEACHER_ARGV,),
    "teacher.gpus": (_TEACHER_ARGV, "compile:sizes the teacher's place in plan.placement"),
    "teacher.dtype": (_TEACHER_ARGV,),
    "teacher.max_running_requests": (_TEACHER_ARGV, "runtime:runtime.config:teacher_of"),
    "teacher.max_context_length": (_TEACHER_ARGV,),
    "teacher.mem_fraction_static": (_TEACHER_ARGV,),
    "teacher.seed": (_TEACHER_ARGV,),
    "teacher.num_params": ("compile:sizes the plan's teacher memory estimate",),
    "distillation.loss": ("runtime:runtime.trainer.settings:_distill_config",),
    "distillation.coef": ("runtime:runtime.trainer.settings:_distill_config",),
    "distillation.reward_weight": ("runtime:runtime.trainer.settings:_distill_config",),
    # [trainer]
    "trainer.nodes": (
        "compile:sizes the placement plan the runtime executes (plan.placement)",
        _TRAINER,
    ),
    "trainer.gpus": (
        "compile:sizes the trainer world (plan.placement.trainer.world_size): one rank per GPU",
    ),
    "trainer.cpu_processes": (
        "compile:sizes the CPU trainer world (plan.placement.trainer.world_size): one gloo "
        "rank each, started by runtime.trainer.ranks",
    ),
    "trainer.device": (_TRAINER,),
    "trainer.expert_parallel": (_TRAINER,),
    "trainer.tensor_parallel": ("rule:trainer-parallelism",),
    "trainer.pipeline_parallel": ("rule:trainer-parallelism",),
    "trainer.context_parallel": ("rule:trainer-parallelism",),
    "trainer.micro_batch_size": ("rule:trainer-micro-batch",),
    "trainer.dynamic_batching": ("rule:trainer-dynamic-batching",),
    "trainer.activation_recompute": (_TRAINER,),
    "trainer.attention_backend": (_TRAINER,),
    "trainer.sequence_packing": (_TRAINER,),
    "trainer.packing_max_tokens": (_TRAINER,),
    "trainer.row_specialization": ("runtime:runtime.trainer.trainer:Trainer.static_row_tokens",),
    "trainer.fp32_lm_head": (_TRAINER,),
    "trainer.compile_model": (_TRAINER,),
    "trainer.router_aux_loss_coef": (_TRAINER,),
    "trainer.router_z_loss_coef": (_TRAINER,),
    "trainer.router_aux_loss_reduction": (_TRAINER,),
    "trainer.router_z_loss_reduction": (_TRAINER,),
    "trainer.router_replay": (_TRAINER, _SGLANG_ARGV),
    # [inference]
    "inference.engine": (
        "runtime:runtime.node.launch_argv:engine_process",
        "argv:compiler.resolve.argv:engine_argv",
    ),
    "inference.placement": (
        "compile:decides the placement plan the runtime executes (engines on the trainer's "
        "GPUs or on their own)",
    ),
    "inference.nodes": (
        "compile:sizes the placement plan the runtime executes (engine-only nodes)",
    ),
    "inference.gpus": ("compile:sizes the placement plan the runtime executes (plan.placement)",),
    "inference.tensor_parallel": (_SGLANG_ARGV,),
    "inference.num_engines": (
        "compile:sizes the placement plan the runtime executes (plan.placement)",
    ),
    "inference.router": (
        "compile:whether the plan places a router (plan.router), the one NodeRunner.start_router starts",
    ),
    "inference.router_policy": ("argv:compiler.resolve.argv:router_argv",),
    "inference.router_cache_threshold": ("argv:compiler.resolve.argv:router_argv",),
    "inference.router_balance_abs_threshold": ("argv:compiler.resolve.argv:router_argv",),
    "inference.router_balance_rel_threshold": ("argv:compiler.resolve.argv:router_argv",),
    "inference.prompts_per_collection": ("runtime:runtime.rollout.loop:GRPOLoop._sync_collection",),
    "inference.samples_per_prompt": ("runtime:runtime.rollout.collect:Collector._one_group",),
    "inference.global_batch_size": (
        "compile:derives optimizer.steps_per_collection, which the loop reads",
    ),
    "inference.max_context_length": (_ENGINE_ARGV, _TRAINER),
    "inference.max_response_length": ("runtime:runtime.rollout.driver:_sampling_params",),
    "inference.max_prompt_length": ("runtime:runtime.data.manifest:prepare_data",),
    "inference.temperature": ("runtime:runtime.rollout.driver:_sampling_params",),
    "inference.top_p": ("runtime:runtime.rollout.driver:_sampling_params",),
    "inference.top_k": ("runtime:runtime.rollout.driver:_sampling_params",),
    "inference.max_running_requests": (
        _ENGINE_ARGV,
        "runtime:runtime.rollout.driver:rollout_concurrency",
    ),
    "inference.server_concurrency": ("runtime:runtime.rollout.driver:rollout_concurrency",),
    "inference.max_total_tokens": (_ENGINE_ARGV,),
    "inference.mem_fraction_static": (_ENGINE_ARGV,),
    "inference.radix_cache": (_ENGINE_ARGV,),
    "inference.kv_cache_dtype": (_ENGINE_ARGV, _SGLANG_ARGV),
    "inference.cuda_graph_decode": (_ENGINE_ARGV,),
    "inference.cuda_graph_max_bs": (_ENGINE_ARGV,),
    "inference.max_mamba_cache_size": (
        "argv:compiler.resolve.argv:embedded_engine_argv",
        "argv:compiler.resolve.argv:sglang_engine_argv",
    ),
    "inference.chunked_prefill_size": (_ENGINE_ARGV,),
    "inference.seed": (_ENGINE_ARGV,),
    # [optimizer]
    "optimizer.lr": (_TRAINER,),
    "optimizer.schedule": (_TRAINER,),
    "optimizer.warmup_steps": (_TRAINER,),
    "optimizer.min_lr": ("runtime:runtime.trainer.settings:_min_lr_ratio",),
    "optimizer.weight_decay": (_TRAINER,),
    "optimizer.adam_beta1": (_TRAINER,),
    "optimizer.adam_beta2": (_TRAINER,),
    "optimizer.adam_eps": (_TRAINER,),
    "optimizer.clip_grad": (_TRAINER,),
    "optimizer.eps_clip": (_TRAINER,),
    "optimizer.eps_clip_high": (_TRAINER,),
    "optimizer.kl_coef": (_TRAINER,),
    "optimizer.kl_estimator": (_TRAINER,),
    "optimizer.entropy_coef": (_TRAINER,),
    "optimizer.normalize_std": ("runtime:runtime.rollout.collect:Collector.collect",),
    "optimizer.use_rollout_logprobs": ("runtime:runtime.rollout.loop:GRPOLoop._train",),
    "optimizer.steps_per_collection": ("runtime:runtime.rollout.loop:GRPOLoop._train",),
    "optimizer.scoring_pass": ("runtime:runtime.rollout.loop:GRPOLoop._train",),
    "optimizer.scoring_check_interval": (
        "runtime:runtime.rollout.loop:GRPOLoop._scoring_check_due",
    ),
    "optimizer.scoring_check_tolerance": ("runtime:runtime.rollout.loop:GRPOLoop._train",),
    # [async]
    "async.enabled": ("runtime:runtime.rollout.loop:GRPOLoop.run", _TRAINER),
    "async.max_policy_lag": ("runtime:runtime.rollout.loop:GRPOLoop._async_run",),
    "async.off_policy_correction": (_TRAINER,),
    "async.tis_clip": (_TRAINER,),
    "async.buffer_factor": (
        "compile:sizes plan.async.completed_buffer_groups, the buffer GRPOLoop._async_run holds",
    ),
    "async.producer_budget": ("runtime:runtime.rollout.driver:rollout_concurrency",),
    "async.unused_sample_handler": ("runtime:runtime.rollout.loop:GRPOLoop._async_run",),
    "async.submission_granularity": ("runtime:runtime.rollout.driver:submission_granularity",),
    "async.publication_mode": (_DRIVER,),  # RefreshPublisher / EngineDrainPublisher
    # [checkpoint]
    "checkpoint.interval": ("runtime:runtime.rollout.driver:_manager",),
    "checkpoint.keep_last": ("runtime:runtime.checkpoints.manager:CheckpointManager.prune",),
    "checkpoint.keep_every": ("runtime:runtime.checkpoints.manager:CheckpointManager.prune",),
    "checkpoint.resume": (_DRIVER,),
    "checkpoint.export_hf_final": (_DRIVER,),
    # [rewards]
    "rewards.failure_policy": ("runtime:runtime.rollout.collect:Collector.score",),
    "rewards.exclude_truncated": ("runtime:runtime.rollout.shaping:Shaping.from_contract",),
    "rewards.math.equivalence": ("runtime:runtime.rewards.math_answer:MathVerifier.__init__",),
    "rewards.math.timeout_s": ("runtime:runtime.rewards.math_answer:MathVerifier.__init__",),
    "rewards.code.endpoint": ("runtime:runtime.executor.client:ExecutorEndpoint.__init__",),
    "rewards.code.time_limit_s": (_EXECUTOR_LIMITS,),
    "rewards.code.memory_limit_mb": (_EXECUTOR_LIMITS,),
    "rewards.code.max_processes": (_EXECUTOR_LIMITS,),
    "rewards.code.network": (
        "runtime:runtime.rewards.code:CodeVerifier.__init__",
        _EXECUTOR_SERVICE,
    ),
    "rewards.code.allow_unsandboxed": (_EXECUTOR_SERVICE,),
    "rewards.code.concurrency": ("runtime:runtime.rewards.code:CodeVerifier.__init__",),
    "rewards.ifeval.strict": ("runtime:runtime.rewards.ifeval:IFEvalVerifier.__init__",),
    "rewards.ifeval.aggregate": ("runtime:runtime.rewards.ifeval:IFEvalVerifier.__init__",),
    "rewards.length_penalty.enabled": ("runtime:runtime.rollout.shaping:Shaping.from_contract",),
    "rewards.length_penalty.target_tokens": (
        "runtime:runtime.rollout.shaping:Shaping.from_contract",
    ),
    "rewards.length_penalty.coef": ("runtime:runtime.rollout.shaping:Shaping.from_contract",),
    # [environment]: multi-turn tool use (runtime.rollout.multiturn carries it out)
    "environment.max_turns": (_ENV, "runtime:runtime.rollout.multiturn:EpisodeRunner._episode"),
    "environment.tools": (_ENV, "runtime:runtime.rollout.driver:_make_episodes"),
    "environment.call_open": (_ENV,),
    "environment.call_close": (_ENV,),
    "environment.result_template": (_ENV,),
    "environment.stop": (_ENV,),
    "environment.final_answer_pattern": (_ENV,),
    "environment.max_tool_output_chars": (_ENV,),
    "environment.tool_timeout_s": (_ENV, "runtime:runtime.rollout.driver:_make_episodes"),
    # [judges.NAME] (managed | external), [rubrics.NAME], [judging.bindings.VERIFIER]
    "judges": ("runtime:runtime.config:judge_bindings",),
    "judges.*.mode": ("runtime:runtime.config:judge_bindings",),
    "judges.*.model": ("runtime:runtime.config:judge_bindings",),
    "judges.*.max_context_length": (_JUDGE_ARGV,),
    "judges.*.max_concurrent_calls": ("runtime:runtime.config:judge_bindings", _JUDGE_ARGV),
    "judges.*.timeout": ("runtime:runtime.config:judge_bindings",),
    "judges.*.endpoint": ("runtime:runtime.config:judge_bindings",),
    "judges.*.gpus": (
        "compile:places the managed judge on GPUs (plan.placement.judges)",
        _JUDGE_ARGV,
    ),
    "judges.*.engine": (_JUDGE_ARGV, "rule:embedded-judge-tp"),
    "judges.*.revision": (_JUDGE_ARGV,),
    "judges.*.prepared_dir": (_JUDGE_ARGV,),
    "judges.*.chat_template": ("runtime:runtime.rewards.judge:JudgeVerifier._complete",),
    "judges.*.context_extension": (_JUDGE_ARGV,),
    "rubrics": ("runtime:runtime.config:judge_bindings",),
    "rubrics.*.profile": ("runtime:runtime.config:judge_bindings",),
    "rubrics.*.max_response_tokens": ("runtime:runtime.config:judge_bindings",),
    "rubrics.*.temperature": ("runtime:runtime.config:judge_bindings",),
    "judging.bindings": ("runtime:runtime.config:judge_bindings",),
    "judging.bindings.*.judge": ("runtime:runtime.config:judge_bindings",),
    "judging.bindings.*.rubric": ("runtime:runtime.config:judge_bindings",),
    # [evaluation]
    "evaluation.mode": ("runtime:runtime.rollout.driver:_make_evaluator",),
    "evaluation.temperature": ("runtime:runtime.rollout.driver:_make_evaluator",),
    "evaluation.samples_per_prompt": ("runtime:runtime.rollout.driver:_make_evaluator",),
    "evaluation.max_response_length": ("runtime:runtime.rollout.driver:_make_evaluator",),
    "evaluation.interval": ("runtime:runtime.launch.evaluator:BackgroundEvaluator.__init__",),
    "evaluation.initial": ("runtime:runtime.launch.evaluator:BackgroundEvaluator.due",),
    "evaluation.final": ("runtime:runtime.launch.evaluator:BackgroundEvaluator.due",),
    "evaluation.image": (_EVAL_JOB,),
    "evaluation.revision": ("rule:evaluation-revision-unused",),
    "evaluation.gpus": (_EVAL_JOB,),
    "evaluation.cluster": (_EVAL_JOB,),
    "evaluation.workspace": ("runtime:runtime.launch.evaluator:BeakerSubmitter.submit",),
    "evaluation.budget": (_EVAL_JOB,),
    "evaluation.submit_timeout": ("runtime:runtime.rollout.driver:_background_evaluator",),
    "evaluation.timeout": (_EVAL_JOB,),
    "evaluation.server_args": ("runtime:runtime.entrypoints.evaluate:_start_engine",),
    "evaluation.tasks": ("runtime:runtime.entrypoints.evaluate:due_tasks",),
    "evaluation.tasks.[].task": ("runtime:runtime.data.eval_tasks:load_eval_task",),
    "evaluation.tasks.[].interval": ("runtime:runtime.entrypoints.evaluate:due_tasks",),
    "evaluation.tasks.[].generation": ("runtime:runtime.entrypoints.evaluate:evaluate",),
    "evaluation.tasks.[].scoring": ("runtime:runtime.entrypoints.evaluate:due_tasks",),
    # [tracking]
    "tracking.metrics_path": (
        "compile:derives paths.metrics, the file the runtime writes (runtime.config.Paths)",
    ),
    "tracking.wandb_mode": ("runtime:runtime.tracking:WandbSink.from_contract",),
    "tracking.wandb_project": ("runtime:runtime.tracking:WandbSink.from_contract",),
    "tracking.wandb_team": ("runtime:runtime.tracking:WandbSink.from_contract",),
    "tracking.wandb_group": ("runtime:runtime.tracking:WandbSink.from_contract",),
    "tracking.wandb_run_name": ("runtime:runtime.tracking:WandbSink.from_contract",),
    "tracking.log_interval": ("runtime:runtime.tracking:WandbSink.from_contract",),
    # [compiler_cache]
    "compiler_cache.enabled": ("runtime:runtime.compiler_cache:CompilerCache.from_contract",),
    "compiler_cache.shared_root": ("runtime:runtime.compiler_cache:CompilerCache.from_contract",),
    "compiler_cache.restore": ("runtime:runtime.compiler_cache:CompilerCache.from_contract",),
    "compiler_cache.max_storage_bytes": (
        "runtime:runtime.compiler_cache:CompilerCache.from_contract",
    ),
    "compiler_cache.publish_interval_seconds": (
        "runtime:runtime.compiler_cache:CompilerCache.from_contract",
    ),
    # [runtime]
    "runtime.health_timeout_s": ("runtime:runtime.engines.client:EngineClient",),
    "runtime.generate_timeout_s": ("runtime:runtime.engines.client:EngineClient",),
    "runtime.http_retries": ("runtime:runtime.engines.client:EngineClient",),
    "runtime.retry_backoff_s": ("runtime:runtime.engines.client:EngineClient",),
    "runtime.group_retries": ("runtime:runtime.engines.client:EngineClient",),
    "runtime.startup_timeout_s": (
        "runtime:runtime.entrypoints.execute:NodeRunner.start_engines",
        "rule:startup-timeout-moved",
    ),
    "runtime.publish_timeout_s": ("runtime:runtime.rollout.driver:_distributed_publisher",),
    "runtime.publication_transport": ("runtime:runtime.rollout.driver:train",),
    "runtime.weight_audit": (_DRIVER,),
    "runtime.max_logprob_mismatch": ("runtime:runtime.rollout.loop:GRPOLoop._limit_mismatch",),
    "runtime.seed": (_TRAINER,),
    # [native.*]
    "native.sglang": ("argv:compiler.resolve.argv:native_sglang_argv",),
    "native.olmo_core": (
        "compile:checked against the pinned OLMo-core option table, then refused at its line "
        "(compiler.spec.native_options.NOT_APPLIED): the trainer reads none of these options",
    ),
}
