"""AdamW with decay on weight matrices only, and the warmup + cosine learning-rate schedule.

Decay pulls weights toward zero; that regularises the matrices of linear layers but hurts
embeddings (rare tokens get erased), norm gains (pulled toward 0 instead of 1) and biases.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from tokformer.runtime.config import TrainConfig

# Parameters of these modules never decay, whatever their shape.
NO_DECAY_MODULES: tuple[type[nn.Module], ...] = (
    nn.Embedding,
    nn.LayerNorm,
    nn.GroupNorm,
    nn.RMSNorm,
    nn.modules.batchnorm._BatchNorm,
)


def no_decay_names(model: nn.Module) -> set[str]:
    """Names of parameters excluded from weight decay.

    Excluded: parameters with fewer than 2 dims (biases, gains), parameters of embedding
    and norm modules, and any a module lists in its ``no_weight_decay()`` hook (names
    relative to that module), e.g. a learned ``nn.Parameter`` position table.
    """
    names = {name for name, p in model.named_parameters() if p.dim() < 2}
    for prefix, module in model.named_modules():
        dotted = f"{prefix}." if prefix else ""
        if isinstance(module, NO_DECAY_MODULES):
            names |= {dotted + n for n, _ in module.named_parameters(recurse=False)}
        hook = getattr(module, "no_weight_decay", None)
        if callable(hook):
            names |= {dotted + n for n in hook()}
    return names


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW over two groups: decayed matrices and everything else (decay 0)."""
    skip = no_decay_names(model)
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    groups = [
        {"params": [p for n, p in params if n not in skip], "weight_decay": cfg.weight_decay},
        {"params": [p for n, p in params if n in skip], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2))


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning rate for optimizer step ``step`` (0-based): linear warmup from lr/warmup to lr,
    then cosine decay to ``lr * min_lr_ratio`` at the last step. A pure function of the step,
    so the schedule's state is just the step count."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    decay_steps = max(1, cfg.steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / decay_steps)
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + 0.5 * (cfg.lr - floor) * (1.0 + math.cos(math.pi * progress))


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
