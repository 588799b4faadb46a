"""Rotary position embeddings (RoPE, Su et al. 2021): positions enter attention, not the tokens.

Instead of adding a position vector to each token, RoPE rotates every query and key: pairs
of channels are turned by an angle ``position * frequency``. The dot product of a query at
``m`` with a key at ``n`` then depends on ``m - n`` alone, so attention sees relative offsets
and the model has no table to outgrow.

Layout: the *half-split* one of GPT-NeoX and Hugging Face Llama (channel ``i`` pairs with
``i + d/2``, ``rotate_half``), so Llama-family weights load without permuting q/k rows.

* 1-D (text): ``positions`` ``[B, N]`` integer indices; ``d_head`` channels, frequencies
  ``theta^(-2i/d)``.
* 2-D (image grids): ``positions`` ``[B, N, 2]`` (row, col); the first half of the channels
  is rotated by the row, the second half by the column (axial RoPE, as in RoPE-ViT).

A token at position 0 (or (0, 0)) is not rotated at all, so prefix tokens such as a class
token can be left unrotated by giving them position 0.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from einops import rearrange
from torch import Tensor, nn


class Rope(NamedTuple):
    """The rotation of every token: ``cos``/``sin`` ``[B, 1, N, d_head]`` (broadcast over heads).

    ``sections``: how many independent half-split blocks the channels form (1 for 1-D; 2 for
    2-D, one block per axis).
    """

    cos: Tensor
    sin: Tensor
    sections: int = 1


def rotate_half(x: Tensor, sections: int = 1) -> Tensor:
    """``[..., d]`` -> ``[..., d]``: in each of ``sections`` blocks, ``(x1, x2) -> (-x2, x1)``."""
    pairs = rearrange(x, "... (s two h) -> ... s two h", s=sections, two=2)
    x1, x2 = pairs.unbind(dim=-2)
    return rearrange(torch.stack((-x2, x1), dim=-2), "... s two h -> ... (s two h)")


def apply_rotary(x: Tensor, rope: Rope) -> Tensor:
    """Rotate queries or keys ``[B, H, N, d_head]`` by the angles of ``rope``."""
    return (x * rope.cos + rotate_half(x, rope.sections) * rope.sin).to(x.dtype)


def _angles(positions: Tensor, dim: int, theta: float) -> Tensor:
    """``[...]`` positions -> ``[..., dim]`` angles, each frequency repeated for both halves."""
    inv_freq = theta ** -(torch.arange(0, dim, 2, device=positions.device, dtype=torch.float32) / dim)  # [dim/2]
    angles = positions.to(torch.float32)[..., None] * inv_freq  # [..., dim/2]
    return torch.cat((angles, angles), dim=-1)


class RotaryEmbedding(nn.Module):
    """Positions -> the ``(cos, sin)`` of every token's rotation, computed once per forward pass.

    Args:
        d_head: channels per head; even (1-D) or divisible by 4 (2-D).
        theta: base of the frequencies (10,000 in the paper; Llama 3 uses 500,000).
        dims: 1 for sequences (positions ``[B, N]``), 2 for grids (positions ``[B, N, 2]``).
    """

    def __init__(self, d_head: int, theta: float = 10000.0, dims: int = 1) -> None:
        super().__init__()
        if dims not in (1, 2):
            raise ValueError(f"rotary embeddings are 1-D or 2-D, got dims={dims}")
        if d_head % (2 * dims) != 0:
            raise ValueError(f"{dims}-D rotary embeddings need d_head divisible by {2 * dims}, got {d_head}")
        self.d_head = d_head
        self.theta = theta
        self.dims = dims

    def forward(self, positions: Tensor) -> Rope:  # [B, N] or [B, N, 2] -> 2 x [B, 1, N, d_head]
        if self.dims == 1:
            if positions.dim() != 2:
                raise ValueError(f"1-D rotary positions must be [B, N], got {tuple(positions.shape)}")
            angles = _angles(positions, self.d_head, self.theta)  # [B, N, d_head]
        else:
            if positions.dim() != 3 or positions.shape[-1] != 2:
                raise ValueError(f"2-D rotary positions must be [B, N, 2], got {tuple(positions.shape)}")
            half = self.d_head // 2
            angles = torch.cat(
                (_angles(positions[..., 0], half, self.theta), _angles(positions[..., 1], half, self.theta)), dim=-1
            )  # [B, N, d_head]: row block, then column block
        angles = angles[:, None]  # [B, 1, N, d_head]
        return Rope(angles.cos(), angles.sin(), self.dims)


def prepend_identity(rope: Rope, n: int) -> Rope:
    """``n`` unrotated tokens in front (cos 1, sin 0): register tokens carry no position."""
    shape = (*rope.cos.shape[:2], n, rope.cos.shape[-1])
    cos = torch.cat((rope.cos.new_ones(shape), rope.cos), dim=2)
    sin = torch.cat((rope.sin.new_zeros(shape), rope.sin), dim=2)
    return Rope(cos, sin, rope.sections)
