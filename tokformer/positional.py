"""Positional encodings: each maps a TokenBatch's ``positions`` to ``[B, N, d_model]``.

Attention is permutation-equivariant: without positions, a Transformer cannot tell a
token's place. Each modality says where tokens sit in its own terms (an index in a
sequence, a cell in a grid, a Laplacian eigenvector, a latitude/longitude); the modules
here turn that into a vector added to the token embedding.
"""

from __future__ import annotations

import math

import torch
from einops import rearrange
from torch import Tensor, nn


def sinusoidal_encoding(positions: Tensor, d_model: int, base: float = 10000.0) -> Tensor:
    """The paper's code: PE(p, 2i) = sin(p / base^(2i/d)), PE(p, 2i+1) = cos(same).

    ``positions`` of any shape ``[...]`` (ints or floats) -> ``[..., d_model]``. Because
    sin/cos of a sum expand into products, PE(p + k) is a fixed linear map of PE(p), and
    PE(p) . PE(p + k) depends on k alone: relative offsets are visible to dot products.
    """
    if d_model % 2 != 0:
        raise ValueError(f"sinusoidal encoding needs an even d_model, got {d_model}")
    inv_freq = torch.exp(
        torch.arange(0, d_model, 2, device=positions.device, dtype=torch.float32) * (-math.log(base) / d_model)
    )  # [d/2]
    angles = positions.to(torch.float32)[..., None] * inv_freq  # [..., d/2]
    # interleave: even dims sin, odd dims cos
    return rearrange(torch.stack((angles.sin(), angles.cos()), dim=-1), "... h two -> ... (h two)")


class SinusoidalPositions(nn.Module):
    """Fixed 1-D sinusoidal encoding of integer positions ``[B, N]``; no parameters, any length."""

    def __init__(self, d_model: int, base: float = 10000.0) -> None:
        super().__init__()
        self.d_model = d_model
        self.base = base

    def forward(self, positions: Tensor) -> Tensor:  # [B, N] -> [B, N, d]
        return sinusoidal_encoding(positions, self.d_model, self.base)


class LearnedPositions(nn.Module):
    """A learned vector per position index, up to ``max_len`` positions (GPT-2, BERT).

    Initialised N(0, ``std``) (nanoGPT's 0.02), small beside the token vectors; ``nn.Embedding``'s
    N(0, 1) would drown them in position noise.
    """

    def __init__(self, d_model: int, max_len: int, std: float = 0.02) -> None:
        super().__init__()
        self.max_len = max_len
        self.table = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.table.weight, std=std)

    def forward(self, positions: Tensor) -> Tensor:  # [B, N] -> [B, N, d]
        # The range check reads a value back from the device: a clear error in eager mode,
        # but a graph break under torch.compile and an untraceable branch for torch.export,
        # so traced code skips it (an out-of-range index then fails inside the lookup).
        if not torch.compiler.is_compiling() and positions.numel() and int(positions.max()) >= self.max_len:
            raise ValueError(
                f"position {int(positions.max())} is beyond the learned table's max_len={self.max_len}"
            )
        return self.table(positions)


class SinCos2DPositions(nn.Module):
    """Fixed 2-D sin/cos code for grid coordinates ``[B, N, 2]`` (row, col).

    Half the channels encode the row, half the column (as in MAE / timm's 2-D sincos);
    coordinates may be fractional, so grids of any size work without interpolation.
    """

    def __init__(self, d_model: int, base: float = 10000.0) -> None:
        super().__init__()
        if d_model % 4 != 0:
            raise ValueError(f"2-D sin/cos encoding needs d_model divisible by 4, got {d_model}")
        self.d_model = d_model
        self.base = base

    def forward(self, positions: Tensor) -> Tensor:  # [B, N, 2] -> [B, N, d]
        half = self.d_model // 2
        rows = sinusoidal_encoding(positions[..., 0], half, self.base)
        cols = sinusoidal_encoding(positions[..., 1], half, self.base)
        return torch.cat((rows, cols), dim=-1)


class PositionFeatures(nn.Module):
    """Linear projection of position feature vectors ``[B, N, P]`` a tokenizer supplies.

    The generic door for domain-specific positions: Laplacian eigenvectors of a graph,
    (sin, cos) of latitude and longitude, physical coordinates.
    """

    def __init__(self, in_features: int, d_model: int) -> None:
        super().__init__()
        self.proj = nn.Linear(in_features, d_model)

    def forward(self, positions: Tensor) -> Tensor:  # [B, N, P] -> [B, N, d]
        return self.proj(positions.to(self.proj.weight.dtype))
