"""Rotary position embeddings (RoPE, Su et al. 2021): positions enter attention, not the tokens.

Instead of adding a position vector to each token, RoPE rotates every query and key: pairs
of channels are turned by an angle ``position * frequency``. The dot product of a query at
``m`` with a key at ``n`` then depends on ``m - n`` alone, so attention sees relative offsets
and the model has no table to outgrow.

Layouts (which channels form a rotated pair):

* ``half`` (default): the *half-split* one of GPT-NeoX and Hugging Face Llama (channel ``i``
  pairs with ``i + d/2``, ``rotate_half``), so Llama-family weights load without permuting
  q/k rows.
* ``interleaved``: channels ``2k`` and ``2k + 1`` pair up (GPT-J, the RoPE paper, and timm's
  EVA / RoPE-ViT default, ``apply_rot_embed(half=False)``).

* 1-D (text): ``positions`` ``[B, N]`` integer indices; ``d_head`` channels, frequencies
  ``theta^(-2i/d)``.
* 2-D (image grids): ``positions`` ``[B, N, 2]`` (row, col); the first half of the channels
  is rotated by one axis, the second half by the other (axial RoPE, as in RoPE-ViT), each
  half with frequencies ``theta^(-4i/d)``. ``axes="ij"`` gives the first half to the row,
  ``"xy"`` to the column (timm's ``grid_indexing``). With the half layout each half is its
  own half-split block; with the interleaved one the pairs are adjacent inside each half.
  ``ref_grid`` rescales coordinates so that every grid spans a reference grid (EVA-02's and
  timm's ``ref_feat_shape``): ``row * ref_rows / rows``, the grid's extent being read off the
  positions themselves (largest index + 1 per axis and sample).

Frequencies are computed as ``1 / theta ** (2i / d)``, the expression of Hugging Face and
timm, so the tables agree with theirs bit for bit.

A token at position 0 (or (0, 0)) is not rotated at all (rescaling keeps 0 at 0), so prefix
tokens such as a class token can be left unrotated by giving them position 0.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch
from einops import rearrange
from torch import Tensor, nn

RopeLayout = Literal["half", "interleaved"]
RopeAxes = Literal["ij", "xy"]
ROPE_LAYOUTS = ("half", "interleaved")
ROPE_AXES = ("ij", "xy")


class Rope(NamedTuple):
    """The rotation of every token: ``cos``/``sin`` ``[B, 1, N, d_head]`` (broadcast over heads).

    ``sections``: how many independent half-split blocks the channels form (1 for 1-D; 2 for
    2-D, one block per axis). ``interleaved``: pairs are adjacent channels instead (then
    ``sections`` does not matter).
    """

    cos: Tensor
    sin: Tensor
    sections: int = 1
    interleaved: bool = False


def rotate_half(x: Tensor, sections: int = 1) -> Tensor:
    """``[..., d]`` -> ``[..., d]``: in each of ``sections`` blocks, ``(x1, x2) -> (-x2, x1)``."""
    pairs = rearrange(x, "... (s two h) -> ... s two h", s=sections, two=2)
    x1, x2 = pairs.unbind(dim=-2)
    return rearrange(torch.stack((-x2, x1), dim=-2), "... s two h -> ... (s two h)")


def rotate_pairs(x: Tensor) -> Tensor:
    """``[..., d]`` -> ``[..., d]``: ``(x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...)``."""
    pairs = rearrange(x, "... (h two) -> ... h two", two=2)
    return rearrange(torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1), "... h two -> ... (h two)")


def apply_rotary(x: Tensor, rope: Rope) -> Tensor:
    """Rotate queries or keys ``[B, H, N, d_head]`` by the angles of ``rope``."""
    turned = rotate_pairs(x) if rope.interleaved else rotate_half(x, rope.sections)
    return (x * rope.cos + turned * rope.sin).to(x.dtype)


def _frequencies(positions: Tensor, dim: int, theta: float) -> Tensor:
    """``[...]`` positions -> ``[..., dim/2]`` angles, one per rotated pair of ``dim`` channels."""
    exponent = torch.arange(0, dim, 2, device=positions.device, dtype=torch.float32) / dim  # [dim/2]
    inv_freq = 1.0 / (theta**exponent)  # HF's and timm's expression: identical float32 values
    return positions.to(torch.float32)[..., None] * inv_freq  # [..., dim/2]


class RotaryEmbedding(nn.Module):
    """Positions -> the ``(cos, sin)`` of every token's rotation, computed once per forward pass.

    Args:
        d_head: channels per head; even (1-D) or divisible by 4 (2-D).
        theta: base of the frequencies (10,000 in the paper; Llama 3 uses 500,000; RoPE-ViT 100).
        dims: 1 for sequences (positions ``[B, N]``), 2 for grids (positions ``[B, N, 2]``).
        layout: ``half`` (half-split pairs) or ``interleaved`` (adjacent pairs).
        axes: 2-D only: ``ij`` rotates the first half of the channels by the row, ``xy`` by
            the column.
        ref_grid: 2-D only: ``(rows, cols)`` every grid is rescaled to span; None keeps indices.
    """

    def __init__(
        self,
        d_head: int,
        theta: float = 10000.0,
        dims: int = 1,
        *,
        layout: RopeLayout = "half",
        axes: RopeAxes = "ij",
        ref_grid: tuple[int, int] | None = None,
    ) -> None:
        super().__init__()
        if dims not in (1, 2):
            raise ValueError(f"rotary embeddings are 1-D or 2-D, got dims={dims}")
        if d_head % (2 * dims) != 0:
            raise ValueError(f"{dims}-D rotary embeddings need d_head divisible by {2 * dims}, got {d_head}")
        if layout not in ROPE_LAYOUTS:
            raise ValueError(f"rotary layout must be one of {list(ROPE_LAYOUTS)}, got {layout!r}")
        if axes not in ROPE_AXES:
            raise ValueError(f"rotary axes must be one of {list(ROPE_AXES)}, got {axes!r}")
        if dims == 1 and (axes != "ij" or ref_grid is not None):
            raise ValueError("rotary axes and ref_grid describe grids: they need dims=2")
        self.d_head = d_head
        self.theta = theta
        self.dims = dims
        self.layout = layout
        self.axes = axes
        self.ref_grid = tuple(ref_grid) if ref_grid is not None else None

    def forward(self, positions: Tensor) -> Rope:  # [B, N] or [B, N, 2] -> 2 x [B, 1, N, d_head]
        if self.dims == 1:
            if positions.dim() != 2:
                raise ValueError(f"1-D rotary positions must be [B, N], got {tuple(positions.shape)}")
            freqs = _frequencies(positions, self.d_head, self.theta)  # [B, N, d_head/2]
            sections = 1
        else:
            if positions.dim() != 3 or positions.shape[-1] != 2:
                raise ValueError(f"2-D rotary positions must be [B, N, 2], got {tuple(positions.shape)}")
            coords = self._coordinates(positions)  # [B, N, 2]
            half = self.d_head // 2
            # [B, N, d_head/4] per axis, the first one first: [B, N, d_head/2]
            freqs = torch.cat(
                (_frequencies(coords[..., 0], half, self.theta), _frequencies(coords[..., 1], half, self.theta)), dim=-1
            )
            sections = 2
        if self.layout == "interleaved":
            angles = freqs.repeat_interleave(2, dim=-1)  # [B, N, d_head]: f0 f0 f1 f1 ...
        else:
            blocks = rearrange(freqs, "b n (s f) -> b n s f", s=sections)
            angles = rearrange(torch.cat((blocks, blocks), dim=-1), "b n s f -> b n (s f)")  # [B, N, d_head]
        angles = angles[:, None]  # [B, 1, N, d_head]
        return Rope(angles.cos(), angles.sin(), sections, self.layout == "interleaved")

    def _coordinates(self, positions: Tensor) -> Tensor:  # [B, N, 2] (row, col) -> [B, N, 2] in rotation order
        coords = positions.to(torch.float32)
        if self.ref_grid is not None:
            # A grid of g cells along an axis spans the reference's r: x / g * r (timm's order of operations).
            extent = coords.amax(dim=1, keepdim=True) + 1  # [B, 1, 2]
            coords = coords / extent * coords.new_tensor(self.ref_grid)
        return coords.flip(-1) if self.axes == "xy" else coords


def prepend_identity(rope: Rope, n: int) -> Rope:
    """``n`` unrotated tokens in front (cos 1, sin 0): register tokens carry no position."""
    shape = (*rope.cos.shape[:2], n, rope.cos.shape[-1])
    cos = torch.cat((rope.cos.new_ones(shape), rope.cos), dim=2)
    sin = torch.cat((rope.sin.new_zeros(shape), rope.sin), dim=2)
    return Rope(cos, sin, rope.sections, rope.interleaved)
