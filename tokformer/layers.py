"""Small building blocks shared by every Transformer block."""

from __future__ import annotations

from torch import Tensor, nn

ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU}


def make_activation(name: str) -> nn.Module:
    try:
        return ACTIVATIONS[name]()
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; choose one of {sorted(ACTIVATIONS)}") from None


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
