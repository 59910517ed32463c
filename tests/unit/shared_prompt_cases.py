"""Cases for ``test_engine_shared_prompt``, run in a child process with
``TRITON_INTERPRET=1`` (the split-KV kernel, the only decode attention that reads a
group's prompt from one slot, runs on the CPU only under Triton's interpreter). The same
requests run through an engine whose samples read their group's prompt from the leader's
slot and through one where each sample's slot holds its own copy; prints one JSON object
of what the test compares."""

from __future__ import annotations

import json
import sys
import tempfile
import threading
from typing import Any

import torch

from runtime.engines.embedded.engine import Engine
from runtime.engines.embedded.sampling import SamplingParams
from runtime.engines.embedded.tiny import build_tiny

GROUP = 3


def _requests() -> tuple[list[list[int]], list[SamplingParams]]:
    """Three prompts of three samples each and two lone prompts. In the first group the
    leader stops first (its prompt is handed to a running sample), in the second the leader
    and one sample stop at once, in the third the samples run to one length; temperature 1
    with per-sample seeds, so the samples differ."""
    gen = torch.Generator().manual_seed(11)
    prompts: list[list[int]] = []
    params: list[SamplingParams] = []
    max_new = [[2, 9, 7], [3, 3, 10], [8, 8, 8]]
    for g, lens in enumerate(max_new):
        prompt = torch.randint(1, 128, (5 + 4 * g,), generator=gen).tolist()
        for i, n in enumerate(lens):
            prompts.append(prompt)
            params.append(
                SamplingParams(
                    max_new_tokens=n, temperature=1.0, ignore_eos=True, sampling_seed=100 * g + i
                )
            )
    for n in (6, 4):
        prompts.append(torch.randint(1, 128, (7,), generator=gen).tolist())
        params.append(SamplingParams(max_new_tokens=n, temperature=0.0, ignore_eos=True))
    return prompts, params


def serve_once(eng: Engine, sharing: bool) -> dict[str, Any]:
    eng.im.shares_prompts = sharing
    eng.im.graph_batch_sizes = [eng.max_running]  # every step the same padded rows
    prompts, params = _requests()
    results: list[Any] = [None] * len(prompts)
    cached: dict[int, list[float]] = {}  # each finished request's K/V as it enters the tree
    done = threading.Event()
    index: dict[int, int] = {}
    original = eng._cache_sequence

    def spy(req: Any, length: int | None = None) -> None:
        if length is None and req.slot >= 0:
            kv = eng._read_kv(req, 0, req.cached_len)
            cached[index[id(req)]] = [float(t.double().sum()) for t in kv]
        original(req, length)

    eng._cache_sequence = spy  # type: ignore[method-assign]
    handed: list[int] = []  # shared prompts copied to a new holder's slot
    copy_kv = eng.im.copy_kv

    def count_copy(srcs: list[int], dsts: list[int], length: int) -> None:
        handed.append(len(srcs))
        copy_kv(srcs, dsts, length)

    eng.im.copy_kv = count_copy  # type: ignore[method-assign]

    def cb(i: int) -> Any:
        def f(res: dict) -> None:
            results[i] = res
            if all(r is not None for r in results):
                done.set()

        return f

    for i, (p, sp) in enumerate(zip(prompts, params, strict=True)):
        req = eng.make_request(p, sp, cb(i), return_logprob=True)
        index[id(req)] = i
        eng.submit(req)
    eng.start()
    try:
        assert done.wait(300), "engine did not finish"
    finally:
        eng.stop()
    return {
        "tokens": [r["output_ids"] for r in results],
        "logprobs": [[x[0] for x in r["meta_info"]["output_token_logprobs"]] for r in results],
        "cached": [cached.get(i) for i in range(len(prompts))],
        "shared_rows": eng.stats["num_shared_prompt_rows"],
        "handed_over": sum(handed),
        "recurrent": eng.im.recurrent is not None,
        "errors": [
            r["meta_info"]["finish_reason"]
            for r in results
            if r["meta_info"]["finish_reason"]["type"] == "abort"
        ],
    }


def both_ways(make: Any, overlap: bool = True) -> dict[str, Any]:
    """The requests through an engine sharing prompts and one copying them. Seven slots
    for eleven requests: the third group is admitted in two parts."""
    out = {}
    for sharing in (True, False):
        eng = Engine(
            make(),
            model_path="test",
            max_running_requests=7,
            context_length=40,
            decode_attention="triton",
            fused_sampling=True,
            overlap_schedule=overlap,
        )
        out["shared" if sharing else "copied"] = serve_once(eng, sharing)
    return out


def dense(overlap: bool) -> dict[str, Any]:
    return both_ways(lambda: build_tiny("dense", seed=4, n_layers=2), overlap)


def hybrid() -> dict[str, Any]:
    """GatedDeltaNet and attention layers: a sample's recurrent state is still copied."""
    from test_hf_families import write_hf_checkpoint

    from runtime.models import load_model
    from runtime.models.gdn_cpu import install_transformers_cpu_fallbacks

    install_transformers_cpu_fallbacks()
    with tempfile.TemporaryDirectory() as tmp:
        write_hf_checkpoint(tmp, "olmo_hybrid")
        return both_ways(lambda: load_model(tmp))


def main() -> None:
    result: dict[str, Any] = {"dense": dense(True), "dense_plain": dense(False)}
    try:
        import transformers.models.olmo_hybrid  # noqa: F401
    except ImportError:
        result["hybrid"] = None
    else:
        result["hybrid"] = hybrid()
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
