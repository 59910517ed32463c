"""Multi-turn, tool-using rollouts: one sequence per sample that grows turn by turn.

Turn 1 is the group's ordinary request (``n`` samples sharing the prompt). A turn that ends
with a tool call (the engines stop at the closing tag) gets the tool's output appended, and
the next turn is a request for ``prompt + response so far`` (prefix reuse: the engine's
cache holds everything but the tool output) with the rest of the response budget
(``inference.max_response_length`` bounds the whole trajectory, tool output included). An
episode ends at a turn without a call, at a final answer (``stop = "final_answer"``), at
``max_turns`` or when the budget is spent.

The trajectory is one response: the policy's tokens carry their engine logprobs and loss
weight 1; tool-output tokens carry NaN logprobs (unknown to the behaviour policy) and loss
weight 0, so the trainer never trains the policy to predict what a tool said. The reward
sees the whole trajectory text (every turn and every tool output).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from runtime.rollout.collect import GroupGenerator, parse_response, token_versions
from runtime.rollout.environment import Environment
from runtime.tools.runners import ToolBox

FINISH_MAX_TURNS = "max_turns"  # the last allowed turn ended with a call that never ran


class TextCodec(Protocol):
    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


@dataclass
class Trajectory:
    """All turns of one sample as one response, with per-token loss weights."""

    response_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str = "stop"
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0

    def add_policy(self, ids: list[int], lps: list[float], text: str, versions: list[int]) -> None:
        self.response_ids += ids
        self.logprobs += lps
        self.loss_mask += [1] * len(ids)
        self.versions += versions
        self.text += text
        self.turns += 1

    def add_tool(self, ids: list[int], text: str) -> None:
        """Tool output: in the context, out of the loss."""
        self.response_ids += ids
        self.logprobs += [math.nan] * len(ids)
        self.loss_mask += [0] * len(ids)
        last = self.versions[-1] if self.versions else 0
        self.versions += [last] * len(ids)
        self.text += text


def turn_seed(seed: int, turn: int) -> int:
    """Turn 0 keeps the sample's seed; later turns derive theirs from it (deterministic)."""
    if turn == 0:
        return seed
    h = hashlib.sha256(f"{seed}:turn:{turn}".encode()).digest()
    return int.from_bytes(h[:4], "big") & 0x7FFFFFFF


class EpisodeRunner:
    """Carries out the episodes of a group against a `GroupGenerator`."""

    def __init__(
        self,
        env: Environment,
        tools: ToolBox,
        codec: TextCodec,
        *,
        concurrency: int = 8,
    ) -> None:
        self.env = env
        self.tools = tools
        self.codec = codec
        self.concurrency = max(1, concurrency)

    def sampling_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Stop at every closing tag and keep it in the text (the call is parsed from it)."""
        stop = [*list(params.get("stop") or []), *self.env.stop_strings()]
        return {**params, "stop": list(dict.fromkeys(stop)), "no_stop_trim": True}

    def run_group(
        self,
        generate: GroupGenerator,
        prompt_ids: list[int],
        params: Mapping[str, Any],
        seeds: list[int],
        version: int,
    ) -> list[Trajectory]:
        sampling = self.sampling_params(params)
        first = generate(prompt_ids, dict(sampling), seeds)
        if len(first) != len(seeds):
            raise RuntimeError(f"engine returned {len(first)} responses for {len(seeds)} requested")
        prompt_text = self.codec.decode(prompt_ids)

        def one(i: int) -> Trajectory:
            return self._episode(
                generate, prompt_ids, prompt_text, sampling, seeds[i], first[i], version
            )

        workers = min(self.concurrency, len(seeds))
        if workers <= 1:
            return [one(i) for i in range(len(seeds))]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="episode") as pool:
            return list(pool.map(one, range(len(seeds))))

    def _episode(
        self,
        generate: GroupGenerator,
        prompt_ids: list[int],
        prompt_text: str,
        sampling: Mapping[str, Any],
        seed: int,
        resp: Mapping[str, Any],
        version: int,
    ) -> Trajectory:
        env = self.env
        budget = int(sampling.get("max_new_tokens") or 0)
        traj = Trajectory()
        pending = prompt_text  # a call may open in the prompt (an opened call to close)
        while True:
            ids, lps, text, finish, _experts = parse_response(resp)
            traj.add_policy(ids, lps, text, token_versions(resp, len(ids), version))
            traj.finish_reason = finish
            call = env.find_call(pending + text) if finish == "stop" else None
            if call is None or env.is_final(text):
                return traj
            if traj.turns >= env.max_turns:
                traj.finish_reason = FINISH_MAX_TURNS
                return traj
            out = self.tools.run(call.tool, call.arguments)
            traj.tool_calls += 1
            traj.tool_errors += 0 if out.ok else 1
            result_ids = self.codec.encode(env.render_result(out.text))
            room = max(budget - len(traj.response_ids), 0)
            if len(result_ids) >= room:  # the budget ends inside the tool output
                traj.add_tool(result_ids[:room], self.codec.decode(result_ids[:room]))
                traj.finish_reason = "length"
                return traj
            # the text as the policy sees it (a small vocabulary may not spell every char)
            traj.add_tool(result_ids, self.codec.decode(result_ids))
            params = {**sampling, "max_new_tokens": budget - len(traj.response_ids)}
            context = [*prompt_ids, *traj.response_ids]
            (resp,) = _one(generate(context, params, [turn_seed(seed, traj.turns)]))
            pending = ""


def _one(responses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if len(responses) != 1:
        raise RuntimeError(f"engine returned {len(responses)} responses for 1 requested")
    return responses


def make_codec(tokenizer: Any) -> TextCodec:
    """The run tokenizer as a `TextCodec` (tool output is encoded without special tokens)."""

    class _Codec:
        def encode(self, text: str) -> list[int]:
            return list(tokenizer.encode(text))

        def decode(self, ids: Sequence[int]) -> str:
            return str(tokenizer.decode(list(ids)))

    return _Codec()
