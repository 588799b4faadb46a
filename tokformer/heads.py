"""Task heads that read the encoder's tokens: here, sequence-level classification.

A classifier needs one vector per sample out of ``[B, N, d]`` tokens. Three standard ways:

* ``cls``: a learned class token sits at position 0 and attends to everything; its
  output is the summary (BERT, the original ViT);
* ``mean``: average the real tokens (padding excluded by the mask, prefix tokens such as
  a class token excluded by ``n_prefix``), which is translation-friendly and what timm
  calls ``global_pool='avg'``;
* ``map``: multihead attention pooling (Lee et al. 2019; SigLIP): a learned query attends
  over the tokens, so the summary is a data-dependent weighting rather than a plain mean.

Nothing here knows what the tokens are (patches, nodes, words). The classification loss is
in :mod:`tokformer.losses`, the top-k count in :mod:`tokformer.metrics`.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from tokformer.attention import MultiHeadAttention
from tokformer.layers import FeedForward
from tokformer.masks import padding_mask

Pooling = Literal["cls", "mean", "map"]


class AttentionPool(nn.Module):
    """One learned query cross-attends over the tokens, then a residual MLP: ``[B, N, d]`` -> ``[B, d]``.

    The layout of timm's ``AttentionPoolLatent`` (SigLIP's MAP head): ``latent`` query,
    fused ``kv``, output ``proj``, then ``x + mlp(norm(x))``. No residual around the
    attention itself: the latent is a query, not a token being refined.
    """

    def __init__(
        self, d_model: int, n_heads: int, d_ff: int, *, activation: str = "gelu", norm_eps: float = 1e-6
    ) -> None:
        super().__init__()
        self.latent = nn.Parameter(torch.randn(1, 1, d_model) * d_model**-0.5)
        self.attn = MultiHeadAttention(d_model, n_heads, cross=True)
        self.norm = nn.LayerNorm(d_model, eps=norm_eps)
        self.mlp = FeedForward(d_model, d_ff, activation=activation)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:  # [B, N, d], [B, N] -> [B, d]
        query = self.latent.expand(x.shape[0], -1, -1).to(x.dtype)  # [B, 1, d]
        pooled = self.attn(query, x, attn_mask=padding_mask(mask) if mask is not None else None)  # [B, 1, d]
        pooled = pooled + self.mlp(self.norm(pooled))
        return pooled[:, 0]


def masked_mean(x: Tensor, mask: Tensor | None) -> Tensor:
    """Mean over tokens where ``mask`` is True: ``[B, N, d]``, ``[B, N]`` -> ``[B, d]``.

    A sample with no real token gives zeros rather than NaN.
    """
    if mask is None:
        return x.mean(dim=1)
    weights = mask.to(x.dtype).unsqueeze(-1)  # [B, N, 1]
    return (x * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)


class ClassificationHead(nn.Module):
    """Pool tokens to one vector, optionally LayerNorm it, drop out, project to class logits.

    Args:
        d_model: token width.
        n_classes: number of classes (logit width).
        pool: ``cls`` (token 0 is the summary), ``mean`` (masked mean of non-prefix tokens)
            or ``map`` (attention pooling over non-prefix tokens).
        n_prefix: leading tokens that are not content (class or register tokens); mean
            and attention pooling skip them. One by default, the class token ``cls`` reads;
            pooling tokens without a class token takes ``n_prefix=0``.
        norm: LayerNorm after pooling (timm's ``fc_norm``; pair it with an encoder built
            with ``final_norm=False``).
        norm_eps: epsilon of that LayerNorm.
        dropout: dropout before the projection.
        pool_heads / pool_ff / pool_activation: attention pooling's heads, MLP width
            (default ``4 * d_model``) and activation.
    """

    def __init__(
        self,
        d_model: int,
        n_classes: int,
        *,
        pool: Pooling = "cls",
        n_prefix: int = 1,
        norm: bool = False,
        norm_eps: float = 1e-6,
        dropout: float = 0.0,
        pool_heads: int = 8,
        pool_ff: int | None = None,
        pool_activation: str = "gelu",
    ) -> None:
        super().__init__()
        if pool not in ("cls", "mean", "map"):
            raise ValueError(f"pool must be 'cls', 'mean' or 'map', got {pool!r}")
        if pool == "cls" and n_prefix < 1:
            raise ValueError("pool='cls' reads token 0, so the tokens need a class-token prefix (n_prefix >= 1)")
        if n_classes <= 0:
            raise ValueError(f"n_classes must be positive, got {n_classes}")
        self.pool = pool
        self.n_prefix = n_prefix
        self.attn_pool = (
            AttentionPool(d_model, pool_heads, pool_ff or 4 * d_model, activation=pool_activation, norm_eps=norm_eps)
            if pool == "map"
            else None
        )
        self.norm = nn.LayerNorm(d_model, eps=norm_eps) if norm else nn.Identity()
        self.drop = nn.Dropout(dropout)
        self.proj = nn.Linear(d_model, n_classes)

    def pooled(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """The per-sample feature before the projection: ``[B, N, d]`` -> ``[B, d]``."""
        if self.pool == "cls":
            return self.norm(x[:, 0])
        tokens = x[:, self.n_prefix :]  # [B, N - n_prefix, d]
        token_mask = mask[:, self.n_prefix :] if mask is not None else None
        if self.attn_pool is not None:
            return self.norm(self.attn_pool(tokens, token_mask))
        return self.norm(masked_mean(tokens, token_mask))

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:  # [B, N, d], [B, N] -> [B, n_classes]
        return self.proj(self.drop(self.pooled(x, mask)))

