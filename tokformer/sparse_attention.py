"""Attention over a list of token pairs: memory O(pairs), not O(N^2).

Dense attention scores every query against every key, so a batch of N tokens costs
``[B, H, N, N]`` scores, however few of them a mask keeps. When each token may attend to
only a few others (a graph's neighbours), listing the allowed pairs is far smaller:
:class:`SparsePattern` holds them, and :func:`sparse_attention` computes exactly what
masked dense attention computes, pair by pair:

1. gather ``q[query] . k[key]`` for every pair (plus an optional per-pair, per-head bias);
2. softmax over the pairs of each query (a segment softmax with ``scatter_reduce`` and
   ``index_add``);
3. sum ``weight * v[key]`` into each query's row.

Every step is O(P * d) for P pairs. A query without pairs (padding) gets zeros.

Why not ``torch.nn.attention.flex_attention`` with a block mask: in torch 2.14 on CPU it
runs only under ``torch.compile`` (eagerly it materialises the full score matrix), a
graph's block mask must be rebuilt for every batch, and with nodes in no particular
order the neighbours of a block of 128 queries fall in almost every key block, so
it computes nearly all N^2 scores anyway. The scatter kernel needs neither compilation
nor a node ordering.

The core knows tokens only: a pattern is built by whoever knows the structure (the graph
tokenizer's attention module), and :class:`~tokformer.transformer.Encoder` adds its
register tokens to it as global tokens (:meth:`SparsePattern.prepend_global`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor


@dataclass(frozen=True)
class SparsePattern:
    """The (query, key) token pairs that may attend, for a batch flattened to ``B * N`` tokens.

    Attributes:
        query: ``[P]`` long, flat index ``b * N + i`` of each pair's query token.
        key: ``[P]`` long, flat index ``b * N + j`` of its key token (same sample ``b``).
        mask: ``[B, N]`` bool, True for real tokens (fixes B and N; global tokens pair with these).
        bias: ``[P, H]`` additive logit bias per pair and head, or None.
    """

    query: Tensor
    key: Tensor
    mask: Tensor
    bias: Tensor | None = None

    @property
    def batch_size(self) -> int:
        return self.mask.shape[0]

    @property
    def n_tokens(self) -> int:
        return self.mask.shape[1]

    def prepend_global(self, n: int) -> SparsePattern:
        """The pattern after ``n`` tokens are put in front of every sample (an encoder's registers).

        The new tokens attend to, and are attended by, every real token and each other,
        with bias 0: what padding a dense mask at the front with "may attend" gives.
        """
        if n == 0:
            return self
        b, width = self.mask.shape
        mask = F.pad(self.mask, (n, 0), value=True)  # [B, N + n]
        shift = lambda flat: flat // width * (width + n) + flat % width + n  # noqa: E731
        real = mask.flatten().nonzero().squeeze(1)  # [R] flat indices of real tokens, new ones included
        sample = real // (width + n)
        slots = torch.arange(n, device=real.device)
        new_q = (sample[:, None] * (width + n) + slots).flatten()  # [R * n] each global token ...
        new_k = real.repeat_interleave(n)  # ... meets every real token of its sample
        is_old = real % (width + n) >= n
        back_q, back_k = new_k[is_old.repeat_interleave(n)], new_q[is_old.repeat_interleave(n)]  # old -> global
        query = torch.cat((shift(self.query), new_q, back_q))
        key = torch.cat((shift(self.key), new_k, back_k))
        bias = None
        if self.bias is not None:
            extra = self.bias.new_zeros(new_q.shape[0] + back_q.shape[0], self.bias.shape[1])
            bias = torch.cat((self.bias, extra))
        return SparsePattern(query=query, key=key, mask=mask, bias=bias)

    def to_dense(self, n_heads: int) -> Tensor:
        """``[B, H, N, N]`` additive mask: the pair's bias where a pair is listed, -inf elsewhere.

        O(N^2): for tests and small batches; the dense twin of this pattern."""
        b, n = self.mask.shape
        dense = self.mask.new_full((b * n, n, n_heads), float("-inf"), dtype=torch.float32)
        values = self.bias.float() if self.bias is not None else dense.new_zeros(self.query.shape[0], n_heads)
        dense = dense.index_put((self.query, self.key % n), values)  # [B * N, N, H]
        return rearrange(dense, "(b i) j h -> b h i j", b=b)


def sparse_attention(q: Tensor, k: Tensor, v: Tensor, pattern: SparsePattern, dropout_p: float = 0.0) -> Tensor:
    """Softmax attention restricted to ``pattern``'s pairs; equals dense attention under
    ``pattern.to_dense`` on every query that has a pair.

    Args:
        q: ``[B, H, N, Dh]`` queries.
        k, v: ``[B, Hkv, N, Dh]`` keys and values (``Hkv`` divides ``H``: grouped-query attention).
        pattern: the allowed pairs (and their biases).
        dropout_p: dropout on the attention weights.

    Returns ``[B, H, N, Dh]``; rows without pairs are 0.
    """
    b, h, n, d = q.shape
    if k.shape[1] != h:  # each key/value head serves a group of query heads
        k, v = k.repeat_interleave(h // k.shape[1], dim=1), v.repeat_interleave(h // v.shape[1], dim=1)
    flat = lambda t: rearrange(t, "b h n d -> (b n) h d")  # noqa: E731
    q, k, v = flat(q), flat(k), flat(v)  # [B * N, H, Dh]
    query, key = pattern.query, pattern.key
    logits = (q[query] * k[key]).sum(-1) * d**-0.5  # [P, H]
    if pattern.bias is not None:
        logits = logits + pattern.bias.to(logits.dtype)
    # Segment softmax. The per-query max only keeps exp() in range; it cancels in the
    # ratio, so it is taken without gradient (the result's gradient is unchanged).
    index = query[:, None].expand_as(logits)
    peak = logits.new_full((b * n, h), float("-inf")).scatter_reduce(0, index, logits.detach(), "amax")
    weights = (logits - peak[query]).exp()  # [P, H]
    total = logits.new_zeros(b * n, h).index_add(0, query, weights)  # [B * N, H]
    weights = weights / total[query]
    if dropout_p > 0.0:
        weights = F.dropout(weights, dropout_p)
    out = q.new_zeros(b * n, h, d).index_add(0, query, weights[..., None] * v[key])  # [B * N, H, Dh]
    return rearrange(out, "(b n) h d -> b h n d", b=b)
