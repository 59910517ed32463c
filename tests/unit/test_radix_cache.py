"""The embedded engine's radix prefix cache: the tree itself, and the engine's outputs with
the cache on equal to those with it off (multi-turn extension, partial prefixes, eviction
under a tiny pool, concurrent requests, after a weight update and a flush)."""

from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("olmo_core")

from test_engine_scheduler import _run  # noqa: E402

from runtime.engines.embedded.engine import Engine  # noqa: E402
from runtime.engines.embedded.radix import RadixCache  # noqa: E402
from runtime.engines.embedded.sampling import SamplingParams  # noqa: E402
from runtime.engines.embedded.tiny import build_tiny  # noqa: E402

GREEDY = SamplingParams(max_new_tokens=5, temperature=0.0)


@pytest.fixture(scope="module")
def loaded():
    return build_tiny("dense", seed=3)


def _kv_of(tokens: list[int]):
    """A fake K/V (one tensor, tokens on dim -2) whose values are the tokens themselves."""
    return lambda a, b: [torch.tensor(tokens[a:b], dtype=torch.float32).view(1, -1, 1)]


def _joined(match) -> list[int]:
    if not match.segments:
        return []
    return [int(x) for x in torch.cat([s[0] for s in match.segments], dim=1).flatten()]


# ---- the tree ------------------------------------------------------------------------------


def test_longest_prefix_match_splits_an_edge_and_returns_its_kv() -> None:
    tree = RadixCache(100)
    a = [1, 2, 3, 4, 5, 6]
    tree.insert(a, _kv_of(a))
    found = tree.match([1, 2, 3, 9])
    assert found.length == 3 and _joined(found) == [1, 2, 3]
    b = [1, 2, 3, 7, 8]
    tree.insert(b, _kv_of(b))
    assert tree.total_tokens == 8  # 1 2 3 shared, 4 5 6 and 7 8 below
    assert _joined(tree.match(b)) == b and _joined(tree.match(a + [0])) == a
    assert tree.match([2, 1]).length == 0


def test_eviction_frees_least_recently_used_unlocked_leaves() -> None:
    tree = RadixCache(10)
    old, new = [1, 2, 3, 4], [5, 6, 7, 8]
    tree.insert(old, _kv_of(old))
    pinned = tree.insert(new, _kv_of(new))
    tree.lock(pinned)
    tree.match(old)  # old is now the most recent, but new is locked
    third = [9, 10, 11, 12]
    tree.insert(third, _kv_of(third))  # needs 2 more tokens: only old can go
    assert tree.match(old).length == 0 and tree.match(new).length == 4
    assert tree.match(third).length == 4 and tree.total_tokens == 8
    tree.unlock(pinned)
    assert tree.evictable_tokens == 8
    assert tree.evict(1) == 4 and tree.total_tokens == 4


class _ScanningTree(RadixCache):
    """The reference: eviction by walking the whole tree each time (the plain algorithm)."""

    def evict(self, num_tokens: int) -> int:
        import heapq

        from runtime.engines.embedded.radix import _evictable_leaf

        leaves = [(n.last_access, id(n), n) for n in self._nodes() if _evictable_leaf(n)]
        heapq.heapify(leaves)
        freed = 0
        while freed < num_tokens and leaves:
            _, _, leaf = heapq.heappop(leaves)
            parent = leaf.parent
            assert parent is not None
            del parent.children[leaf.key[0]]
            freed += len(leaf.key)
            self.total_tokens -= len(leaf.key)
            self.evictable_tokens -= len(leaf.key)
            if parent is not self.root and _evictable_leaf(parent):
                heapq.heappush(leaves, (parent.last_access, id(parent), parent))
        return freed


def _contents(tree: RadixCache) -> set[tuple[int, ...]]:
    """Every cached root-to-node token path."""
    out, stack = set(), [(tree.root, ())]
    while stack:
        node, path = stack.pop()
        path = path + tuple(node.key)
        out.add(path)
        stack.extend((c, path) for c in node.children.values())
    return out


def test_heap_eviction_keeps_exactly_what_walking_the_tree_keeps() -> None:
    """Random inserts, matches, locks and unlocks over a small budget and a small alphabet
    (shared prefixes, splits, evictions on most inserts): the tree that evicts from its heap
    of leaves holds the same sequences as one that walks every node to evict."""
    import random

    rng = random.Random(7)
    fast, slow = RadixCache(60), _ScanningTree(60)
    held: list[tuple[object, object]] = []
    for _ in range(3000):
        op = rng.random()
        if op < 0.55:
            seq = [rng.randrange(4) for _ in range(rng.randrange(1, 14))]
            nodes = (fast.insert(seq, _kv_of(seq)), slow.insert(seq, _kv_of(seq)))
            if rng.random() < 0.3:
                fast.lock(nodes[0])
                slow.lock(nodes[1])
                held.append(nodes)
        elif op < 0.8:
            seq = [rng.randrange(4) for _ in range(rng.randrange(1, 14))]
            assert fast.match(seq).length == slow.match(seq).length
        elif held:
            a, b = held.pop(rng.randrange(len(held)))
            fast.unlock(a)
            slow.unlock(b)
        if rng.random() < 0.01:
            fast.reset()
            slow.reset()
            held.clear()
        assert _contents(fast) == _contents(slow)
        assert (fast.total_tokens, fast.evictable_tokens) == (
            slow.total_tokens,
            slow.evictable_tokens,
        )
    assert len(fast._leaves) <= 4 * fast.num_nodes + 65  # stale entries stay bounded


def test_a_full_tree_evicts_without_walking_its_nodes(monkeypatch) -> None:
    """Thousands of inserts into a full tree: the tree is walked only to drop stale heap
    entries now and then, never once per eviction."""
    tree = RadixCache(2000)
    walks = []
    real = tree._nodes
    monkeypatch.setattr(tree, "_nodes", lambda: walks.append(1) or real())
    for i in range(3000):
        seq = [i, *range(19)]
        tree.insert(seq, _kv_of(seq))
    assert tree.total_tokens == 2000
    assert len(walks) < 30


def test_an_insert_larger_than_the_room_keeps_the_part_that_fits() -> None:
    tree = RadixCache(3)
    seq = [4, 5, 6, 7, 8]
    tree.insert(seq, _kv_of(seq))
    assert tree.total_tokens == 3 and _joined(tree.match(seq)) == [4, 5, 6]


def test_reset_drops_everything_and_stale_locks_are_harmless() -> None:
    tree = RadixCache(100)
    seq = [1, 2, 3]
    node = tree.insert(seq, _kv_of(seq))
    tree.lock(node)
    tree.reset()
    assert tree.total_tokens == 0 and tree.match(seq).length == 0
    tree.unlock(node)  # a request that started before the flush finishes
    assert tree.evictable_tokens == 0


# ---- the engine: cache on == cache off ------------------------------------------------------


def _engine(loaded, radix: bool, **kw) -> Engine:
    kw.setdefault("max_running_requests", 4)
    eng = Engine(loaded, model_path="t", context_length=64, radix_cache=radix, **kw)
    eng.start()
    return eng


def _turns(eng: Engine, turns: list[list[list[int]]]) -> list[dict]:
    """Each turn's prompts submitted together, turn after turn; all results in order."""
    out = []
    for prompts in turns:
        out += _run(eng, prompts, GREEDY, return_logprob=True)
    return out


def _same(on: list[dict], off: list[dict]) -> None:
    for a, b in zip(on, off, strict=True):
        assert a["output_ids"] == b["output_ids"]
        lp_a = [x[0] for x in a["meta_info"]["output_token_logprobs"]]
        lp_b = [x[0] for x in b["meta_info"]["output_token_logprobs"]]
        assert max(abs(x - y) for x, y in zip(lp_a, lp_b, strict=True)) < 1e-4


def _both(loaded, turns, **kw) -> tuple[list[dict], list[dict], Engine]:
    res = {}
    for radix in (True, False):
        eng = _engine(loaded, radix, **kw)
        try:
            res[radix] = _turns(eng, turns)
        finally:
            eng.stop()
        if radix:
            on_engine = eng
    _same(res[True], res[False])
    return res[True], res[False], on_engine


def test_a_multi_turn_episode_reuses_the_previous_turn(loaded) -> None:
    """Each turn re-sends the last sequence plus a tool output: only the new part is
    prefilled (sliding-window and full-attention layers), tokens unchanged."""
    first = [7, 3, 9, 1, 4, 4, 2, 8, 6, 5, 3, 1, 9, 2]
    eng = _engine(loaded, True)
    try:
        r1 = _run(eng, [first], GREEDY)[0]
        second = first + r1["output_ids"] + [11, 12, 13]
        r2 = _run(eng, [second], GREEDY)[0]
        third = second + r2["output_ids"] + [14, 15]
        r3 = _run(eng, [third], GREEDY)[0]
    finally:
        eng.stop()
    # every token of the previous sequence with K/V (all but the last sampled) is reused
    assert r2["meta_info"]["cached_tokens"] == len(first) + len(r1["output_ids"]) - 1
    assert r3["meta_info"]["cached_tokens"] == len(second) + len(r2["output_ids"]) - 1
    off = _engine(loaded, False)
    try:
        ref = [_run(off, [p], GREEDY, return_logprob=True)[0] for p in (first, second, third)]
    finally:
        off.stop()
    assert [r["output_ids"] for r in (r1, r2, r3)] == [r["output_ids"] for r in ref]
    assert all(r["meta_info"]["cached_tokens"] == 0 for r in ref)


def test_partial_prefixes_and_concurrent_requests_match_the_uncached_engine(loaded) -> None:
    """Few-shot prompts sharing a long prefix, diverging at different depths, batched
    together and through 2 slots (later ones admitted as earlier ones finish)."""
    shared = [(5 * i + 2) % 60 + 1 for i in range(24)]
    turns = [
        [shared + [1, 2]],
        [shared + [3, 4, 5], shared[:10] + [9, 9], shared + [1, 2, 7], shared[:20]],
        [shared + [6] * k for k in range(1, 7)],
    ]
    on, _, eng = _both(loaded, turns, max_running_requests=2)
    cached = [r["meta_info"]["cached_tokens"] for r in on]
    assert cached[0] == 0
    assert cached[1] >= len(shared) and cached[3] >= len(shared) + 2  # past the first answer
    assert cached[2] == 10 and cached[4] == 19  # a match ending inside an edge
    assert all(c >= len(shared) for c in cached[5:])
    assert eng.stats["num_cached_prompt_tokens"] == sum(cached)


def test_eviction_under_a_tiny_pool_keeps_outputs_exact(loaded) -> None:
    """A 128-token pool (two 64-token slots) and many distinct long prompts: the tree evicts
    LRU leaves, never exceeds the pool, and still serves the prefixes it kept."""
    prompts = [[(7 * i + j) % 50 + 3 for j in range(30)] for i in range(6)]
    turns = [[p] for p in prompts] + [[prompts[-1] + [1]], [prompts[0] + [2]]]
    on, _, eng = _both(loaded, turns, max_total_tokens=128)
    assert eng.prefix is not None and eng.prefix.max_tokens == 128
    assert eng.prefix_cache_tokens <= 128
    assert on[-2]["meta_info"]["cached_tokens"] >= 30  # the latest prompt survived
    assert on[-1]["meta_info"]["cached_tokens"] == 0  # the first was evicted


def test_a_weight_update_and_a_flush_invalidate_the_cache(loaded) -> None:
    """K/V computed under old weights is never reused: after an update the cached engine
    answers as an uncached one loaded with the new weights."""
    prompt = [4, 8, 15, 16, 23, 42, 7, 7, 1]
    gen = torch.Generator().manual_seed(1)
    new = [(n, p.detach() + torch.randn(p.shape, generator=gen) * 0.05)
           for n, p in loaded.model.state_dict().items()]  # fmt: skip
    fresh = build_tiny("dense", seed=3)
    eng = _engine(fresh, True)
    try:
        _run(eng, [prompt], GREEDY)
        assert _run(eng, [prompt + [3]], GREEDY)[0]["meta_info"]["cached_tokens"] > 0
        assert eng.update_weights_from_tensors(new, version="1")["success"]
        assert eng.prefix_cache_tokens == 0
        after = _run(eng, [prompt + [3]], GREEDY, return_logprob=True)[0]
        assert after["meta_info"]["cached_tokens"] == 0
        assert eng.prefix_cache_tokens > 0
        assert eng.flush_cache() and eng.prefix_cache_tokens == 0
        assert eng.stats["num_cache_flushes"] == 2
    finally:
        eng.stop()
    ref_model = build_tiny("dense", seed=3)
    ref_model.model.load_state_dict(dict(new))
    off = _engine(ref_model, False)
    try:
        ref = _run(off, [prompt + [3]], GREEDY, return_logprob=True)[0]
    finally:
        off.stop()
    _same([after], [ref])


def test_hybrid_models_keep_identical_prompt_sharing_only(tmp_path, caplog) -> None:
    """A recurrent state cannot resume from a cached prefix: no tree, exact sharing still."""
    pytest.importorskip("transformers.models.olmo_hybrid")
    from test_hf_families import write_hf_checkpoint

    from runtime.models import load_model
    from runtime.models.gdn_cpu import install_transformers_cpu_fallbacks

    install_transformers_cpu_fallbacks()
    write_hf_checkpoint(tmp_path, "olmo_hybrid")
    with caplog.at_level(logging.INFO, logger="runtime.engines.embedded.engine"):
        eng = _engine(load_model(str(tmp_path)), True)
    try:
        assert eng.prefix is None
        assert "cannot resume from a cached prefix" in caplog.text
        prompt = [3, 1, 4, 1, 5, 9, 2, 6]
        first = _run(eng, [prompt, prompt], GREEDY)
        again = _run(eng, [prompt + [7]], GREEDY)[0]
    finally:
        eng.stop()
    assert [r["meta_info"]["cached_tokens"] for r in first] == [0, len(prompt)]
    assert again["meta_info"]["cached_tokens"] == 0


def test_the_http_api_reports_cached_tokens_and_flushes(loaded) -> None:
    """``meta_info.cached_tokens`` per request, hits in ``/get_server_info``, and
    ``/flush_cache`` empties the tree (SGLang's shapes)."""
    httpx = pytest.importorskip("httpx")
    from runtime.engines.embedded.inprocess import InProcessServer

    def generate(url: str, ids: list[int]) -> dict:
        body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 3, "temperature": 0}}
        r = httpx.post(url + "/generate", json=body, timeout=30)
        assert r.status_code == 200
        return r.json()["meta_info"]

    prompt = list(range(5, 25))
    with InProcessServer(loaded, max_running_requests=2, context_length=64) as srv:
        assert generate(srv.url, prompt)["cached_tokens"] == 0
        assert generate(srv.url, prompt + [1])["cached_tokens"] >= len(prompt)
        info = httpx.get(srv.url + "/get_server_info").json()
        assert info["radix_cache"] is True and info["radix_cache_tokens"] > 0
        assert info["cache_hit_rate"] == pytest.approx(
            info["num_cached_prompt_tokens"] / info["num_prompt_tokens"]
        )
        assert info["cache_hit_rate"] > 0.4
        assert httpx.post(srv.url + "/flush_cache").status_code == 200
        assert httpx.get(srv.url + "/get_server_info").json()["radix_cache_tokens"] == 0
        assert generate(srv.url, prompt + [1])["cached_tokens"] == 0


def test_prompt_logprobs_and_routed_experts_prefill_the_whole_prompt() -> None:
    """Scoring (prompt log-probs) and router replay (routed experts) need every prompt
    position: such requests skip the cached prefix and answer as without the cache."""
    moe = build_tiny("moe", seed=4, d_model=32, n_layers=1)
    prompt = [9, 8, 7, 6, 5, 4, 3, 2, 1, 12]
    asks = dict(return_logprob=True, logprob_start_len=0, return_routed_experts=True)
    res = {}
    for radix in (True, False):
        eng = _engine(moe, radix, max_running_requests=2)
        try:
            _run(eng, [prompt], GREEDY)
            res[radix] = _run(eng, [prompt + [5], prompt + [5]], GREEDY, **asks)
        finally:
            eng.stop()
    for a, b in zip(res[True], res[False], strict=True):
        assert a["output_ids"] == b["output_ids"]
        assert a["meta_info"]["routed_experts"] == b["meta_info"]["routed_experts"]
        lp_a = [x[0] for x in a["meta_info"]["input_token_logprobs"][1:]]
        lp_b = [x[0] for x in b["meta_info"]["input_token_logprobs"][1:]]
        assert max(abs(x - y) for x, y in zip(lp_a, lp_b, strict=True)) < 1e-4
    assert [r["meta_info"]["cached_tokens"] for r in res[True]] == [0, len(prompt) + 1]
