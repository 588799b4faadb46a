"""KV cache: amortised growth, long first appends, reordering, lengths (mutation testing,
benchmarks/results/mutation.md)."""

from __future__ import annotations

import torch

from tokformer.kv_cache import KVCache, cached_length, make_caches, reorder_caches


def randint(low: int, high: int) -> int:
    """A random int in ``[low, high]``, from torch's generator (seeded per test by conftest)."""
    return int(torch.randint(low, high + 1, ()))


def kv(b: int, n: int, heads: int = 2, d_head: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(b, heads, n, d_head), torch.randn(b, heads, n, d_head)


def test_appending_one_token_at_a_time_reallocates_logarithmically_often() -> None:
    """The module's promise: buffers grow by doubling, so n appends cost O(n), not O(n^2) copies."""
    cache, steps, reallocations, buffer = KVCache(), randint(150, 300), 0, None
    for _ in range(steps):
        cache.append(*kv(1, 1))
        reallocations += cache.keys.data_ptr() != buffer  # keys is a view of the buffer: it moved
        buffer = cache.keys.data_ptr()
    assert reallocations <= 2 * steps.bit_length(), f"{reallocations} reallocations for {steps} one-token appends"


def test_a_first_append_longer_than_the_initial_capacity_is_kept_whole() -> None:
    cache = KVCache()
    n, more = randint(17, 80), randint(1, 40)
    k, v = kv(2, n)
    k2, v2 = kv(2, more)
    keys, values = cache.append(k, v)
    torch.testing.assert_close(keys, k)
    keys, values = cache.append(k2, v2)
    torch.testing.assert_close(keys, torch.cat((k, k2), dim=2))
    torch.testing.assert_close(values, torch.cat((v, v2), dim=2))
    assert cache.length == n + more


def test_reorder_caches_reorders_every_layer() -> None:
    caches = make_caches(randint(1, 3))
    b = randint(2, 5)
    filled = [kv(b, randint(1, 6)) for _ in caches]
    for cache, (k, v) in zip(caches, filled, strict=True):
        cache.append(k, v)
    index = torch.randint(0, b, (b,))
    reorder_caches(caches, index)
    for cache, (k, v) in zip(caches, filled, strict=True):
        torch.testing.assert_close(cache.keys, k[index])
        torch.testing.assert_close(cache.values, v[index])


def test_cached_length_of_a_one_layer_model() -> None:
    caches = make_caches(1)
    n = randint(1, 20)
    caches[0].append(*kv(1, n))
    assert cached_length(caches) == n
    assert cached_length(None) == 0 and cached_length([]) == 0
