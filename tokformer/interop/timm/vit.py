"""timm's classic ``VisionTransformer`` <-> tokformer's ViT: the mapping, and the spec read off a model or its weights.

Converted: the classic ViT, DeiT-3 and DINOv2 (layer scale), DINOv2 with registers,
DINOv2-giant's gated MLP (``SwiGLUPacked``), CLIP/OpenCLIP (pre-norm and a bias-free patch
projection, quick GELU), SigLIP (no class token, tanh GELU, attention pooling), and q/k
norm; ``global_pool`` ``token``, ``avg`` or ``map``, with or without a class token,
``fc_norm``, ``final_norm``, ``no_embed_class``, square patches of any size, rectangular
images. Beyond the keys every family shares (:mod:`.common`):

==============================  ======================================  ==========================
timm                            tokformer                               how
==============================  ======================================  ==========================
blocks.i.*                      encoder.blocks.i.*                      same names, by design (ls1/ls2,
                                                                        q_norm/k_norm included)
blocks.i.attn.qkv.bias          encoder.blocks.i.attn.qkv.bias          a zero one where timm has
                                                                        ``qkv_bias=False`` (dropped
                                                                        again on export)
attn_pool.{latent,norm,mlp}     head.attn_pool.{latent,norm,mlp}        SigLIP's MAP head
attn_pool.{q,kv,proj}           head.attn_pool.attn.{q,kv,proj}         same
==============================  ======================================  ==========================

Refused in one line, naming the option, rather than converted wrongly: a patch-embedding
norm, a norm inside the MLP or attention, attention pooling with positions or q/k norm,
register tokens that carry positions, ``pos_embed='none'``, blocks other than timm's
``Block``, MLPs other than ``Mlp`` and ``SwiGLUPacked``, activations other than GELU (exact
or tanh), quick GELU and SiLU, norms other than LayerNorm, non-square patches, and a model
without a classifier head. timm is imported only by :meth:`ViTSpec.timm_kwargs` and
:func:`timm_class`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from tokformer.classifier import EncoderClassifier
from tokformer.errors import ConfigError, DataError
from tokformer.interop.timm import common
from tokformer.tokenizers.image import ImagePatchTokenizer

FAMILY = "ViT"
TIMM_CLASS = "timm.models.vision_transformer.VisionTransformer"
_SAME_NAME_PARTS = ("norm1", "attn.qkv", "attn.q_norm", "attn.k_norm", "attn.proj", "ls1", "norm2", "mlp.fc1",
                    "mlp.fc2", "ls2")
_POOL_RENAMES = (("attn_pool.q.", "head.attn_pool.attn.q."), ("attn_pool.kv.", "head.attn_pool.attn.kv."),
                 ("attn_pool.proj.", "head.attn_pool.attn.proj."), ("attn_pool.", "head.attn_pool."))
_UNSUPPORTED = {
    "patch_embed.norm.": "a patch-embedding norm",
    "mlp.norm.": "a norm inside the MLP",
    ".attn.norm.": "a norm inside attention",
    "attn_pool.pos_embed": "attention pooling with positions",
    "attn_pool.q_norm.": "attention pooling with q/k norm",
}
_refuse = partial(common.refuse, FAMILY)
_ACTIVATIONS = {("GELU", "none"): "gelu", ("GELU", "tanh"): "gelu_tanh", ("GELUTanh", ""): "gelu_tanh",
                ("QuickGELU", ""): "quick_gelu", ("SiLU", ""): "silu"}


@dataclass
class ViTSpec(common.Shape):
    """Everything that fixes a classic timm ViT's shape: enough to build it in either library.

    ``activation``: the MLP's (a gated MLP's is SiLU); ``pool_ff``: the MAP head's MLP width;
    ``patch_bias``: whether the patch projection has a bias (CLIP's has none).
    """

    activation: str = "gelu"
    pool_ff: int | None = None
    patch_bias: bool = True

    def timm_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``timm.models.vision_transformer.VisionTransformer`` for this spec."""
        return {
            **self.shared_timm_kwargs(),
            "mlp_ratio": self.d_ff / self.d_model,
            "final_norm": self.final_norm or self.fc_norm,  # timm: any final norm; fc_norm: after pooling
            "fc_norm": self.fc_norm,
            "act_layer": self.activation if self.mlp == "plain" else "silu",
            "reg_tokens": self.n_registers,
            "pre_norm": self.pre_norm,
            **self._timm_mlp(),
        }

    def _timm_mlp(self) -> dict[str, Any]:
        from timm.layers import SwiGLUPacked

        if self.mlp == "plain":
            return {}
        return {"mlp_layer": SwiGLUPacked, "mlp_ratio": 2 * self.d_ff / self.d_model}


def timm_class() -> type[nn.Module]:
    """timm's ``VisionTransformer`` (imports timm)."""
    from timm.models.vision_transformer import VisionTransformer

    return VisionTransformer


def build(spec: ViTSpec, **tokenizer_options: Any) -> tuple[ImagePatchTokenizer, EncoderClassifier]:
    """A freshly initialised tokformer ViT of ``spec``: its tokenizer (learned positions) and model."""
    return common.build_classifier(
        spec, tokenizer_options, position="learned", encoder={"activation": spec.activation},
        head={"pool_heads": spec.n_heads, "pool_ff": spec.pool_ff, "pool_activation": spec.activation},
    )


def spec_from_model(model: nn.Module) -> ViTSpec:
    """Read the shape of a ``timm.models.vision_transformer.VisionTransformer``, refusing what does not convert."""
    if not all(common.is_kind(b, "Block") for b in model.blocks):
        _refuse(f"blocks of type {type(model.blocks[0]).__name__} (timm's standard Block converts)")
    shape = common.shape_of(model, FAMILY)
    if model.pos_embed is None:
        _refuse("pos_embed='none' (no position embedding)")
    block = model.blocks[0]
    mlp_kind = type(block.mlp).__name__
    gated = mlp_kind == "GluMlp" and not block.mlp.gate_last and isinstance(block.mlp.act, nn.SiLU)
    if mlp_kind != "Mlp" and not gated:
        _refuse(f"MLP {mlp_kind} (Mlp and SwiGLUPacked convert)")
    pool = getattr(model, "attn_pool", None)
    return ViTSpec(
        **shape,
        qkv_bias=block.attn.qkv.bias is not None,
        activation=_activation_name(block.mlp.act),
        mlp="swiglu" if gated else "plain",
        layer_scale=float(block.ls1.gamma.detach().flatten()[0]) if hasattr(block.ls1, "gamma") else None,
        pool_ff=pool.mlp.fc1.out_features if pool is not None else None,
        patch_bias=model.patch_embed.proj.bias is not None,
    )


def _activation_name(act: nn.Module) -> str:
    key = (type(act).__name__, getattr(act, "approximate", ""))
    if key not in _ACTIVATIONS:
        _refuse(f"activation {type(act).__name__}{key[1] and f'({key[1]})'}")
    return _ACTIVATIONS[key]


def spec_from_state_dict(state: dict[str, Tensor], **overrides: Any) -> ViTSpec:
    """Infer a :class:`ViTSpec` from the tensor shapes of a timm ViT checkpoint.

    What shapes cannot tell is assumed and can be overridden: ``n_heads`` = d/64 (every
    timm ViT from Tiny to Huge), a square image, ``pool`` = ``mean`` when there is an
    ``fc_norm`` else ``cls``, the activation (exact GELU; CLIP's quick GELU and SigLIP's
    tanh GELU leave no trace in the weights: pass ``activation``). A gated MLP is told by
    its ``fc1`` being twice as wide as ``fc2`` reads (SwiGLUPacked).

    Weights with block keys a classic ViT does not have (an Eva's ``gamma_1``, ``q_bias``,
    ``q_proj``...) or without ``pos_embed`` are refused in one line: a RoPE ViT's rotary
    settings are not stored in its weights. An Eva whose keys all look classic (fused qkv
    with a full bias, no layer scale, learned positions) cannot be told apart here.
    """
    _refuse_unsupported(state)
    unknown = set(overrides) - set(ViTSpec.__dataclass_fields__)
    if unknown:
        raise ConfigError(f"unknown ViT spec field(s) {sorted(unknown)}; valid: {sorted(ViTSpec.__dataclass_fields__)}")
    try:
        d, c, p, _ = state["patch_embed.proj.weight"].shape
    except KeyError:
        raise DataError("not a timm ViT checkpoint: no patch_embed.proj.weight") from None
    blocks = [k for k in state if k.startswith("blocks.")]
    foreign = sorted(k for k in blocks if not k.split(".", 2)[2].startswith(_SAME_NAME_PARTS))
    if foreign or "pos_embed" not in state:
        found = ", ".join(foreign[:3]) if foreign else "no pos_embed"
        raise ConfigError(f"not a classic timm ViT checkpoint ({found}): if it is a RoPE ViT (timm Eva), whose rotary "
                          f"settings are not in its weights, {common.BUILD_IN_TIMM}")
    class_token = "cls_token" in state
    grid_cells = state["pos_embed"].shape[1]
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
    gated = state["blocks.0.mlp.fc1.weight"].shape[0] == 2 * state["blocks.0.mlp.fc2.weight"].shape[1]
    fields = {
        "patch_size": p,
        "channels": c,
        "d_model": d,
        "depth": depth,
        "n_heads": max(1, d // 64),
        "d_ff": state["blocks.0.mlp.fc2.weight"].shape[1],
        "n_classes": state["head.weight"].shape[0] if "head.weight" in state else None,
        "class_token": class_token,
        "no_embed_class": class_token and not embed_class,
        "pool": "map" if "attn_pool.latent" in state else ("mean" if "fc_norm.weight" in state or not class_token
                                                           else "cls"),
        "final_norm": "norm.weight" in state,
        "fc_norm": "fc_norm.weight" in state,
        "qkv_bias": "blocks.0.attn.qkv.bias" in state,
        "mlp": "swiglu" if gated else "plain",
        "layer_scale": 1.0 if "blocks.0.ls1.gamma" in state else None,
        "qk_norm": "blocks.0.attn.q_norm.weight" in state,
        "n_registers": state["reg_token"].shape[1] if "reg_token" in state else 0,
        "pre_norm": "norm_pre.weight" in state,
        "pool_ff": state["attn_pool.mlp.fc1.weight"].shape[0] if "attn_pool.latent" in state else None,
        "patch_bias": "patch_embed.proj.bias" in state,
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
                _refuse(f"{what} ({key})")


def from_timm_state_dict(state: dict[str, Tensor], spec: ViTSpec) -> dict[str, Tensor]:
    """timm ``VisionTransformer`` state dict -> the state dict of :func:`build` ``(spec)``'s model."""
    _refuse_unsupported(state)

    def block(remaining: dict[str, Tensor], theirs: str, ours: str) -> dict[str, Tensor]:
        return {} if spec.qkv_bias else {f"{ours}attn.qkv.bias": torch.zeros(3 * spec.d_model)}

    return common.from_timm_keys(state, spec, FAMILY, same_in_blocks=_SAME_NAME_PARTS, block=block,
                                 renames=_POOL_RENAMES)


def to_timm_state_dict(state: dict[str, Tensor], spec: ViTSpec) -> dict[str, Tensor]:
    """The inverse of :func:`from_timm_state_dict`: a tokformer ViT's state dict -> timm's."""

    def zero_qkv_bias(name: str, value: Tensor, out: dict[str, Tensor]) -> bool:
        if spec.qkv_bias or not name.endswith("attn.qkv.bias"):
            return False
        if value.any():
            raise ConfigError("this model has a non-zero qkv bias; export it with qkv_bias=True")
        return True

    return common.to_timm_keys(state, spec, FAMILY, key=zero_qkv_bias, renames=_POOL_RENAMES)
