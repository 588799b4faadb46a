"""Small building blocks shared by every Transformer block: activations, norms, MLPs, layer scale."""

from __future__ import annotations

from functools import partial

import torch
from torch import Tensor, nn


class QuickGELU(nn.Module):
    """``x * sigmoid(1.702 x)``: the GELU approximation OpenAI's CLIP was trained with."""

    def forward(self, x: Tensor) -> Tensor:
        return x * torch.sigmoid(1.702 * x)


ACTIVATIONS: dict[str, type[nn.Module] | partial] = {
    "relu": nn.ReLU,
    "gelu": nn.GELU,
    "gelu_tanh": partial(nn.GELU, approximate="tanh"),
    "quick_gelu": QuickGELU,
    "silu": nn.SiLU,
}
NORMS = ("layer", "rms")
MLPS = ("plain", "swiglu", "geglu")


def make_activation(name: str) -> nn.Module:
    try:
        return ACTIVATIONS[name]()
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; choose one of {sorted(ACTIVATIONS)}") from None


def make_norm(kind: str, dim: int, eps: float) -> nn.Module:
    """``layer``: LayerNorm (centre and scale, with bias); ``rms``: RMSNorm (scale only)."""
    if kind == "layer":
        return nn.LayerNorm(dim, eps=eps)
    if kind == "rms":
        return nn.RMSNorm(dim, eps=eps)
    raise ValueError(f"unknown norm {kind!r}; choose one of {list(NORMS)}")


class FeedForward(nn.Module):
    """The position-wise MLP applied to every token: ``fc2(drop(act(fc1(x))))``.

    The paper's is 512 -> 2048 -> 512 with ReLU. Names match timm's ``Mlp`` (fc1, fc2).
    """

    def __init__(
        self, d_model: int, d_ff: int, *, activation: str = "relu", dropout: float = 0.0, bias: bool = True
    ) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff, bias=bias)
        self.act = make_activation(activation)
        self.drop1 = nn.Dropout(dropout)
        self.fc2 = nn.Linear(d_ff, d_model, bias=bias)
        self.drop2 = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:  # [B, N, d] -> [B, N, d]
        return self.drop2(self.fc2(self.drop1(self.act(self.fc1(x)))))


class GatedFeedForward(nn.Module):
    """A gated linear unit (Shazeer 2020): ``fc2(act(gate) * up)`` with ``[gate; up] = fc1(x)``.

    SwiGLU (SiLU gate) is Llama's MLP; GeGLU (GELU gate) Gemma's. ``fc1`` is one fused
    matmul producing the gate half first, as timm's ``SwiGLUPacked`` and as Hugging Face's
    ``gate_proj`` and ``up_proj`` stacked, so both convert without reordering columns.
    """

    def __init__(
        self, d_model: int, d_ff: int, *, activation: str = "silu", dropout: float = 0.0, bias: bool = True
    ) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_model, 2 * d_ff, bias=bias)
        self.act = make_activation(activation)
        self.drop1 = nn.Dropout(dropout)
        self.fc2 = nn.Linear(d_ff, d_model, bias=bias)
        self.drop2 = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:  # [B, N, d] -> [B, N, d]
        gate, up = self.fc1(x).chunk(2, dim=-1)  # [B, N, d_ff] each
        return self.drop2(self.fc2(self.drop1(self.act(gate) * up)))


class LayerScale(nn.Module):
    """A learned per-channel scale on a residual branch, started small (CaiT, DeiT-3, DINOv2).

    Starting each branch near zero makes a deep stack begin close to the identity. Named
    ``gamma`` as in timm's ``LayerScale``.
    """

    def __init__(self, dim: int, init_value: float) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), float(init_value)))

    def forward(self, x: Tensor) -> Tensor:
        return x * self.gamma
