"""Applying ranked merges to one pre-token: the inner step of BPE encoding.

Semantics are Hugging Face's (``Word::merge_all``): repeatedly merge the adjacent pair
with the lowest rank, the leftmost one on ties, until no adjacent pair has a merge.
Two implementations give the same result:

* :func:`merge_short` rescans the piece after each merge, O(n^2) but with tiny
  constants: the right choice for ordinary words of a few bytes;
* :func:`merge_long` keeps candidate pairs in a heap over a linked list of symbols,
  O(n log n), so a pathological piece (100,000 identical characters form one GPT-2
  pre-token) takes well under a second instead of hours.
"""

from __future__ import annotations

import heapq

# (left id, right id) -> (rank, id of the merged token)
Ranks = dict[tuple[int, int], tuple[int, int]]

LONG_PIECE = 48  # symbols; above this the heap path wins
_NO_MERGE = (float("inf"), -1)  # the rank entry of a pair without a merge: sorts after every real one


def merge_piece(ids: list[int], ranks: Ranks) -> list[int]:
    """Merge a piece's byte ids (mutated) into its BPE token ids."""
    return merge_short(ids, ranks) if len(ids) <= LONG_PIECE else merge_long(ids, ranks)


def merge_short(ids: list[int], ranks: Ranks) -> list[int]:
    """Quadratic merge: find the best pair, merge it, repeat.

    The ranks of adjacent pairs live in a list beside the ids, so each step is a
    ``min`` and an ``index`` in C plus two lookups for the merged token's new neighbours,
    instead of a Python loop over every pair. Equal (rank, id) entries are the same
    pair, and ``index`` finds the leftmost.
    """
    get = ranks.get
    pairs = [get(pair, _NO_MERGE) for pair in zip(ids, ids[1:], strict=False)]
    while pairs:
        best = min(pairs)
        if best is _NO_MERGE:
            break
        at = pairs.index(best)
        ids[at : at + 2] = [best[1]]
        del pairs[at]
        if at:
            pairs[at - 1] = get((ids[at - 1], ids[at]), _NO_MERGE)
        if at < len(pairs):
            pairs[at] = get((ids[at], ids[at + 1]), _NO_MERGE)
    return ids


def merge_long(ids: list[int], ranks: Ranks) -> list[int]:
    """Heap merge over a doubly linked list; stale heap entries are skipped when popped."""
    n = len(ids)
    if n < 2:
        return list(ids)
    value = list(ids)
    nxt = list(range(1, n + 1))
    nxt[-1] = -1
    prev = list(range(-1, n - 1))
    alive = [True] * n
    get = ranks.get
    heap = []  # (rank, left position, merged id)
    for i in range(n - 1):
        found = get((value[i], value[i + 1]))
        if found is not None:
            heap.append((found[0], i, found[1]))
    heapq.heapify(heap)
    while heap:
        rank, left, new_id = heapq.heappop(heap)
        right = nxt[left]
        if not alive[left] or right < 0 or get((value[left], value[right])) != (rank, new_id):
            continue
        value[left] = new_id
        alive[right] = False
        after = nxt[right]
        nxt[left] = after
        if after >= 0:
            prev[after] = left
            found = get((new_id, value[after]))
            if found is not None:
                heapq.heappush(heap, (found[0], left, found[1]))
        before = prev[left]
        if before >= 0:
            found = get((value[before], new_id))
            if found is not None:
                heapq.heappush(heap, (found[0], before, found[1]))
    out = []
    i = 0
    while i >= 0:
        out.append(value[i])
        i = nxt[i]
    return out
