"""merge_long against merge_short on random pieces and merge tables: the heap path's bookkeeping (dead symbols,
list ends, stale heap entries) must give the quadratic path's merges (mutation testing,
benchmarks/results/mutation.md)."""

from __future__ import annotations

import random

import pytest

from tokformer.tokenizers.bpe_merge import merge_long, merge_short


def random_table(rng: random.Random, alphabet: int, n_merges: int) -> dict[tuple[int, int], tuple[int, int]]:
    """Merges over a small alphabet, later merges building on earlier ones (as trained BPE does)."""
    ranks: dict[tuple[int, int], tuple[int, int]] = {}
    tokens = list(range(alphabet))
    while len(ranks) < n_merges:
        pair = (rng.choice(tokens), rng.choice(tokens))
        if pair not in ranks:
            ranks[pair] = (len(ranks), alphabet + len(ranks))
            tokens.append(alphabet + len(ranks) - 1)
    return ranks


@pytest.mark.parametrize("seed", range(20))
def test_the_heap_path_merges_like_the_quadratic_path(seed: int) -> None:
    rng = random.Random(seed)
    ranks = random_table(rng, alphabet=3, n_merges=12)
    for _ in range(25):
        ids = [rng.randrange(3) for _ in range(rng.randrange(2, 80))]
        assert merge_long(list(ids), ranks) == merge_short(list(ids), ranks), ids
