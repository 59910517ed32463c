"""Trainer: learning signal, packing/recompute invariance, logprobs, KL reference, DP all-reduce."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("olmo_core")

from compiled_run import contract  # noqa: E402

from runtime.models import load_model, number_token_ids, state_checksum  # noqa: E402
from runtime.trainer import GRPOConfig, Sample, Trainer, TrainerConfig, group_advantages  # noqa: E402


def _batch(tok, n_prompts: int = 3, seed: int = 0) -> list[Sample]:
    """Arithmetic groups: correct answers get positive advantage."""
    g = torch.Generator().manual_seed(seed)
    nums = number_token_ids(tok)
    out = []
    for _ in range(n_prompts):
        a, b = (int(v) for v in torch.randint(0, 10, (2,), generator=g))
        prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": f"{a}+{b}="}]))
        answers = [a + b, (a + b + 1) % 19, (a + b + 5) % 19, a + b]
        adv = group_advantages([float(x == a + b) for x in answers])
        for x, ad in zip(answers, adv, strict=True):
            out.append(Sample(prompt, [nums[x], tok.eos_token_id], ad))
    return out


def _params(tr: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in tr.state_dict_for_publication().items()}


def _max_diff(a, b) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def test_update_raises_probability_of_rewarded_answer() -> None:
    tr = Trainer(TrainerConfig(lr=3e-3))
    samples = _batch(tr.loaded.tokenizer)
    good = [s for s in samples if s.advantage > 0]
    bad = [s for s in samples if s.advantage < 0]
    before_good = torch.cat(tr.compute_logprobs(good))[::2].mean()
    before_bad = torch.cat(tr.compute_logprobs(bad))[::2].mean()
    for _ in range(3):
        m = tr.train_step(samples)
    after_good = torch.cat(tr.compute_logprobs(good))[::2].mean()
    after_bad = torch.cat(tr.compute_logprobs(bad))[::2].mean()
    assert after_good > before_good + 0.05
    assert after_bad < before_bad
    assert m["step"] == 3 and m["policy_version"] == 3
    assert m["samples"] == len(samples) and m["response_tokens"] == 2 * len(samples)
    assert m["grad_norm"] > 0 and m["lr"] == pytest.approx(3e-3)


def test_packing_and_recompute_do_not_change_the_update() -> None:
    # adam_eps >> sqrt(v) makes the step linear in the gradient, so this compares gradients
    # (plain Adam would amplify float noise in near-zero gradients to full-size steps)
    base = TrainerConfig(lr=1.0, adam_eps=1.0, seed=5, clip_grad=None)
    variants = {
        "packed": TrainerConfig(**{**vars(base), "packing_max_tokens": 64}),
        "unpacked": TrainerConfig(**{**vars(base), "sequence_packing": False}),
        "recompute": TrainerConfig(
            **{**vars(base), "sequence_packing": False, "activation_recompute": True}
        ),
    }
    results = {}
    init = None
    for name, cfg in variants.items():
        tr = Trainer(cfg)
        init = init or _params(tr)
        m = tr.train_step(_batch(tr.loaded.tokenizer, seed=2))
        results[name] = (_params(tr), m)
    assert results["packed"][1]["rows"] < results["unpacked"][1]["rows"]
    assert _max_diff(init, results["packed"][0]) > 1e-3  # the step did something
    assert _max_diff(results["packed"][0], results["unpacked"][0]) < 1e-6
    assert _max_diff(results["recompute"][0], results["unpacked"][0]) < 1e-6
    # publication names are OLMo-core names even with checkpoint wrappers in place
    assert set(results["recompute"][0]) == set(init)


def test_compute_logprobs_matches_rollout_and_tis_metrics() -> None:
    tr = Trainer(TrainerConfig(lr=1e-3, grpo=GRPOConfig(off_policy_correction="tis")))
    samples = _batch(tr.loaded.tokenizer, n_prompts=2)
    for s, lp in zip(samples, tr.compute_logprobs(samples), strict=True):
        assert lp.shape == (2,) and (lp < 0).all()
        s.rollout_logprobs = lp.tolist()
    m = tr.train_step(samples)
    assert m["logprob_abs_diff"] < 1e-5
    assert m["tis_weight"] == pytest.approx(1.0, abs=1e-4)
    assert m["ratio"] == pytest.approx(1.0, abs=1e-5)
    assert m["clip_frac"] == 0.0


def test_kl_reference_is_frozen() -> None:
    tr = Trainer(TrainerConfig(lr=5e-3, grpo=GRPOConfig(kl_coef=0.1)))
    assert tr.ref_model is not None
    ref_sum = state_checksum(tr.ref_model.state_dict())
    samples = _batch(tr.loaded.tokenizer)
    first = tr.train_step(samples)
    second = tr.train_step(samples)
    assert first["kl"] == pytest.approx(0.0, abs=1e-7)
    assert second["kl"] > 0
    assert state_checksum(tr.ref_model.state_dict()) == ref_sum


def test_warm_up_lengths_climb_to_the_longest_row() -> None:
    """A doubling ladder from the first row to the longest the run can meet (8192 here),
    crossing the 32-bit indexing bound and the sliding window on the way; one length for
    static rows."""
    packed = Trainer(TrainerConfig(sequence_packing=True, packing_max_tokens=8192))
    assert packed.warm_up_lengths() == [192, 384, 768, 1536, 3072, 6144, 8192]
    static = TrainerConfig(
        sequence_packing=True, packing_max_tokens=512, row_specialization="static"
    )
    assert Trainer(static).warm_up_lengths() == [512]


def test_a_compiled_warm_up_starts_with_a_sentinel_row() -> None:
    """Compiled, the warm-up first runs a row of a sentinel length (odd, inside the 32-bit
    indexing regime, none of its values a model size), which torch marks dynamic."""
    from runtime.trainer.trainer import _model_sizes, _sentinel_values

    tr = Trainer(TrainerConfig(sequence_packing=True, packing_max_tokens=8192, compile_model=True))
    sentinel = tr.sentinel_row_tokens()
    assert sentinel == 2559 and tr.warm_up_lengths()[0] == sentinel
    assert tr.warm_up_lengths()[1:] == [192, 384, 768, 1536, 3072, 6144, 8192]
    assert not set(_sentinel_values(sentinel)) & _model_sizes(tr.model)
    short = Trainer(
        TrainerConfig(sequence_packing=True, packing_max_tokens=700, compile_model=True)
    )
    n = short.sentinel_row_tokens()
    assert n is not None and n % 2 == 1 and n <= 700


def test_frames_behind_the_mask_graph_break_compile_once() -> None:
    """FlexAttention's block mask is built eagerly (a graph break inside each block), so
    the frames after it see tensors made inside the compiled blocks. With the sentinel
    row first they compile shape-dynamic at once: the ladder's later rows compile nothing
    (without it, the second row compiled them all again). The log-prob pass in eval mode
    runs FlexAttention on the CPU too."""
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    counter = CompileCounter()
    compile_module = torch.nn.Module.compile

    def counted(self: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
        compile_module(self, *args, **{**kwargs, "backend": counter})

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.nn.Module, "compile", counted)
        cfg = TrainerConfig(
            sequence_packing=True,
            packing_max_tokens=1024,
            compile_model=True,
            attention_backend="flex",
        )
        tr = Trainer(cfg)
        tr.scores_on_training_graph = False  # keep the eval-mode pass (FlexAttention)
        tr.warm_up()
    scored = [e for e in tr.warm_up_log if e["pass"] == "log-prob"]
    assert scored[0]["tokens"] == tr.sentinel_row_tokens() and scored[0]["graphs"] > 0
    assert [e["graphs"] for e in scored[1:]] == [0] * (len(scored) - 1)
    torch._dynamo.reset()


def test_publication_dtype_and_checksum() -> None:
    tr = Trainer(TrainerConfig())
    pub = tr.state_dict_for_publication(dtype=torch.bfloat16)
    assert all(t.dtype == torch.bfloat16 for t in pub.values())
    assert set(pub) == set(load_model("builtin:tiny").model.state_dict())
    assert tr.publication_checksum() == state_checksum(tr.model.state_dict())


@pytest.mark.parametrize("rows", ["dynamic", "static"])
def test_warm_up_runs_forwards_and_changes_nothing(rows: str) -> None:
    """The start-up warm-up (the log-prob forward, then a training forward and backward,
    compiled before the first collection) leaves weights, gradients, optimizer state,
    training mode and the log-probs of a later pass as they were, and the first update
    after it is the update a trainer without the warm-up makes."""
    cfg = TrainerConfig(
        sequence_packing=True, packing_max_tokens=128, row_specialization=rows, lr=5e-3
    )
    tr = Trainer(cfg)
    batch = _batch(tr.loaded.tokenizer)
    before, logp, mode = _params(tr), tr.compute_logprobs(batch), tr.model.training
    seen: set[tuple[bool, bool]] = set()
    trained: list[int] = []
    forward = tr._forward_selected

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.add((torch.is_grad_enabled(), tr.model.training))
        if torch.is_grad_enabled():
            trained.append(args[1].num_tokens)
        return forward(*args, **kwargs)

    tr._forward_selected = spy  # type: ignore[method-assign]
    lengths = tr.warm_up_lengths()
    assert tr.warm_up() == 2 * len(lengths)
    del tr._forward_selected
    # as compute_logprobs runs (eval, no autograd), then as train_step runs (train, autograd)
    assert seen == {(False, False), (True, True)}
    # both passes run every rung up to the longest row the run can meet, so each of
    # Inductor's specializations (32-bit indexing, past the window) is compiled here
    assert trained == lengths
    assert lengths[-1] == (tr.static_row_tokens() or tr.longest_row_tokens())
    assert tr.model.training == mode
    assert _max_diff(before, _params(tr)) == 0.0
    assert all(p.grad is None for p in tr.model.parameters())
    assert not tr.optimizer.state
    for a, b in zip(logp, tr.compute_logprobs(batch), strict=True):
        assert torch.equal(a, b)
    cold = Trainer(cfg)
    warm_metrics, cold_metrics = tr.train_step(batch), cold.train_step(batch)
    assert warm_metrics["loss"] == cold_metrics["loss"]
    assert _max_diff(_params(tr), _params(cold)) == 0.0


def test_moe_train_step_on_cpu() -> None:
    tr = Trainer(TrainerConfig(model_source="builtin:tiny-moe", lr=1e-3, router_z_loss_coef=0.0))
    m = tr.train_step(_batch(tr.loaded.tokenizer, n_prompts=1))
    assert m["grad_norm"] > 0


def test_from_contract_maps_fields(tmp_path: Path) -> None:
    cfg = TrainerConfig.from_contract(
        contract(
            tmp_path,
            model={"source": "builtin:tiny"},
            trainer={"gpus": 0, "sequence_packing": False},
            optimizer={
                "lr": 2e-5,
                "schedule": "cosine",
                "warmup_steps": 3,
                "eps_clip_high": 0.3,
                "kl_coef": 0.05,
                "steps_per_collection": 2,
            },
            inference={"global_batch_size": 2},
            training={"num_rollouts": 7},
            runtime={"seed": 9},
            **{"async": {"enabled": True, "tis_clip": 3.0}},
        )
    )
    assert (cfg.lr, cfg.schedule, cfg.warmup_steps, cfg.total_steps, cfg.seed) == (
        2e-5,
        "cosine",
        3,
        14,
        9,
    )
    assert cfg.grpo.eps_clip_high == 0.3 and cfg.grpo.kl_coef == 0.05
    assert cfg.grpo.off_policy_correction == "tis" and cfg.grpo.tis_clip == 3.0
    assert cfg.sequence_packing is False and cfg.architecture == "dense"


def test_compiled_blocks_score_and_train_like_eager() -> None:
    """trainer.compile_model (OLMo-core's apply_compile, Inductor's CPU code here): the
    log-probs of the compiled blocks match the eager ones and an update moves the same
    weights the same way (up to float rounding)."""
    cfg = dict(lr=1e-3, sequence_packing=True, packing_max_tokens=128)
    eager, compiled = (
        Trainer(TrainerConfig(**cfg)),
        Trainer(TrainerConfig(**cfg, compile_model=True)),
    )
    batch = _batch(eager.loaded.tokenizer, n_prompts=1)
    for a, b in zip(eager.compute_logprobs(batch), compiled.compute_logprobs(batch), strict=True):
        assert (a - b).abs().max().item() < 1e-4
    before = _params(compiled)
    ma, mb = eager.train_step(batch), compiled.train_step(batch)
    assert ma["loss"] == pytest.approx(mb["loss"], abs=1e-6)
    assert _max_diff(before, _params(compiled)) > 0
    assert _max_diff(_params(eager), _params(compiled)) < 1e-3


def _samples_of_lengths(tok, lengths: list[int]) -> list[Sample]:
    """Samples of ``lengths`` prompt tokens, a two-token response each, advantages +-1."""
    return [
        Sample(list(range(1, n + 1)), [5, tok.eos_token_id], 1.0 if i % 2 else -1.0)
        for i, n in enumerate(lengths)
    ]


def _count_compiles(monkeypatch) -> Any:
    """Every ``Module.compile`` from here compiles with dynamo's frame counter as its
    backend (its eager backend stands in for Inductor); returns the counter."""
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    counter = CompileCounter()
    compile_module = torch.nn.Module.compile

    def counted(self: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
        compile_module(self, *args, **{**kwargs, "backend": counter})

    monkeypatch.setattr(torch.nn.Module, "compile", counted)
    return counter


@pytest.mark.parametrize(
    "cfg",
    [
        dict(sequence_packing=True, packing_max_tokens=128),
        dict(sequence_packing=True, packing_max_tokens=128, activation_recompute=True),
        dict(sequence_packing=False),
        dict(sequence_packing=True, packing_max_tokens=128, row_specialization="static"),
        dict(sequence_packing=True, packing_max_tokens=128, grpo=GRPOConfig(kl_coef=0.1)),
    ],
    ids=["packed", "packed-recompute", "unpacked", "static", "kl-reference"],
)
def test_no_compile_after_the_warm_up(cfg: dict[str, Any], monkeypatch) -> None:
    """With compiled blocks, the warm-up meets every variant the run's rows take: scoring and
    updates at lengths it never saw, single-document rows included, compile nothing more
    (dynamo's own frame counter; its eager backend stands in for Inductor)."""
    counter = _count_compiles(monkeypatch)
    tr = Trainer(TrainerConfig(lr=1e-3, compile_model=True, **cfg))
    tr.warm_up()
    warmed = counter.frame_count
    assert warmed > 0
    tok = tr.loaded.tokenizer
    for lengths in ([7], [23, 40, 11], [100], [5, 61]):
        batch = _samples_of_lengths(tok, lengths)
        tr.compute_logprobs(batch)
        assert tr.train_step(batch)["new_compiled_graphs"] == 0.0
    assert counter.frame_count == warmed
    torch._dynamo.reset()


def test_dense_compiled_trainer_scores_on_its_training_graph() -> None:
    """A dense compiled model scores in train mode with autograd on (its training graph),
    so the warm-up compiles no separate log-prob pass. The log-probs equal the eval-mode
    ones, carry no autograd graph, and are exactly what the first update computes: its
    ratio is 1."""
    cfg = dict(lr=1e-3, sequence_packing=True, packing_max_tokens=128)
    eager = Trainer(TrainerConfig(**cfg))
    compiled = Trainer(TrainerConfig(**cfg, compile_model=True))
    assert compiled.scores_on_training_graph and not eager.scores_on_training_graph
    compiled.warm_up()
    assert {e["pass"] for e in compiled.warm_up_log} == {"training"}
    assert [e["tokens"] for e in compiled.warm_up_log] == compiled.warm_up_lengths()
    batch = _batch(compiled.loaded.tokenizer)
    scored = compiled.compute_logprobs(batch)
    assert not any(t.requires_grad for t in scored)
    for a, b in zip(scored, eager.compute_logprobs(batch), strict=True):
        assert torch.allclose(a, b, atol=1e-5)
    pinned = [
        Sample(s.prompt_ids, s.response_ids, s.advantage, old_logprobs=t.tolist())
        for s, t in zip(batch, scored, strict=True)
    ]
    m = compiled.train_step(pinned)
    assert m["ratio_max"] == 1.0 and m["ratio_min"] == 1.0


def test_models_that_train_differently_keep_the_eval_scoring_pass() -> None:
    """MoE routers and dropout behave differently in train mode: such models score in eval
    mode without autograd, and the warm-up compiles that pass too."""
    from runtime.trainer.trainer import _has_dropout

    moe = Trainer(
        TrainerConfig(model_source="builtin:tiny-moe", compile_model=True, router_z_loss_coef=0.0)
    )
    assert not moe.scores_on_training_graph
    dense = Trainer(TrainerConfig(compile_model=True))
    assert not _has_dropout(dense.model)
    dense.model.add_module("drop", torch.nn.Dropout(0.1))
    assert _has_dropout(dense.model)


def test_compiled_blocks_with_recompute_train_like_eager() -> None:
    """Activation recompute under compiled blocks (OLMo-core's budget mode: the compiled
    graph recomputes) runs two updates and moves the weights as the eager trainer with
    checkpointed blocks does (checkpoint wrappers around compiled blocks fail instead)."""
    cfg = dict(lr=1e-3, sequence_packing=True, packing_max_tokens=128, activation_recompute=True)
    eager = Trainer(TrainerConfig(**cfg))
    compiled = Trainer(TrainerConfig(**cfg, compile_model=True))
    batch = _batch(eager.loaded.tokenizer, n_prompts=1)
    for _ in range(2):
        ma, mb = eager.train_step(batch), compiled.train_step(batch)
        assert ma["loss"] == pytest.approx(mb["loss"], abs=1e-5)
    assert _max_diff(_params(eager), _params(compiled)) < 1e-3


@pytest.mark.parametrize("kl_coef", [0.0, 0.1], ids=["policy", "with-kl-reference"])
def test_a_trainer_built_on_deferred_weights_warms_up_then_trains_as_if_loaded(
    kl_coef: float, tmp_path, monkeypatch
) -> None:
    """Beside the engines, the trainer is built on zeros and compiles while its weights
    are read (a builtin's first initialisation runs in a child process that writes the
    init cache). Once filled, policy and KL reference are exactly the loaded model's, and
    the warm-up's graphs serve them: nothing compiles after it."""
    import runtime.models.init_cache as init_cache

    monkeypatch.setenv("RLC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(init_cache, "MIN_PARAMS", 0)  # the tiny builtin goes through it
    counter = _count_compiles(monkeypatch)
    cfg = dict(lr=1e-3, sequence_packing=True, packing_max_tokens=128)
    cfg["grpo"] = GRPOConfig(kl_coef=kl_coef)
    deferred = Trainer(TrainerConfig(**cfg, compile_model=True), defer_weights=True)
    assert deferred.weights_pending
    assert all(not p.detach().any() for p in deferred.model.parameters())
    deferred.warm_up()
    warmed = counter.frame_count
    deferred.fill_weights()
    assert not deferred.weights_pending
    loaded = Trainer(TrainerConfig(**cfg))  # in-process initialisation, no cache
    assert _max_diff(_params(loaded), _params(deferred)) == 0.0
    if kl_coef:
        ref = dict(deferred.ref_model.named_parameters())
        for name, p in loaded.model.named_parameters():
            assert torch.equal(ref[name], p)
    batch = _batch(loaded.loaded.tokenizer, n_prompts=1)
    for a, b in zip(loaded.compute_logprobs(batch), deferred.compute_logprobs(batch), strict=True):
        assert (a - b).abs().max().item() < 1e-4
    ma, mb = loaded.train_step(batch), deferred.train_step(batch)
    assert ma["loss"] == pytest.approx(mb["loss"], abs=1e-6)
    assert mb["new_compiled_graphs"] == 0.0 and counter.frame_count == warmed
    torch._dynamo.reset()
