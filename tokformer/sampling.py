"""Choosing the next token from logits: greedy, temperature, top-k and top-p (nucleus)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from tokformer.errors import CheckpointError


@dataclass
class SamplingConfig:
    """How to pick each next token.

    Attributes:
        temperature: 0 means greedy (argmax); otherwise logits are divided by it.
        top_k: keep only the k most likely tokens (None: all).
        top_p: keep the smallest set of most likely tokens whose probability reaches p.
    """

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k is not None and self.top_k <= 0:
            raise ValueError(f"top_k must be positive, got {self.top_k}")
        if self.top_p is not None and not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


def filter_logits(logits: Tensor, top_k: int | None = None, top_p: float | None = None) -> Tensor:
    """Set to -inf every logit outside the top-k / top-p set. ``[B, V] -> [B, V]``."""
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]  # [B, 1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        # drop a token when the tokens before it already reach p (the top one always stays)
        drop_sorted = (cumulative - sorted_logits.softmax(dim=-1)) >= top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample_next(logits: Tensor, cfg: SamplingConfig, generator: torch.Generator | None = None) -> Tensor:
    """``[B, V]`` logits -> ``[B]`` next-token ids; NaN logits (weights that hold NaN) are a one-line
    error rather than an arbitrary token or a sampler crash."""
    if not torch.isfinite(logits).all():
        raise CheckpointError("the model produced NaN or infinite logits: its weights hold NaN or infinite values "
                              "(a damaged or diverged checkpoint); load another one")
    if cfg.temperature == 0:
        return logits.argmax(dim=-1)
    scaled = logits.float() / cfg.temperature
    if not torch.isfinite(scaled).all():  # a temperature so small the logits overflow: its limit is greedy
        return logits.argmax(dim=-1)
    logits = filter_logits(scaled, cfg.top_k, cfg.top_p)
    probs = logits.float().softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
