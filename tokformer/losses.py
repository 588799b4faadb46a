"""Training losses on a model's outputs: here, classification cross-entropy with label smoothing."""

from __future__ import annotations

import torch
from torch import Tensor, nn


def label_smoothing_cross_entropy(logits: Tensor, target: Tensor, smoothing: float = 0.0) -> Tensor:
    """Mean cross-entropy against ``(1 - s) * one_hot + s / C``: ``[B, C]``, ``[B]`` or ``[B, C]`` -> scalar.

    ``target`` is class indices, or a ``[B, C]`` probability matrix (mixup/cutmix
    targets, already smoothed by whoever mixed them, so ``smoothing`` is not applied).
    Smoothing stops the model pushing logits to infinity for the true class.
    """
    if target.dim() == 2:
        return torch.sum(-target * torch.log_softmax(logits.float(), dim=-1), dim=-1).mean()
    return nn.functional.cross_entropy(logits.float(), target, label_smoothing=smoothing)
