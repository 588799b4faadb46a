"""`Embedder`: a TokenBatch -> ``[B, N, d_model]`` token vectors, positions included."""

from __future__ import annotations

import math

from torch import Tensor, nn

from tokformer.batch import TokenBatch

TOKEN_STD = 0.02  # GPT-2's embedding init


class Embedder(nn.Module):
    """Embed token ids through a table, or continuous features through a projection,
    then add the positional encoding of ``batch.positions``.

    Args:
        d_model: output width.
        vocab_size: number of discrete ids (ids are looked up in a table); or
        in_features: width of continuous token features (projected linearly).
        position: a module mapping ``batch.positions`` to ``[B, N, d]``; None adds none.
        dropout: dropout on the summed embedding.
        scale: multiply token embeddings by sqrt(d_model), as the paper does, so they are
            not drowned by the unit-scale sinusoidal code.

    The id table initialises itself: N(0, 0.02) (GPT-2's), or N(0, 1/sqrt(d_model)) with
    ``scale`` so the scaled vectors have unit variance. ``nn.Embedding``'s own N(0, 1) is a
    trap for a table tied to an output layer: initial logits with a standard deviation near
    sqrt(d_model), a loss far above ln(vocab), and softmax gradients that underflow to
    denormals and slow the backward pass many times over. A feature projection keeps
    ``nn.Linear``'s fan-in init, which already suits it.
    """

    def __init__(
        self,
        d_model: int,
        *,
        vocab_size: int | None = None,
        in_features: int | None = None,
        position: nn.Module | None = None,
        dropout: float = 0.0,
        scale: bool = False,
    ) -> None:
        super().__init__()
        if (vocab_size is None) == (in_features is None):
            raise ValueError("Embedder needs exactly one of vocab_size and in_features")
        self.tokens: nn.Module = (
            nn.Embedding(vocab_size, d_model) if vocab_size is not None else nn.Linear(in_features, d_model)
        )
        if isinstance(self.tokens, nn.Embedding):
            nn.init.normal_(self.tokens.weight, std=d_model**-0.5 if scale else TOKEN_STD)
        self.position = position
        self.scale = math.sqrt(d_model) if scale else 1.0
        self.drop = nn.Dropout(dropout)

    def forward(self, batch: TokenBatch) -> Tensor:  # -> [B, N, d]
        values = batch.ids if batch.ids is not None else batch.features
        x = self.tokens(values) * self.scale
        if self.position is not None:
            if batch.positions is None:
                raise ValueError("this embedder has a positional encoding but the batch has no positions")
            x = x + self.position(batch.positions).to(x.dtype)
        return self.drop(x)
