"""Key/value caches for incremental decoding.

A decoder generating token t only needs the new token's query; the keys and values of
tokens 1..t-1 do not change, so each attention layer keeps them. Buffers are
preallocated and grown by doubling, so appending one token is O(1) amortised instead of
re-copying the whole history (what ``torch.cat`` per step would cost).
"""

from __future__ import annotations

from torch import Tensor


class KVCache:
    """Keys and values of one attention layer, ``[B, heads, T, d_head]``.

    A cross-attention layer fills its cache once, from the encoder memory, and reuses it at
    every decoding step (it projects ``context`` only while the cache is empty).
    """

    def __init__(self) -> None:
        self._k: Tensor | None = None
        self._v: Tensor | None = None
        self.length = 0

    @property
    def empty(self) -> bool:
        return self.length == 0

    @property
    def keys(self) -> Tensor:
        assert self._k is not None, "cache is empty"
        return self._k[:, :, : self.length]

    @property
    def values(self) -> Tensor:
        assert self._v is not None, "cache is empty"
        return self._v[:, :, : self.length]

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add ``[B, H, n, Dh]`` keys/values; return all cached keys/values so far."""
        n = k.shape[2]
        if self._k is None or self.length + n > self._k.shape[2]:
            self._grow(k, v, self.length + n)
        self._k[:, :, self.length : self.length + n] = k
        self._v[:, :, self.length : self.length + n] = v
        self.length += n
        return self.keys, self.values

    def _grow(self, k: Tensor, v: Tensor, needed: int) -> None:
        capacity = max(needed, 2 * (self._k.shape[2] if self._k is not None else 0), 16)
        new_k = k.new_empty(k.shape[0], k.shape[1], capacity, k.shape[3])
        new_v = v.new_empty(v.shape[0], v.shape[1], capacity, v.shape[3])
        if self._k is not None:
            new_k[:, :, : self.length] = self.keys
            new_v[:, :, : self.length] = self.values
        self._k, self._v = new_k, new_v

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (beam search: follow the surviving hypotheses)."""
        if self._k is not None:
            self._k = self._k.index_select(0, index)
            self._v = self._v.index_select(0, index)


def make_caches(n_layers: int) -> list[KVCache]:
    """One fresh cache per layer."""
    return [KVCache() for _ in range(n_layers)]


def reorder_caches(caches: list[KVCache], index: Tensor) -> None:
    for cache in caches:
        cache.reorder(index)


def cached_length(caches: list[KVCache] | None) -> int:
    """How many positions the caches already hold (0 without caches)."""
    return caches[0].length if caches else 0
