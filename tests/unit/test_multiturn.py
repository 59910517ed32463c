"""Multi-turn rollouts: the episode flow (prefix reuse, stop strings, budget, turn limit),
the per-token loss mask from rollout to the trainer's packed row, and the metrics.

The engine is replaced here by its replies written as data (SGLang-native ``/generate``
dicts) so every token is known; tests/e2e/test_tool_use.py runs the same code against a
real engine behind the real router.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from contract.spec.environment import EnvironmentSection
from runtime.executor.settings import ExecutorSettings
from runtime.models.tokenizer import build_tools_tokenizer
from runtime.rollout.collect import Collector, CollectSettings, tool_summary
from runtime.rollout.driver import TrainerAdapter
from runtime.rollout.environment import Environment
from runtime.rollout.loop import mismatch
from runtime.rollout.multiturn import EpisodeRunner, make_codec, turn_seed
from runtime.rollout.types import Group, Sample
from runtime.tools.runners import ToolBox
from runtime.trainer.packing import IGNORE, build_row

TOK = build_tools_tokenizer()
EOS = TOK.eos_token_id


def reply(text: str, *, eos: bool = False, finish: str = "stop", lp: float = -0.5) -> dict:
    """An engine reply for ``text`` (plus the stop token), as SGLang returns it."""
    ids = TOK.encode(text) + ([EOS] if eos else [])
    reason: dict[str, Any] = {"type": finish}
    if finish == "stop":
        reason["matched"] = EOS if eos else "</calculator>"
    return {
        "text": text,
        "output_ids": ids,
        "meta_info": {
            "finish_reason": reason,
            "output_token_logprobs": [[lp - 0.01 * i, t, None] for i, t in enumerate(ids)],
        },
    }


class Script:
    """The engine: hands out the scripted replies in order and records every request."""

    def __init__(self, *replies: list[dict]) -> None:
        self.replies = list(replies)
        self.requests: list[tuple[list[int], dict[str, Any], list[int]]] = []

    def __call__(self, input_ids: list[int], params: dict[str, Any], seeds: list[int]) -> list:
        self.requests.append((list(input_ids), dict(params), list(seeds)))
        return self.replies.pop(0)


ENV = Environment(max_turns=2, tools=("calculator",))


def runner(env: Environment = ENV) -> EpisodeRunner:
    return EpisodeRunner(env, ToolBox(env.tools, ExecutorSettings()), make_codec(TOK))


def test_a_two_turn_trajectory_is_one_sequence_with_tool_output_masked() -> None:
    prompt = TOK.encode("<calculator>37+45")
    engine = Script([reply("</calculator>", lp=-0.25)], [reply("82", eos=True, lp=-0.125)])
    params = {"max_new_tokens": 8, "temperature": 1.0, "stop_token_ids": [EOS]}
    (traj,) = runner().run_group(engine, prompt, params, [1234], version=3)

    call = TOK.encode("</calculator>")
    tool = TOK.encode("<output>82</output>")
    answer = TOK.encode("82") + [EOS]
    assert traj.response_ids == call + tool + answer
    # token by token: the policy's tokens carry loss, the calculator's do not
    assert traj.loss_mask == [1] + [0, 0, 0, 0] + [1, 1, 1]
    assert [math.isnan(x) for x in traj.logprobs] == [False] + [True] * 4 + [False] * 3
    assert traj.logprobs[0] == -0.25 and traj.logprobs[5] == -0.125
    assert traj.text == "</calculator><output>82</output>82"
    assert (traj.turns, traj.tool_calls, traj.tool_errors) == (2, 1, 0)
    assert traj.finish_reason == "stop"
    # turn 1 stops at the closing tag and keeps it; turn 2 is the SAME sequence continued
    (ids1, p1, s1), (ids2, p2, s2) = engine.requests
    assert ids1 == prompt and s1 == [1234]
    assert p1["stop"] == ["</calculator>"] and p1["no_stop_trim"] is True
    assert ids2 == prompt + call + tool  # previous prompt + response + tool output
    assert p2["max_new_tokens"] == 8 - len(call + tool) and s2 == [turn_seed(1234, 1)]
    assert p2["stop_token_ids"] == [EOS] and p2["temperature"] == 1.0

    # the rollout sample -> the trainer's record -> its packed row, token by token
    sample = Sample("p", 0, prompt, traj.response_ids, traj.logprobs, loss_mask=traj.loss_mask)
    (record,) = TrainerAdapter._convert([sample])
    row = build_row([record], [0])
    p = len(prompt)
    weights = row.loss_mask.tolist()
    # position t predicts token t+1: prompt positions before the response predict nothing
    assert weights[: p - 1] == [0.0] * (p - 1)
    assert weights[p - 1 :] == [1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0] + [0.0]
    assert row.targets[p - 1 : p + 7].tolist() == traj.response_ids
    assert row.targets[-1].item() == IGNORE  # the last token predicts nothing
    rollout = row.rollout_logprobs.tolist()
    assert [math.isnan(x) for x in rollout[p - 1 : p + 7]] == [False] + [True] * 4 + [False] * 3


def test_an_untrained_sample_has_no_loss_anywhere() -> None:
    sample = Sample("p", 0, [1, 2], [3, 4, 5], [0.0, math.nan, 0.0], loss_mask=[1, 0, 1])
    sample.trained = False  # rewards.exclude_truncated
    (record,) = TrainerAdapter._convert([sample])
    assert record.loss_mask == [0, 0, 0]
    plain = Sample("p", 0, [1, 2], [3], [0.0])
    assert TrainerAdapter._convert([plain])[0].loss_mask is None  # single turn: all trained


def test_a_turn_without_a_call_ends_the_episode() -> None:
    engine = Script([reply("=82", eos=True)])
    (traj,) = runner().run_group(
        engine, TOK.encode("<calculator>37+45"), {"max_new_tokens": 8}, [1], 0
    )
    assert (traj.turns, traj.tool_calls) == (1, 0) and traj.loss_mask == [1] * 4
    assert len(engine.requests) == 1


def test_the_turn_limit_and_the_budget_end_an_episode() -> None:
    # the last allowed turn ends with a call: it never runs
    engine = Script([reply("</calculator>")])
    env1 = Environment(max_turns=1, tools=("calculator",))
    (traj,) = runner(env1).run_group(
        engine, TOK.encode("<calculator>1+1"), {"max_new_tokens": 8}, [1], 0
    )
    assert traj.finish_reason == "max_turns" and traj.tool_calls == 0
    # tool output beyond the response budget is cut there, and the episode ends
    engine = Script([reply("</calculator>")])
    (traj,) = runner().run_group(
        engine, TOK.encode("<calculator>37+45"), {"max_new_tokens": 3}, [1], 0
    )
    assert traj.finish_reason == "length" and len(traj.response_ids) == 3
    assert traj.loss_mask == [1, 0, 0] and traj.text == "</calculator><output>8"


def test_a_call_opened_in_the_turn_and_a_failing_call() -> None:
    engine = Script([reply("<calculator>2*</calculator>")], [reply("0", eos=True)])
    (traj,) = runner().run_group(engine, TOK.encode("9+9="), {"max_new_tokens": 64}, [1], 0)
    assert (traj.tool_calls, traj.tool_errors) == (1, 1) and traj.finish_reason == "stop"
    # the error message is the output, as the policy's vocabulary spells it
    error = TOK.decode(TOK.encode("<output>error: not an arithmetic expression: '2*'</output>"))
    assert traj.text == "<calculator>2*</calculator>" + error + "0"


def test_a_group_runs_every_sample_as_its_own_episode() -> None:
    """Turn 1 is one request for the whole group (n samples, shared prompt); each sample
    that called a tool continues alone with its own seed."""
    first = [reply("</calculator>"), reply("7", eos=True), reply("</calculator>")]
    engine = Script(first, [reply("82", eos=True)], [reply("82", eos=True)])
    episodes = runner()
    episodes.concurrency = 1  # replies in a known order
    settings = CollectSettings(3, {"max_new_tokens": 8}, run_seed=0)

    class P:
        id, verifier, target, metadata = "addition:train:0", "addition", "82", {}

    collector = Collector(
        engine, lambda p: TOK.encode("<calculator>37+45"), None, settings, episodes
    )  # type: ignore[arg-type]
    group = collector.generate_groups([P()], version=5)[0]
    assert [s.turns for s in group.samples] == [2, 1, 2]
    assert [s.tool_calls for s in group.samples] == [1, 0, 1]
    assert len(engine.requests) == 3 and len(engine.requests[0][2]) == 3
    assert engine.requests[1][2] != engine.requests[2][2]  # per-sample turn seeds
    assert all(s.policy_version == 5 for s in group.samples)
    metrics = tool_summary([group])
    assert metrics["tools/calls_per_sample"] == pytest.approx(2 / 3)
    assert metrics["tools/used_fraction"] == pytest.approx(2 / 3)
    assert metrics["tools/turns_mean"] == pytest.approx(5 / 3)
    assert metrics["tools/errors"] == 0.0


def test_mismatch_skips_tool_output() -> None:
    s = Sample("p", 0, [1], [2, 3, 4], [-1.0, math.nan, -2.0], loss_mask=[1, 0, 1])
    assert mismatch([[-1.5, -9.0, -2.5]], [s]) == pytest.approx(0.5)
    empty = Group(prompt=None, samples=[s])
    assert tool_summary([empty])["tools/calls_per_sample"] == 0.0


def test_environment_from_the_manifest() -> None:
    assert not Environment.from_contract(EnvironmentSection()).multi_turn
    env = Environment.from_contract(
        EnvironmentSection(
            max_turns=3, tools=["python"], call_open="<tool:{tool}>", call_close="</tool>"
        )
    )
    assert env.multi_turn and env.stop_strings() == ["</tool>"]
    call = env.find_call("think <tool:python>print(1)</tool>\n")
    assert call is not None and (call.tool, call.arguments) == ("python", "print(1)")
    assert env.find_call("<tool:python>print(1)</tool> and more") is None
    # the token that completed the tag may carry a few more characters
    merged = env.find_call("<tool:python>print(2)</tool>.\n")
    assert merged is not None and merged.arguments == "print(2)"
    assert env.find_call("print(1)</tool>") is None  # nothing opened it
    assert env.render_result("x" * 300).startswith("<output>" + "x" * 256 + "...")
    final = Environment(
        max_turns=3, tools=("calculator",), stop="final_answer", final_answer_pattern=r"ANSWER: \d+"
    )
    assert final.is_final("so ANSWER: 82") and not final.is_final("82")
    for bad in (
        {"tools": ["search"]},
        {"stop": "final_answer"},
        {"result_template": "no placeholder"},
        {"max_turns": 0},
    ):
        with pytest.raises(ValueError):
            Environment.from_contract(EnvironmentSection.model_validate(bad))


def test_turn_seeds_are_stable() -> None:
    assert turn_seed(99, 0) == 99
    assert turn_seed(99, 1) == turn_seed(99, 1) != turn_seed(99, 2)
    assert 0 <= turn_seed(2**31 - 1, 5) < 2**31


def test_a_python_call_runs_in_the_sandboxed_executor() -> None:
    """An episode whose call is Python: the real executor runs it, its stdout is the output."""
    from runtime.models.tokenizer import build_builtin_tokenizer

    tok = build_builtin_tokenizer()
    env = Environment(max_turns=2, tools=("python",), tool_timeout_s=5.0)
    tools = ToolBox(env.tools, ExecutorSettings(workers=1), env.tool_timeout_s)

    def said(text: str) -> dict:
        ids = tok.encode(text)
        return {
            "text": text,
            "output_ids": ids,
            "meta_info": {
                "finish_reason": {"type": "stop", "matched": "</python>"},
                "output_token_logprobs": [[-1.0, t, None] for t in ids],
            },
        }

    engine = Script([said("<python>print(6*7)</python>")], [said("42")])
    try:
        episodes = EpisodeRunner(env, tools, make_codec(tok))
        (traj,) = episodes.run_group(engine, tok.encode("6*7="), {"max_new_tokens": 64}, [5], 0)
    finally:
        tools.close()
    assert traj.text == "<python>print(6*7)</python><output>42</output>42"
    assert (traj.tool_calls, traj.tool_errors, traj.turns) == (1, 0, 2)
    n_call, n_out = (
        len(tok.encode("<python>print(6*7)</python>")),
        len(tok.encode("<output>42</output>")),
    )
    assert traj.loss_mask == [1] * n_call + [0] * n_out + [1] * len(tok.encode("42"))


def test_refresh_publication_versions_span_the_turns() -> None:
    """Async refresh publication: each policy token keeps the version it was sampled under,
    tool tokens take the version of the token before them, the sample ages by its oldest."""
    first = reply("</calculator>")
    first["meta_info"]["weight_versions"] = [{"version": "4", "start": 0, "end": 1}]
    second = reply("82", eos=True)
    second["meta_info"]["weight_versions"] = [{"version": "5", "start": 0, "end": 3}]
    engine = Script([first], [second])
    settings = CollectSettings(1, {"max_new_tokens": 8}, run_seed=0, token_versions=True)

    class P:
        id, verifier, target, metadata = "addition:train:1", "addition", "82", {}

    collector = Collector(
        engine,
        lambda p: TOK.encode("<calculator>37+45"),
        None,  # type: ignore[arg-type]
        settings,
        runner(),
    )
    (sample,) = collector.generate_groups([P()], version=5)[0].samples
    assert sample.token_versions == [4, 4, 4, 4, 4, 5, 5, 5]
    assert sample.policy_version == 4
