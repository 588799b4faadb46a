"""Weight initialisation and parameter counting."""

from __future__ import annotations

import math

from torch import nn

RESIDUAL_PROJECTIONS = ("attn.proj", "cross_attn.proj", "mlp.fc2")


def init_weights(module: nn.Module, n_layers: int, std: float = 0.02) -> None:
    """GPT-2 style initialisation, in place.

    Linear and embedding weights ~ N(0, std), biases 0, norms 1/0, register tokens
    N(0, std) (distinct, or they would stay interchangeable forever). The projections
    that write into the residual stream get std / sqrt(2 n_layers): each block adds two
    such terms, so this keeps the residual's variance from growing with depth. Layer
    scales keep the initial value they were built with.
    """
    residual_std = std / math.sqrt(2 * n_layers)
    for name, param in module.named_parameters():
        if name == "registers" or name.endswith(".registers"):
            nn.init.normal_(param, mean=0.0, std=std)
    for name, sub in module.named_modules():
        if isinstance(sub, nn.Linear):
            is_residual = name.endswith(RESIDUAL_PROJECTIONS)
            nn.init.normal_(sub.weight, mean=0.0, std=residual_std if is_residual else std)
            if sub.bias is not None:
                nn.init.zeros_(sub.bias)
        elif isinstance(sub, nn.Embedding):
            nn.init.normal_(sub.weight, mean=0.0, std=std)
        elif isinstance(sub, (nn.LayerNorm, nn.RMSNorm)) and sub.elementwise_affine:
            nn.init.ones_(sub.weight)
            if getattr(sub, "bias", None) is not None:
                nn.init.zeros_(sub.bias)


def count_parameters(module: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameters (shared ones, e.g. tied embeddings, counted once)."""
    params = {id(p): p for p in module.parameters() if p.requires_grad or not trainable_only}
    return sum(p.numel() for p in params.values())
