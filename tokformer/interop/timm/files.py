"""timm weight files: a state dict read without unpickling code, and a tokformer ViT loaded from one.

A file holds weights only, so the spec is inferred from their shapes
(:func:`~.vit.spec_from_state_dict`): classic ViTs load this way; a RoPE ViT (timm ``Eva``),
whose rotary settings are not in its weights, is refused with what to do instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import Tensor

from tokformer.classifier import EncoderClassifier
from tokformer.errors import DataError
from tokformer.interop.timm import vit
from tokformer.tokenizers.image import ImagePatchTokenizer


def read_weights(path: str | Path) -> dict[str, Tensor]:
    """A state dict from a local ``.safetensors`` or ``.pth``/``.pt``/``.bin`` file, never unpickling code.

    ``.pth`` files are read with ``torch.load(weights_only=True)``; a ``{"state_dict": ...}``
    or ``{"model": ...}`` wrapper and ``module.`` prefixes (DDP) are removed.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"weights file not found: {path}")
    try:
        if path.suffix == ".safetensors":
            state: Any = load_file(str(path))
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # safetensors and torch.load raise many types for a bad file
        raise DataError(f"cannot read weights {path}: {str(err).splitlines()[0] if str(err) else err!r}") from None
    for wrapper in ("state_dict", "model"):
        if isinstance(state, dict) and isinstance(state.get(wrapper), dict):
            state = state[wrapper]
    if not isinstance(state, dict) or not all(isinstance(v, Tensor) for v in state.values()):
        raise DataError(f"{path} does not hold a state dict of tensors")
    return {k.removeprefix("module."): v for k, v in state.items()}


def load_timm_checkpoint(path: str | Path, **overrides: Any) -> tuple[ImagePatchTokenizer, EncoderClassifier]:
    """A tokformer ViT with the weights of a local timm ViT checkpoint (``overrides`` fix the spec)."""
    state = read_weights(path)
    spec = vit.spec_from_state_dict(state, **overrides)
    tokenizer, model = vit.build(spec)
    model.load_state_dict(vit.from_timm_state_dict(state, spec))
    return tokenizer, model
