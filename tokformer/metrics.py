"""Evaluation counts on a model's outputs: here, top-k hits of a classifier."""

from __future__ import annotations

from torch import Tensor


def topk_correct(logits: Tensor, target: Tensor, ks: tuple[int, ...] = (1, 5)) -> dict[int, Tensor]:
    """Number of samples whose true class is among the ``k`` highest logits, per k.

    ``k`` larger than the number of classes counts every sample. Ties are broken by
    :func:`torch.topk`'s order.
    """
    k_max = min(max(ks), logits.shape[-1])
    top = logits.topk(k_max, dim=-1).indices  # [B, k_max]
    hits = top == target.unsqueeze(-1)  # [B, k_max]
    return {k: hits[:, : min(k, k_max)].any(dim=-1).sum() for k in ks}
