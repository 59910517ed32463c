"""A radix tree over token ids holding the K/V of finished and running sequences.

The embedded engine's KV cache is one contiguous row per running sequence (a slot), not a
pool paged per token, so the tree keeps its own copies: each node owns the K/V of its edge's
tokens (one ``(rows, heads, tokens, head_dim)`` tensor: every attention layer's K and V). A new
request's longest cached prefix is copied into its slot and only the rest is prefilled.

As SGLang's RadixAttention: longest-prefix match (splitting an edge where a match ends
inside it), insertion of a sequence's new suffix, LRU eviction of unlocked leaves when the
token budget is full, reference locks on the path a request uses, and a flush that drops
everything (weight updates: K/V computed under old weights must never be reused).

A full tree evicts on nearly every insert, so eviction must not walk the tree: leaves wait in
a heap by last access, entered when they are touched or become leaves, and an entry that no
longer describes its node (touched since, locked, given a child, evicted) is skipped when it
comes up. An engine serving fresh prompts against a full tree spent about a millisecond per
request walking hundreds of nodes.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

# the K/V of a run of tokens: tensors with the tokens on dim -2 (the engine keeps one
# ``(rows, heads, tokens, head_dim)`` tensor holding every attention layer's K and V)
KV = list[torch.Tensor]


def kv_slice(kv: KV, start: int, end: int) -> KV:
    """A copy (not a view): an evicted part must free its memory, not pin its neighbour's."""
    return [t[..., start:end, :].clone() for t in kv]


@dataclass(eq=False)
class RadixNode:
    key: list[int]
    kv: KV
    parent: RadixNode | None
    children: dict[int, RadixNode] = field(default_factory=dict)
    lock_ref: int = 0
    last_access: int = 0
    generation: int = 0


@dataclass
class PrefixMatch:
    """The longest cached prefix: its length, its K/V segments (root to leaf order), and
    the node it ends at (lock it while the prefix is in use)."""

    length: int
    segments: list[KV]
    node: RadixNode


class RadixCache:
    """Token-id radix tree with a token budget; only the scheduler thread touches it."""

    def __init__(self, max_tokens: int):
        self.max_tokens = max(0, int(max_tokens))
        self.generation = 0
        self._clock = itertools.count(1)
        self.reset()

    def reset(self) -> None:
        """Drop every cached sequence (weight update, ``/flush_cache``). Locks held on the
        old tree are released harmlessly (their nodes belong to an older generation)."""
        self.generation += 1
        self.root = RadixNode(key=[], kv=[], parent=None, generation=self.generation)
        self.root.lock_ref = 1  # never evicted
        self.total_tokens = 0
        self.evictable_tokens = 0
        self.num_nodes = 1
        # (last access, tie-break, node): eviction candidates, some of them stale
        self._leaves: list[tuple[int, int, RadixNode]] = []
        self._ties = itertools.count()

    def _offer(self, node: RadixNode) -> None:
        """Enter ``node`` as an eviction candidate at its current last access."""
        if node.parent is not None and not node.children:
            heapq.heappush(self._leaves, (node.last_access, next(self._ties), node))
            if len(self._leaves) > 4 * self.num_nodes + 64:  # drop the stale entries
                self._leaves = [
                    (n.last_access, next(self._ties), n)
                    for n in self._nodes()
                    if _evictable_leaf(n)
                ]
                heapq.heapify(self._leaves)

    # ---- match / insert ------------------------------------------------------------------

    def match(self, tokens: list[int]) -> PrefixMatch:
        """The longest cached prefix of ``tokens``; an edge matched part-way is split so the
        returned node ends exactly at the match."""
        node, pos, segments = self.root, 0, []
        now = next(self._clock)
        node.last_access = now
        while pos < len(tokens):
            child = node.children.get(tokens[pos])
            if child is None:
                break
            n = _common(child.key, tokens, pos)
            if n < len(child.key):
                child = self._split(child, n)
            child.last_access = now
            self._offer(child)
            segments.append(child.kv)
            pos += n
            node = child
        return PrefixMatch(pos, segments, node)

    def insert(self, tokens: list[int], read_kv: Callable[[int, int], KV]) -> RadixNode:
        """Cache ``tokens``; ``read_kv(start, end)`` copies out the K/V of ``tokens[start:end]``
        for the part not cached yet. Evicts LRU leaves for room; inserts only the part that
        fits. Returns the deepest node holding the inserted tokens (or the matched one)."""
        found = self.match(tokens)
        node, pos = found.node, found.length
        if pos >= len(tokens):
            return node
        room = self.max_tokens - self.total_tokens
        need = len(tokens) - pos
        if need > room:
            self.lock(node)  # the path just matched must survive the eviction
            self.evict(need - room)
            self.unlock(node)
            room = self.max_tokens - self.total_tokens
        end = pos + min(need, room)
        if end <= pos:
            return node
        child = RadixNode(
            key=list(tokens[pos:end]),
            kv=read_kv(pos, end),
            parent=node,
            last_access=next(self._clock),
            generation=self.generation,
        )
        node.children[tokens[pos]] = child
        self.num_nodes += 1
        self.total_tokens += end - pos
        self.evictable_tokens += end - pos
        self._offer(child)
        return child

    def _split(self, child: RadixNode, n: int) -> RadixNode:
        """Cut ``child``'s edge after ``n`` tokens; return the new upper node."""
        parent = child.parent
        assert parent is not None
        upper = RadixNode(
            key=child.key[:n],
            kv=kv_slice(child.kv, 0, n),
            parent=parent,
            lock_ref=child.lock_ref,
            last_access=child.last_access,
            generation=child.generation,
        )
        parent.children[child.key[0]] = upper
        self.num_nodes += 1
        child.key = child.key[n:]
        child.kv = kv_slice(child.kv, n, n + len(child.key))
        child.parent = upper
        upper.children[child.key[0]] = child
        return upper

    # ---- locks / eviction ----------------------------------------------------------------

    def lock(self, node: RadixNode) -> None:
        """Pin ``node`` and its ancestors (a running request uses their K/V)."""
        if node.generation != self.generation:
            return
        while node is not self.root and node is not None:
            if node.lock_ref == 0:
                self.evictable_tokens -= len(node.key)
            node.lock_ref += 1
            node = node.parent  # type: ignore[assignment]

    def unlock(self, node: RadixNode) -> None:
        if node.generation != self.generation:
            return  # flushed since: nothing to release
        while node is not self.root and node is not None:
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self.evictable_tokens += len(node.key)
                self._offer(node)
            node = node.parent  # type: ignore[assignment]

    def evict(self, num_tokens: int) -> int:
        """Free at least ``num_tokens`` tokens from unlocked leaves, least recently used
        first (a parent left childless becomes a candidate); returns the tokens freed."""
        freed = 0
        while freed < num_tokens and self._leaves:
            stamp, _, leaf = heapq.heappop(self._leaves)
            # stale: touched, locked, grown or evicted (no parent) since it was entered; a
            # reset empties the heap, so every entry is of this tree
            if stamp != leaf.last_access or not _evictable_leaf(leaf):
                continue
            parent = leaf.parent
            assert parent is not None
            del parent.children[leaf.key[0]]
            leaf.parent = None
            self.num_nodes -= 1
            freed += len(leaf.key)
            self.total_tokens -= len(leaf.key)
            self.evictable_tokens -= len(leaf.key)
            if parent is not self.root and _evictable_leaf(parent):
                self._offer(parent)
        return freed

    def _nodes(self) -> list[RadixNode]:
        out, stack = [], [self.root]
        while stack:
            n = stack.pop()
            out.append(n)
            stack.extend(n.children.values())
        return out


def _evictable_leaf(node: RadixNode) -> bool:
    return node.parent is not None and not node.children and node.lock_ref == 0


def _common(key: list[int], tokens: list[int], pos: int) -> int:
    n = min(len(key), len(tokens) - pos)
    i = 0
    while i < n and key[i] == tokens[pos + i]:
        i += 1
    return i
