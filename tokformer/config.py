"""`TransformerConfig`: the sizes and switches of a Transformer stack."""

from __future__ import annotations

from dataclasses import dataclass

from tokformer.layers import ACTIVATIONS


@dataclass
class TransformerConfig:
    """Shape of one Transformer stack. Defaults are the paper's base model.

    Attributes:
        d_model: token width (512 in the paper).
        n_heads: attention heads; must divide ``d_model``.
        n_layers: number of blocks.
        d_ff: feed-forward width; None means ``4 * d_model`` (the paper's 2048).
        dropout: residual-branch and feed-forward dropout.
        attn_dropout: dropout on attention weights; None means ``dropout``.
        activation: feed-forward activation: relu (the paper), gelu (GPT, ViT) or silu.
        norm_first: pre-norm (True) or the paper's post-norm (False).
        bias: biases in linear layers.
        norm_eps: LayerNorm epsilon (1e-6 in timm's ViT).
        final_norm: a pre-norm stack ends with a LayerNorm; False drops it, for heads that
            normalise after pooling instead (timm's ``fc_norm`` with average pooling).
    """

    d_model: int = 512
    n_heads: int = 8
    n_layers: int = 6
    d_ff: int | None = None
    dropout: float = 0.1
    attn_dropout: float | None = None
    activation: str = "relu"
    norm_first: bool = True
    bias: bool = True
    norm_eps: float = 1e-5
    final_norm: bool = True

    def __post_init__(self) -> None:
        for name in ("d_model", "n_heads", "n_layers"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.d_ff is not None and self.d_ff <= 0:
            raise ValueError(f"d_ff must be positive, got {self.d_ff}")
        if self.d_model % self.n_heads != 0:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; "
                f"pick n_heads among {[h for h in range(1, self.d_model + 1) if self.d_model % h == 0][:12]}"
            )
        for name in ("dropout", "attn_dropout"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {value}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}")

    @property
    def ff_width(self) -> int:
        return self.d_ff if self.d_ff is not None else 4 * self.d_model

    @property
    def attn_dropout_p(self) -> float:
        return self.dropout if self.attn_dropout is None else self.attn_dropout

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads
