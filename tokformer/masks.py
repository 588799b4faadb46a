"""Attention masks, all in one polarity: ``True`` means "may attend".

Masks are built small and broadcast: a key-padding mask becomes ``[B, 1, 1, Nk]``, a
causal mask ``[Nq, Nk]``. Additive float masks (biases) are accepted wherever a bool mask
is: ``0`` keeps a key, ``-inf`` removes it, anything else reweights it.
"""

from __future__ import annotations

import torch
from torch import Tensor


def causal_mask(n_queries: int, n_keys: int, device: torch.device | None = None) -> Tensor:
    """``[Nq, Nk]`` bool: query i may attend key j iff j <= i + (Nk - Nq).

    Aligned bottom-right, so the last query sits at the last key. With a KV cache the new
    queries are the *last* Nq of Nk positions; PyTorch's ``is_causal`` aligns top-left,
    which is only right when Nq == Nk.
    """
    offset = n_keys - n_queries
    q = torch.arange(n_queries, device=device)[:, None]
    k = torch.arange(n_keys, device=device)[None, :]
    return k <= q + offset


def padding_mask(key_mask: Tensor) -> Tensor:
    """``[B, Nk]`` True-for-real-token mask -> ``[B, 1, 1, Nk]`` attention mask."""
    return key_mask[:, None, None, :]


def padding_or_none(key_mask: Tensor) -> Tensor | None:
    """``key_mask`` ``[B, Nk]``, or None when no token is padding, so attention takes SDPA's
    unmasked (fused) kernel.

    Eager mode only: the check reads a value back from the device, which torch.compile would
    turn into a graph break and torch.export cannot trace. Traced code keeps the mask, which
    gives the same result through the masked kernel.
    """
    if torch.compiler.is_compiling():
        return key_mask
    return None if bool(key_mask.all()) else key_mask


def prefix_lm_mask(prefix_len: Tensor | int, n: int, device: torch.device | None = None) -> Tensor:
    """Bidirectional over the first ``prefix_len`` tokens, causal after them.

    Returns ``[N, N]`` for an int prefix length (a traced one too: ``torch.export``'s symbolic
    sizes are ints that are not ``int``), ``[B, 1, N, N]`` for a ``[B]`` tensor.
    """
    causal = causal_mask(n, n, device)
    keys = torch.arange(n, device=device)
    if not isinstance(prefix_len, Tensor):
        return causal | (keys < prefix_len)[None, :]
    in_prefix = keys[None, :] < prefix_len.to(device)[:, None]  # [B, N]
    return causal[None, None] | in_prefix[:, None, None, :]


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Intersect bool masks and add float biases; a bool meets a float as ``0 / -inf``."""
    present = [m for m in masks if m is not None]
    if not present:
        return None
    if all(m.dtype == torch.bool for m in present):
        out = present[0]
        for m in present[1:]:
            out = out & m
        return out
    dtype = next(m.dtype for m in present if m.is_floating_point())
    out = None
    for m in present:
        bias = to_additive(m, dtype)
        out = bias if out is None else out + bias
    return out


def to_additive(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Bool "may attend" mask -> additive bias (0 kept, -inf removed); floats pass through."""
    if mask.dtype != torch.bool:
        return mask.to(dtype)
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, float("-inf"))


def rows_with_keys(mask: Tensor) -> Tensor:
    """``[..., Nq, 1]`` bool: does the query row keep at least one key?"""
    keeps = mask if mask.dtype == torch.bool else mask > float("-inf")
    return keeps.any(dim=-1, keepdim=True)
