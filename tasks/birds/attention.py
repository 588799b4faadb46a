"""Attention maps of a bird model's Transformer blocks, and how much the top-right bird attends to the bottom-left one.

tokformer's attention runs on fused SDPA, which never materialises the weights. They are
recomputed here from what each block's ``attn.qkv`` layer outputs (captured with a
forward hook): ``softmax(q k^T / sqrt(d_head))`` per head, exactly what SDPA computes
inside (no mask: every image has the same number of tokens, no dropout in eval).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from einops import rearrange
from torch import Tensor, nn

from tokformer.tasks.birds.data import BOTTOM_LEFT, TOP_RIGHT, BirdImages


@torch.no_grad()
def attention_maps(model: nn.Module, inputs: Tensor | tuple, blocks: nn.ModuleList | None = None,
                   mask: Tensor | None = None) -> list[Tensor]:
    """One ``[B, heads, N, N]`` tensor of attention probabilities per block of ``blocks`` (default
    ``model.encoder.blocks``: the bird Transformer's, whose token 0 is the class token) while
    ``model`` runs on ``inputs`` (its argument, moved to its device, or a tuple of its arguments).
    ``mask`` (``[B, 1, N, N]`` bool, True = may attend) is the mask the model attended under, if any
    (a padded or prefix-LM sequence); rows with no key at all come out NaN."""
    blocks = model.encoder.blocks if blocks is None else blocks
    captured: list[Tensor] = []
    hooks = [b.attn.qkv.register_forward_hook(lambda _m, _i, out: captured.append(out)) for b in blocks]
    was_training = model.training
    model.eval()
    try:
        model(*(inputs if isinstance(inputs, tuple) else (inputs.to(next(model.parameters()).device),)))
    finally:
        for hook in hooks:
            hook.remove()
        model.train(was_training)
    maps = []
    for qkv, block in zip(captured, blocks, strict=True):
        q, k, _ = rearrange(qkv, "b n (three h d) -> three b h n d", three=3, h=block.attn.n_heads)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # [B, H, N, N]
        if mask is not None:
            scores = scores.masked_fill(~mask.to(scores.device), float("-inf"))
        maps.append(torch.softmax(scores, dim=-1).cpu())
    return maps


def bird_tokens(meta: BirdImages, index: int, slot: int, patch: int, first: int = 1) -> np.ndarray:
    """Token indices of patches overlapping the core of a bird; patches start at token ``first``
    (1 after a class token, 0 without one).

    The core is the central half of the bird's box, so a patch that only grazes a wing tip
    or the neighbouring clutter is not counted.
    """
    x0, y0, x1, y1 = meta.bird_boxes(index)[slot]
    cx, cy, hw, hh = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 4, (y1 - y0) / 4
    grid = meta.size // patch
    rows, cols = box_cells((cx - hw, cy - hh, cx + hw, cy + hh), patch, grid)
    return first + (rows[:, None] * grid + cols[None, :]).ravel()


def box_cells(box: tuple[float, float, float, float], patch: int, grid: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows and the columns of a ``grid`` x ``grid`` patch grid that a pixel box (x0, y0, x1, y1) overlaps."""
    x0, y0, x1, y1 = box
    rows = np.arange(max(0, int(y0 // patch)), min(grid - 1, int(y1 // patch)) + 1)
    cols = np.arange(max(0, int(x0 // patch)), min(grid - 1, int(x1 // patch)) + 1)
    return rows, cols


def _between(probs: Tensor, queries: np.ndarray, keys: np.ndarray) -> Tensor:  # [H, N, N] -> [H, q, k]
    """The attention of tokens ``queries`` to tokens ``keys``, per head."""
    return probs[:, queries][:, :, keys]


def corner_attention(maps: list[Tensor], meta: BirdImages, indices: np.ndarray, patch: int,
                     first: int = 1, source: int = TOP_RIGHT, target: int = BOTTOM_LEFT) -> np.ndarray:
    """``[layers, heads, 2]``: attention mass from the ``source`` bird's tokens to the ``target`` bird's
    (slots; by default top-right to bottom-left, the compared pair), and the mass a uniform attention
    would give them, averaged over images ``indices``.

    ``maps[l][b]`` must belong to image ``indices[b]``.
    """
    n_layers, n_heads = len(maps), maps[0].shape[1]
    out = np.zeros((n_layers, n_heads, 2))
    n_tokens = maps[0].shape[-1]
    for b, index in enumerate(indices):
        queries = bird_tokens(meta, int(index), source, patch, first)
        keys = bird_tokens(meta, int(index), target, patch, first)
        for layer, probs in enumerate(maps):
            mass = _between(probs[b], queries, keys).sum(dim=-1).mean(dim=-1)  # [heads]
            out[layer, :, 0] += mass.numpy()
            out[layer, :, 1] += len(keys) / n_tokens
    return out / len(indices)


def own_bird_attention(maps: list[Tensor], meta: BirdImages, indices: np.ndarray, patch: int) -> np.ndarray:
    """``[layers, heads, 3]``: how much a bird's tokens attend to their own bird, against its size.

    For both compared birds (top-right, bottom-left) of every image in ``indices``, with the
    bird's core tokens (see :func:`bird_tokens`) as queries: the attention mass on the same
    bird's core tokens (itself included), the mass on the bird's *other* core tokens, and the
    bird's share of the image's tokens (what uniform attention would give), averaged over birds.
    A share well above the last column is the lecture's observation that tokens of an object
    attend to the object's other parts.
    """
    n_layers, n_heads = len(maps), maps[0].shape[1]
    out = np.zeros((n_layers, n_heads, 3))
    n_tokens = maps[0].shape[-1]
    n_birds = 0
    for b, index in enumerate(indices):
        for slot in (TOP_RIGHT, BOTTOM_LEFT):
            own = bird_tokens(meta, int(index), slot, patch)
            n_birds += 1
            for layer, probs in enumerate(maps):
                block = _between(probs[b], own, own)  # [heads, q, k]: own bird -> own bird
                mass = block.sum(dim=-1).mean(dim=-1)  # [heads]
                out[layer, :, 0] += mass.numpy()
                out[layer, :, 1] += (mass - block.diagonal(dim1=-2, dim2=-1).mean(dim=-1)).numpy()
                out[layer, :, 2] += len(own) / n_tokens
    return out / n_birds


def bird_attention(maps: list[Tensor], meta: BirdImages, indices: np.ndarray, patch: int, first: int = 1) -> np.ndarray:
    """``[layers, heads, 2]``: how much the patch tokens attend to the birds, against the birds' size.

    For every image of ``indices`` (``maps[l][b]`` belongs to image ``indices[b]``), with every patch
    token as a query: the attention mass on the core tokens of all its birds (:func:`bird_tokens`),
    and those tokens' share of the sequence (what uniform attention would give), averaged over
    images. Counting needs the birds, not their places: a mass well above the share is attention
    that looks at the birds.
    """
    n_layers, n_heads = len(maps), maps[0].shape[1]
    out = np.zeros((n_layers, n_heads, 2))
    n_tokens = maps[0].shape[-1]
    queries = np.arange(first, n_tokens)
    for b, index in enumerate(indices):
        slots = meta.bird_boxes(int(index))
        keys = np.unique(np.concatenate([bird_tokens(meta, int(index), slot, patch, first) for slot in slots]))
        for layer, probs in enumerate(maps):
            out[layer, :, 0] += _between(probs[b], queries, keys).sum(dim=-1).mean(dim=-1).numpy()
            out[layer, :, 1] += len(keys) / n_tokens
    return out / len(indices)
