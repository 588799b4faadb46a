"""timm Vision Transformers <-> tokformer (image patch tokenizer + EncoderClassifier), every family through one entry.

.. code-block:: python

    tokenizer, model = from_timm(timm_model)            # same weights, same logits
    back = to_timm(model, spec_from_timm_model(timm_model))   # and back, bit-exact

:func:`from_timm` takes timm's classic ``VisionTransformer`` (ViT, DeiT-3, DINOv2 with or
without registers, CLIP/OpenCLIP, SigLIP: :mod:`.vit`) and its RoPE ViTs, ``Eva`` (naver's
RoPE-ViT, timm's SBB ``rope_reg`` models: :mod:`.eva`), alike; anything else, and any option
that would make the two libraries compute different functions, is refused with one line
naming it. :func:`spec_from_timm_model` returns the family's spec (:class:`ViTSpec` or
:class:`EvaSpec`), and :func:`to_timm`, :func:`build_vit` and the state-dict functions take
either. Images are normalised with the timm model's ``pretrained_cfg`` mean/std (a SigLIP
trained on 0.5/0.5 is wrong by a visible margin with ImageNet's), unless told otherwise.

Checkpoint files (:func:`read_weights`, :func:`spec_from_state_dict`,
:func:`load_timm_checkpoint`) carry weights only, so only the classic family loads from a
file. Nothing here imports timm until a function needs a timm class.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from torch import Tensor, nn

from tokformer.classifier import EncoderClassifier
from tokformer.errors import ConfigError
from tokformer.interop.timm import eva, vit
from tokformer.interop.timm.eva import EvaSpec
from tokformer.interop.timm.files import load_timm_checkpoint, read_weights
from tokformer.interop.timm.vit import ViTSpec, spec_from_state_dict
from tokformer.tokenizers.image import ImagePatchTokenizer

__all__ = [
    "EvaSpec",
    "ViTSpec",
    "build_vit",
    "from_timm",
    "from_timm_state_dict",
    "load_timm_checkpoint",
    "read_weights",
    "spec_from_state_dict",
    "spec_from_timm_model",
    "to_timm",
    "to_timm_state_dict",
]

_FAMILIES = (vit, eva)


def _family_of_model(timm_model: nn.Module) -> ModuleType:
    classes = {f"{c.__module__}.{c.__qualname__}" for c in type(timm_model).__mro__}
    for family in _FAMILIES:
        if family.TIMM_CLASS in classes:
            return family
    raise ConfigError(f"{type(timm_model).__name__} is not a timm ViT that converts: tokformer takes timm's "
                      "VisionTransformer (ViT, DeiT-3, DINOv2, CLIP, SigLIP) and Eva (RoPE ViTs)")


def _family_of_spec(spec: ViTSpec | EvaSpec) -> ModuleType:
    if isinstance(spec, EvaSpec):
        return eva
    if isinstance(spec, ViTSpec):
        return vit
    raise ConfigError(f"expected a ViTSpec or an EvaSpec, got {type(spec).__name__}")


def spec_from_timm_model(timm_model: nn.Module) -> ViTSpec | EvaSpec:
    """The shape of a timm ``VisionTransformer`` (a :class:`ViTSpec`) or ``Eva`` (an :class:`EvaSpec`)."""
    return _family_of_model(timm_model).spec_from_model(timm_model)


def build_vit(spec: ViTSpec | EvaSpec, **tokenizer_options: Any) -> tuple[ImagePatchTokenizer, EncoderClassifier]:
    """A freshly initialised tokformer twin of ``spec``: its tokenizer and model."""
    return _family_of_spec(spec).build(spec, **tokenizer_options)


def from_timm_state_dict(state: dict[str, Tensor], spec: ViTSpec | EvaSpec) -> dict[str, Tensor]:
    """A timm state dict -> the state dict of :func:`build_vit` ``(spec)``'s model."""
    return _family_of_spec(spec).from_timm_state_dict(state, spec)


def to_timm_state_dict(state: dict[str, Tensor], spec: ViTSpec | EvaSpec) -> dict[str, Tensor]:
    """The inverse of :func:`from_timm_state_dict`: a tokformer twin's state dict -> timm's."""
    return _family_of_spec(spec).to_timm_state_dict(state, spec)


def from_timm(timm_model: nn.Module, **tokenizer_options: Any) -> tuple[ImagePatchTokenizer, EncoderClassifier]:
    """The tokformer twin of a timm ``VisionTransformer`` or ``Eva``: same weights, same logits.

    ``tokenizer_options`` go to :class:`ImagePatchTokenizer`. Images are normalised with the
    model's ``pretrained_cfg`` mean/std, as timm's own data config would; pass ``mean``/``std``
    to override (None: no normalisation).
    """
    family = _family_of_model(timm_model)
    spec = family.spec_from_model(timm_model)
    pretrained = getattr(timm_model, "pretrained_cfg", None) or {}
    normalisation = {key: tuple(pretrained[key]) for key in ("mean", "std") if pretrained.get(key) is not None}
    tokenizer, model = family.build(spec, **{**normalisation, **tokenizer_options})
    model.load_state_dict(family.from_timm_state_dict(timm_model.state_dict(), spec))
    return tokenizer, model


def to_timm(model: EncoderClassifier, spec: ViTSpec | EvaSpec, **timm_kwargs: Any) -> nn.Module:
    """A timm model of ``spec``'s family holding ``model``'s weights, in eval mode (imports timm).

    ``timm_kwargs`` override the constructor arguments the spec gives (``dynamic_img_size``...).
    """
    family = _family_of_spec(spec)
    timm_model = family.timm_class()(**{**spec.timm_kwargs(), **timm_kwargs})
    timm_model.load_state_dict(family.to_timm_state_dict(model.state_dict(), spec))
    return timm_model.eval()
