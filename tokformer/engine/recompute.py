"""Activation checkpointing: recompute each Transformer block's activations in backward.

A block's intermediate activations (attention scores, the MLP's hidden layer) dominate
training memory for long sequences. With ``--activation-checkpointing`` a block keeps only
its input; backward runs the block's forward again to rebuild the rest: less memory for
roughly a third more compute. The recomputation replays the RNG state of the forward pass
(dropout draws the same masks), so the losses and gradients are those of a run without it.

The blocks are found by type (:func:`transformer_blocks`): the encoder and decoder stacks of
:mod:`tokformer.transformer` hold them, whatever model a task builds around the stacks.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from tokformer.blocks import DecoderBlock, EncoderBlock

BLOCK_TYPES: tuple[type[nn.Module], ...] = (EncoderBlock, DecoderBlock)


def transformer_blocks(model: nn.Module) -> list[nn.Module]:
    """Every Transformer block of ``model``, in module order (a task's model holds them in the
    ``blocks`` lists of its :class:`~tokformer.transformer.Encoder` / ``Decoder`` stacks)."""
    return [module for module in model.modules() if isinstance(module, BLOCK_TYPES)]


class _Recomputed:
    """Mixin placed before a block's class: the forward runs under non-reentrant
    ``torch.utils.checkpoint``, which takes keyword arguments (masks, caches, rotations) and
    composes with FSDP's hooks, which stay outside it on the module's ``__call__``."""

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        forward = super().forward  # type: ignore[misc]
        if not torch.is_grad_enabled():  # evaluation and generation: nothing to save memory on
            return forward(*args, **kwargs)
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)


@functools.cache
def _recomputed_class(cls: type[nn.Module]) -> type[nn.Module]:
    return type(f"Recomputed{cls.__name__}", (_Recomputed, cls), {})


def checkpoint_activations(model: nn.Module) -> int:
    """Make every Transformer block of ``model`` recompute its activations in backward; returns
    how many. The blocks' classes are swapped (as FSDP2 does) rather than wrapped, so parameter
    names, state dicts and checkpoints are exactly those of the unchanged model."""
    blocks = transformer_blocks(model)
    for block in blocks:
        if not isinstance(block, _Recomputed):
            block.__class__ = _recomputed_class(type(block))
    return len(blocks)
