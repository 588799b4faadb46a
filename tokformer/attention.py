"""Multi-head attention on :func:`torch.nn.functional.scaled_dot_product_attention`.

Self-attention projects queries, keys and values with one fused ``qkv`` linear layer
(one matmul instead of three); cross-attention projects queries from the decoder (``q``)
and keys/values from the encoder memory with one fused ``kv`` layer. Parameter names
follow timm's ``Attention`` (``qkv``, ``proj``, ``q_norm``, ``k_norm``) so weights move
between the two by name.

Grouped-query attention: with ``n_kv_heads < n_heads`` the projection makes fewer key and
value heads, each shared by a group of query heads; a KV cache then stores only those.
Rotary position embeddings, when given, rotate queries and keys after the projection and
before the cache, so cached keys are stored already rotated.
"""

from __future__ import annotations

import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from tokformer.kv_cache import KVCache
from tokformer.layers import make_norm
from tokformer.masks import causal_mask, combine_masks, rows_with_keys
from tokformer.rotary import Rope, apply_rotary
from tokformer.sparse_attention import SparsePattern, sparse_attention


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention over ``n_heads`` heads of ``d_model // n_heads`` dims.

    Args:
        d_model: token width.
        n_heads: number of heads; must divide ``d_model``.
        dropout: dropout on the attention weights.
        proj_dropout: dropout on the output projection (a residual-branch dropout).
        bias: whether the q/k/v projections have biases.
        proj_bias: whether the output projection has one (None: ``bias``).
        cross: cross-attention (queries from ``x``, keys/values from ``context``).
        n_kv_heads: key/value heads (grouped-query attention); None: ``n_heads``.
        qk_norm: ``layer`` or ``rms`` to normalise each head's queries and keys; None: off.
        norm_eps: epsilon of those norms.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        dropout: float = 0.0,
        proj_dropout: float = 0.0,
        bias: bool = True,
        proj_bias: bool | None = None,
        cross: bool = False,
        n_kv_heads: int | None = None,
        qk_norm: str | None = None,
        norm_eps: float = 1e-6,
    ) -> None:
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if n_heads % n_kv_heads != 0:
            raise ValueError(f"n_kv_heads={n_kv_heads} does not divide n_heads={n_heads}")
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.d_head = d_model // n_heads
        self.cross = cross
        self.dropout = dropout
        kv_width = n_kv_heads * self.d_head
        if cross:
            self.q = nn.Linear(d_model, d_model, bias=bias)
            self.kv = nn.Linear(d_model, 2 * kv_width, bias=bias)
        else:
            self.qkv = nn.Linear(d_model, d_model + 2 * kv_width, bias=bias)
        self.q_norm = make_norm(qk_norm, self.d_head, norm_eps) if qk_norm else nn.Identity()
        self.k_norm = make_norm(qk_norm, self.d_head, norm_eps) if qk_norm else nn.Identity()
        self.proj = nn.Linear(d_model, d_model, bias=bias if proj_bias is None else proj_bias)
        self.proj_drop = nn.Dropout(proj_dropout)

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        *,
        attn_mask: Tensor | SparsePattern | None = None,
        is_causal: bool = False,
        cache: KVCache | None = None,
        rope: Rope | None = None,
    ) -> Tensor:
        """Attend from ``x`` ``[B, Nq, d]`` to itself, or to ``context`` ``[B, Nk, d]``.

        Args:
            attn_mask: bool (True = may attend) or additive float mask, broadcastable to
                ``[B, heads, Nq, Nk]``, where Nk counts cached keys too; or a
                :class:`~tokformer.sparse_attention.SparsePattern` of the pairs that may attend
                (self-attention without cache or causal mask; O(pairs) memory).
            is_causal: also forbid attending to later positions (aligned so the last
                query sits at the last key, which is what a KV cache needs).
            cache: self-attention: new keys/values are appended and all are attended to;
                cross-attention: keys/values of ``context`` are computed
                on the first call and reused after, so ``context`` may then be None.
            rope: rotations of the ``Nq`` new tokens (self-attention only).

        Returns ``[B, Nq, d]``. A query row whose keys are all masked yields zeros.
        """
        q, k, v = self._project(x, context, cache, rope)  # q [B, H, Nq, Dh]; k, v [B, Hkv, Nk, Dh]
        n_queries, n_keys = q.shape[2], k.shape[2]

        if isinstance(attn_mask, SparsePattern):
            if is_causal or cache is not None or self.cross:
                raise ValueError("a SparsePattern is for self-attention without cache or causal mask")
            out = sparse_attention(q, k, v, attn_mask, self.dropout if self.training else 0.0)
        elif is_causal and attn_mask is None and n_queries == n_keys:
            out = self._sdpa(q, k, v, mask=None, is_causal=True)  # fast path: fused causal kernel
        else:
            if is_causal:
                attn_mask = combine_masks(attn_mask, causal_mask(n_queries, n_keys, device=q.device))
            out = self._masked_sdpa(q, k, v, attn_mask)
        out = rearrange(out, "b h n d -> b n (h d)")
        return self.proj_drop(self.proj(out))

    def _project(
        self, x: Tensor, context: Tensor | None, cache: KVCache | None, rope: Rope | None
    ) -> tuple[Tensor, ...]:
        heads = lambda t, n: rearrange(t, "b n (h d) -> b h n d", h=n)
        if not self.cross:
            kv_width = self.n_kv_heads * self.d_head
            q, k, v = self.qkv(x).split([self.n_heads * self.d_head, kv_width, kv_width], dim=-1)
            q, k, v = heads(q, self.n_heads), heads(k, self.n_kv_heads), heads(v, self.n_kv_heads)
            q, k = self.q_norm(q), self.k_norm(k)
            if rope is not None:
                q, k = apply_rotary(q, rope), apply_rotary(k, rope)
            if cache is not None:
                k, v = cache.append(k, v)
            return q, k, v
        q = self.q_norm(heads(self.q(x), self.n_heads))
        if cache is not None and not cache.empty:
            return q, cache.keys, cache.values
        if context is None:
            raise ValueError("cross-attention needs `context` (or a filled cache)")
        k, v = (heads(t, self.n_kv_heads) for t in self.kv(context).chunk(2, dim=-1))
        k = self.k_norm(k)
        if cache is not None:
            cache.append(k, v)
        return q, k, v

    def _masked_sdpa(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        if mask is None:
            return self._sdpa(q, k, v, mask=None)
        # A row with every key masked would softmax over all -inf and give NaN (in the
        # backward pass too). Let such rows attend to everything, then zero their output:
        # the zeroing blocks the gradient, so nothing non-finite appears anywhere.
        # Done unconditionally: checking first would force a device sync on every call.
        has_key = rows_with_keys(mask)  # [..., Nq, 1]
        safe_mask = mask.masked_fill(~has_key, 0.0) if mask.dtype.is_floating_point else mask | ~has_key
        out = self._sdpa(q, k, v, mask=safe_mask)
        return out.masked_fill(~has_key, 0.0)

    def _sdpa(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool = False) -> Tensor:
        if mask is not None and mask.is_floating_point():
            mask = mask.to(q.dtype)
        dropout = self.dropout if self.training else 0.0
        if self.n_kv_heads != self.n_heads:  # each key/value head serves a group of query heads
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=is_causal, enable_gqa=True
            )
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=is_causal)
