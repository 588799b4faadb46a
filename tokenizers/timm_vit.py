"""timm ``VisionTransformer`` weights <-> tokformer's ViT (image patch tokenizer + EncoderClassifier).

The two models compute the same function with the same parameters under other names:

==============================  ======================================  ==========================
timm                            tokformer                               how
==============================  ======================================  ==========================
patch_embed.proj.weight         embedder.proj.weight                    [d, C, P, P] -> [d, C*P*P]
patch_embed.proj.bias           embedder.proj.bias                      same
cls_token, pos_embed            embedder.cls_token, embedder.pos_embed  same (``no_embed_class`` kept)
blocks.i.*                      encoder.blocks.i.*                      same names, by design
norm.*                          encoder.norm.*                          final norm (absent with fc_norm)
fc_norm.*                       head.norm.*                             post-pool norm (avg pooling)
head.*                          head.proj.*                             same
==============================  ======================================  ==========================

A conv with kernel = stride = P is a linear map of each flattened patch, and the image
tokenizer flattens patches in the conv weight's ``(c, p1, p2)`` order, so the projection
is the conv weight reshaped. timm's ``qkv_bias=False`` becomes a zero bias here (and is
dropped again on export). Unsupported timm options (layer scale, register tokens,
pre-norm, q/k norm, attention pooling) are refused with a message rather than
converted wrongly. timm is imported lazily, only by the functions that build a timm model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import Tensor, nn

from tokformer.classifier import EncoderClassifier
from tokformer.config import TransformerConfig
from tokformer.errors import ConfigError, DataError
from tokformer.heads import ClassificationHead
from tokformer.tokenizers.image import ImagePatchTokenizer

_SAME_NAME_PARTS = ("norm1", "attn.qkv", "attn.proj", "norm2", "mlp.fc1", "mlp.fc2")
_UNSUPPORTED = {
    "reg_token": "register tokens",
    "norm_pre.": "pre-norm (CLIP-style)",
    ".ls1.": "layer scale",
    ".ls2.": "layer scale",
    ".q_norm.": "q/k normalisation",
    ".k_norm.": "q/k normalisation",
    "attn_pool.": "attention pooling",
    "patch_embed.norm.": "a patch-embedding norm",
    ".norm.weight": "a norm inside the MLP or attention",
}


@dataclass
class ViTSpec:
    """Everything that fixes a ViT's shape: enough to build it in either library."""

    image_size: tuple[int, int]
    patch_size: int
    channels: int
    d_model: int
    depth: int
    n_heads: int
    d_ff: int
    n_classes: int
    class_token: bool = True
    no_embed_class: bool = False
    pool: str = "cls"
    final_norm: bool = True
    fc_norm: bool = False
    qkv_bias: bool = True
    norm_eps: float = 1e-6

    def timm_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``timm.models.vision_transformer.VisionTransformer`` for this spec."""
        return {
            "img_size": self.image_size,
            "patch_size": self.patch_size,
            "in_chans": self.channels,
            "num_classes": self.n_classes,
            "global_pool": {"cls": "token", "mean": "avg"}[self.pool],
            "embed_dim": self.d_model,
            "depth": self.depth,
            "num_heads": self.n_heads,
            "mlp_ratio": self.d_ff / self.d_model,
            "qkv_bias": self.qkv_bias,
            "class_token": self.class_token,
            "no_embed_class": self.no_embed_class,
            "final_norm": self.final_norm or self.fc_norm,  # timm: any final norm; fc_norm: after pooling
            "fc_norm": self.fc_norm,
        }


def build_vit(spec: ViTSpec, **tokenizer_options: Any) -> tuple[ImagePatchTokenizer, EncoderClassifier]:
    """A freshly initialised tokformer ViT of ``spec``: its tokenizer (learned positions) and model."""
    tokenizer = ImagePatchTokenizer(
        spec.patch_size,
        spec.image_size,
        channels=spec.channels,
        class_token=spec.class_token,
        position="learned",
        no_embed_class=spec.no_embed_class,
        **tokenizer_options,
    )
    encoder_cfg = TransformerConfig(
        d_model=spec.d_model,
        n_heads=spec.n_heads,
        n_layers=spec.depth,
        d_ff=spec.d_ff,
        dropout=0.0,
        activation="gelu",
        norm_eps=spec.norm_eps,
        final_norm=spec.final_norm,
    )
    head = ClassificationHead(
        spec.d_model,
        spec.n_classes,
        pool=spec.pool,
        n_prefix=int(spec.class_token),
        norm=spec.fc_norm,
        norm_eps=spec.norm_eps,
    )
    return tokenizer, EncoderClassifier(tokenizer.build_embedder(spec.d_model), encoder_cfg, head)


def from_timm_state_dict(state: dict[str, Tensor], spec: ViTSpec) -> dict[str, Tensor]:
    """timm ``VisionTransformer`` state dict -> the state dict of :func:`build_vit` ``(spec)``'s model."""
    _refuse_unsupported(state)
    out: dict[str, Tensor] = {}
    remaining = dict(state)

    def move(timm_key: str, ours: str, fn: Any = None) -> None:
        value = remaining.pop(timm_key)
        out[ours] = fn(value) if fn is not None else value

    move("patch_embed.proj.weight", "embedder.proj.weight", lambda w: w.flatten(1))  # [d, C, P, P] -> [d, C*P*P]
    move("patch_embed.proj.bias", "embedder.proj.bias")
    for key in ("cls_token", "pos_embed"):
        if key in remaining:
            move(key, f"embedder.{key}")
    for i in range(spec.depth):
        for part in _SAME_NAME_PARTS:
            for kind in ("weight", "bias"):
                key = f"blocks.{i}.{part}.{kind}"
                if key in remaining:
                    move(key, f"encoder.{key}")
        if not spec.qkv_bias:  # timm has no qkv bias; ours is a zero one
            out[f"encoder.blocks.{i}.attn.qkv.bias"] = torch.zeros(3 * spec.d_model)
    for timm_name, ours in (("norm", "encoder.norm"), ("fc_norm", "head.norm"), ("head", "head.proj")):
        for kind in ("weight", "bias"):
            if f"{timm_name}.{kind}" in remaining:
                move(f"{timm_name}.{kind}", f"{ours}.{kind}")
    if remaining:
        raise ConfigError(f"timm ViT weights not understood: {', '.join(sorted(remaining)[:8])}")
    return out


def to_timm_state_dict(state: dict[str, Tensor], spec: ViTSpec) -> dict[str, Tensor]:
    """The inverse of :func:`from_timm_state_dict`: a tokformer ViT's state dict -> timm's."""
    out: dict[str, Tensor] = {}
    for key, value in state.items():
        if key == "embedder.proj.weight":
            c, p = spec.channels, spec.patch_size
            out["patch_embed.proj.weight"] = value.reshape(-1, c, p, p)  # [d, C*P*P] -> [d, C, P, P]
        elif key == "embedder.proj.bias":
            out["patch_embed.proj.bias"] = value
        elif key.startswith("embedder."):
            out[key.removeprefix("embedder.")] = value
        elif key.endswith("attn.qkv.bias") and not spec.qkv_bias:
            if value.any():
                raise ConfigError("this model has a non-zero qkv bias; export it with qkv_bias=True")
        elif key.startswith("encoder."):
            out[key.removeprefix("encoder.")] = value
        elif key.startswith("head.norm."):
            out["fc_norm." + key.removeprefix("head.norm.")] = value
        elif key.startswith("head.proj."):
            out["head." + key.removeprefix("head.proj.")] = value
        else:
            raise ConfigError(f"not part of a timm ViT: {key}")
    return out


def spec_from_timm_model(model: nn.Module) -> ViTSpec:
    """Read the shape of a ``timm.models.vision_transformer.VisionTransformer`` instance."""
    block = model.blocks[0]
    if type(block).__name__ != "Block" or not isinstance(getattr(block.mlp, "act", None), nn.GELU):
        raise ConfigError("only timm ViTs of standard Blocks with a GELU MLP convert")
    if block.mlp.act.approximate != "none":
        raise ConfigError("only exact (erf) GELU converts; this model uses the tanh approximation")
    if model.global_pool not in ("token", "avg"):
        raise ConfigError(f"timm global_pool={model.global_pool!r} has no tokformer equivalent (token or avg)")
    patch = model.patch_embed.patch_size
    if patch[0] != patch[1]:
        raise ConfigError(f"only square patches convert, got {patch}")
    norm = model.norm if isinstance(model.norm, nn.LayerNorm) else model.fc_norm
    return ViTSpec(
        image_size=tuple(model.patch_embed.img_size),
        patch_size=patch[0],
        channels=model.patch_embed.proj.in_channels,
        d_model=model.embed_dim,
        depth=len(model.blocks),
        n_heads=block.attn.num_heads,
        d_ff=block.mlp.fc1.out_features,
        n_classes=model.num_classes,
        class_token=model.has_class_token,
        no_embed_class=model.no_embed_class,
        pool={"token": "cls", "avg": "mean"}[model.global_pool],
        final_norm=isinstance(model.norm, nn.LayerNorm),
        fc_norm=isinstance(model.fc_norm, nn.LayerNorm),
        qkv_bias=block.attn.qkv.bias is not None,
        norm_eps=getattr(norm, "eps", 1e-6),
    )


def spec_from_state_dict(state: dict[str, Tensor], **overrides: Any) -> ViTSpec:
    """Infer a :class:`ViTSpec` from the tensor shapes of a timm ViT checkpoint.

    What shapes cannot tell is assumed and can be overridden: ``n_heads`` = d/64 (every
    timm ViT from Tiny to Huge), a square image, ``pool`` = ``mean`` when there is an
    ``fc_norm`` else ``cls``.
    """
    _refuse_unsupported(state)
    unknown = set(overrides) - set(ViTSpec.__dataclass_fields__)
    if unknown:
        raise ConfigError(f"unknown ViT spec field(s) {sorted(unknown)}; valid: {sorted(ViTSpec.__dataclass_fields__)}")
    try:
        d, c, p, _ = state["patch_embed.proj.weight"].shape
    except KeyError:
        raise DataError("not a timm ViT checkpoint: no patch_embed.proj.weight") from None
    class_token = "cls_token" in state
    grid_cells = state["pos_embed"].shape[1] if "pos_embed" in state else 0
    embed_class = class_token and "image_size" not in overrides and _is_square(grid_cells - 1)
    if "image_size" in overrides:
        size = overrides["image_size"]
        gh, gw = (size, size) if isinstance(size, int) else size
        embed_class = class_token and grid_cells == (gh // p) * (gw // p) + 1
    else:
        side = math.isqrt(grid_cells - int(embed_class)) * p
        overrides["image_size"] = (side, side)
    if "n_classes" not in overrides and "head.weight" not in state:
        raise ConfigError("this checkpoint has no classifier head: say how many classes (n_classes)")
    depth = len({k.split(".")[1] for k in state if k.startswith("blocks.") and k.endswith("norm1.weight")})
    fields = {
        "patch_size": p,
        "channels": c,
        "d_model": d,
        "depth": depth,
        "n_heads": max(1, d // 64),
        "d_ff": state["blocks.0.mlp.fc1.weight"].shape[0],
        "n_classes": state["head.weight"].shape[0] if "head.weight" in state else None,
        "class_token": class_token,
        "no_embed_class": class_token and not embed_class,
        "pool": "mean" if "fc_norm.weight" in state or not class_token else "cls",
        "final_norm": "norm.weight" in state,
        "fc_norm": "fc_norm.weight" in state,
        "qkv_bias": "blocks.0.attn.qkv.bias" in state,
    }
    fields.update(overrides)
    image_size = fields.pop("image_size")
    return ViTSpec(image_size=(image_size, image_size) if isinstance(image_size, int) else tuple(image_size), **fields)


def _is_square(n: int) -> bool:
    return n > 0 and math.isqrt(n) ** 2 == n


def _refuse_unsupported(state: dict[str, Tensor]) -> None:
    for key in state:
        for pattern, what in _UNSUPPORTED.items():
            if pattern in key:
                raise ConfigError(f"timm ViT with {what} ({key}) is not supported by tokformer's ViT")


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
    spec = spec_from_state_dict(state, **overrides)
    tokenizer, model = build_vit(spec)
    model.load_state_dict(from_timm_state_dict(state, spec))
    return tokenizer, model


def from_timm(timm_model: nn.Module, **tokenizer_options: Any) -> tuple[ImagePatchTokenizer, EncoderClassifier]:
    """The tokformer twin of a timm ``VisionTransformer``: same weights, same logits."""
    spec = spec_from_timm_model(timm_model)
    tokenizer, model = build_vit(spec, **tokenizer_options)
    model.load_state_dict(from_timm_state_dict(timm_model.state_dict(), spec))
    return tokenizer, model


def to_timm(model: EncoderClassifier, spec: ViTSpec, **timm_kwargs: Any) -> nn.Module:
    """A timm ``VisionTransformer`` holding ``model``'s weights (imports timm)."""
    from timm.models.vision_transformer import VisionTransformer

    timm_model = VisionTransformer(**{**spec.timm_kwargs(), **timm_kwargs})
    timm_model.load_state_dict(to_timm_state_dict(model.state_dict(), spec))
    return timm_model.eval()

