"""timm ``VisionTransformer`` weights <-> tokformer's ViT (image patch tokenizer + EncoderClassifier).

The two models compute the same function with the same parameters under other names:

==============================  ======================================  ==========================
timm                            tokformer                               how
==============================  ======================================  ==========================
patch_embed.proj.weight         embedder.proj.weight                    [d, C, P, P] -> [d, C*P*P]
patch_embed.proj.bias           embedder.proj.bias                      same
cls_token, pos_embed            embedder.cls_token, embedder.pos_embed  same (``no_embed_class`` kept)
reg_token                       encoder.registers                       same values
norm_pre.*                      encoder.norm_pre.*                      CLIP's pre-norm
blocks.i.*                      encoder.blocks.i.*                      same names, by design (ls1/ls2,
                                                                        q_norm/k_norm included)
norm.*                          encoder.norm.*                          final norm (absent with fc_norm)
attn_pool.{latent,norm,mlp}     head.attn_pool.{latent,norm,mlp}        SigLIP's MAP head
attn_pool.{q,kv,proj}           head.attn_pool.attn.{q,kv,proj}         same
fc_norm.*                       head.norm.*                             post-pool norm (avg pooling)
head.*                          head.proj.*                             same
==============================  ======================================  ==========================

Families: the classic ViT, DeiT-3 and DINOv2 (layer scale), DINOv2 with registers (tokformer's
encoder prepends register tokens where timm puts them after the class token; attention does
not care about order, and neither carries a position), CLIP/OpenCLIP (pre-norm, quick GELU),
SigLIP (no class token, tanh GELU, attention pooling), and gated (SwiGLU) MLPs.

A conv with kernel = stride = P is a linear map of each flattened patch, and the image
tokenizer flattens patches in the conv weight's ``(c, p1, p2)`` order, so the projection
is the conv weight reshaped. timm's ``qkv_bias=False`` becomes a zero bias here (and is
dropped again on export). Unsupported timm options (layer scale, register tokens,
pre-norm, q/k norm, attention pooling) are refused with a message rather than
converted wrongly. timm is imported lazily, only by the functions that build a timm model.

:func:`from_timm` preprocesses with the model's own ``pretrained_cfg`` mean and std (a
SigLIP trained on 0.5/0.5 is wrong by a visible margin with ImageNet's), unless told otherwise.
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

_SAME_NAME_PARTS = ("norm1", "attn.qkv", "attn.q_norm", "attn.k_norm", "attn.proj", "ls1", "norm2", "mlp.fc1",
                    "mlp.fc2", "ls2")
_UNSUPPORTED = {
    "patch_embed.norm.": "a patch-embedding norm",
    "mlp.norm.": "a norm inside the MLP",
    ".attn.norm.": "a norm inside attention",
    "attn_pool.pos_embed": "attention pooling with positions",
    "attn_pool.q_norm.": "attention pooling with q/k norm",
}
_ACTIVATIONS = {("GELU", "none"): "gelu", ("GELU", "tanh"): "gelu_tanh", ("GELUTanh", ""): "gelu_tanh",
                ("QuickGELU", ""): "quick_gelu", ("SiLU", ""): "silu"}


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
    activation: str = "gelu"
    mlp: str = "plain"
    layer_scale: float | None = None
    qk_norm: bool = False
    n_registers: int = 0
    pre_norm: bool = False
    pool_ff: int | None = None
    patch_bias: bool = True

    def timm_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``timm.models.vision_transformer.VisionTransformer`` for this spec."""
        return {
            "img_size": self.image_size,
            "patch_size": self.patch_size,
            "in_chans": self.channels,
            "num_classes": self.n_classes,
            "global_pool": {"cls": "token", "mean": "avg", "map": "map"}[self.pool],
            "embed_dim": self.d_model,
            "depth": self.depth,
            "num_heads": self.n_heads,
            "mlp_ratio": self.d_ff / self.d_model,
            "qkv_bias": self.qkv_bias,
            "class_token": self.class_token,
            "no_embed_class": self.no_embed_class,
            "final_norm": self.final_norm or self.fc_norm,  # timm: any final norm; fc_norm: after pooling
            "fc_norm": self.fc_norm,
            "act_layer": self.activation if self.mlp == "plain" else "silu",
            "init_values": self.layer_scale,
            "qk_norm": self.qk_norm,
            "reg_tokens": self.n_registers,
            "pre_norm": self.pre_norm,
            **self._timm_mlp(),
        }

    def _timm_mlp(self) -> dict[str, Any]:
        from timm.layers import SwiGLUPacked

        if self.mlp == "plain":
            return {}
        return {"mlp_layer": SwiGLUPacked, "mlp_ratio": 2 * self.d_ff / self.d_model}


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
        activation=spec.activation,
        mlp=spec.mlp,
        norm_eps=spec.norm_eps,
        final_norm=spec.final_norm,
        layer_scale=spec.layer_scale,
        qk_norm=spec.qk_norm,
        n_registers=spec.n_registers,
        input_norm=spec.pre_norm,
    )
    head = ClassificationHead(
        spec.d_model,
        spec.n_classes,
        pool=spec.pool,
        n_prefix=int(spec.class_token),
        norm=spec.fc_norm,
        norm_eps=spec.norm_eps,
        pool_heads=spec.n_heads,
        pool_ff=spec.pool_ff,
        pool_activation=spec.activation,
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
    if spec.patch_bias:
        move("patch_embed.proj.bias", "embedder.proj.bias")
    else:  # CLIP's patch projection has no bias (timm: pre_norm); ours is a zero one
        out["embedder.proj.bias"] = torch.zeros(spec.d_model)
    for key in ("cls_token", "pos_embed"):
        if key in remaining:
            move(key, f"embedder.{key}")
    if "reg_token" in remaining:
        move("reg_token", "encoder.registers")
    for key in [k for k in remaining if k.startswith(("norm_pre.", "attn_pool."))]:
        move(key, _ours_of(key))
    for key in [k for k in remaining if k.startswith("blocks.") and k.split(".", 2)[2].startswith(_SAME_NAME_PARTS)]:
        move(key, f"encoder.{key}")
    for i in range(spec.depth):
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
            if spec.patch_bias:
                out["patch_embed.proj.bias"] = value
            elif value.any():
                raise ConfigError("this model has a non-zero patch-embedding bias, which a pre-norm timm ViT lacks")
        elif key.startswith("embedder."):
            out[key.removeprefix("embedder.")] = value
        elif key == "encoder.registers":
            out["reg_token"] = value
        elif key.startswith(("encoder.norm_pre.", "head.attn_pool.")):
            out[_timm_of(key)] = value
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


_POOL_RENAMES = (("attn_pool.q.", "head.attn_pool.attn.q."), ("attn_pool.kv.", "head.attn_pool.attn.kv."),
                 ("attn_pool.proj.", "head.attn_pool.attn.proj."), ("attn_pool.", "head.attn_pool."),
                 ("norm_pre.", "encoder.norm_pre."))


def _ours_of(timm_key: str) -> str:
    for theirs, ours in _POOL_RENAMES:
        if timm_key.startswith(theirs):
            return ours + timm_key.removeprefix(theirs)
    raise KeyError(timm_key)


def _timm_of(our_key: str) -> str:
    for theirs, ours in _POOL_RENAMES:
        if our_key.startswith(ours):
            return theirs + our_key.removeprefix(ours)
    raise KeyError(our_key)


def _activation_name(act: nn.Module) -> str:
    key = (type(act).__name__, getattr(act, "approximate", ""))
    if key not in _ACTIVATIONS:
        raise ConfigError(f"timm ViT activation {type(act).__name__}{key[1] and f'({key[1]})'} has no tokformer twin")
    return _ACTIVATIONS[key]


def spec_from_timm_model(model: nn.Module) -> ViTSpec:
    """Read the shape of a ``timm.models.vision_transformer.VisionTransformer`` instance."""
    block = model.blocks[0]
    if type(block).__name__ != "Block":
        raise ConfigError(f"only timm ViTs of standard Blocks convert, not {type(block).__name__}")
    mlp_kind = type(block.mlp).__name__
    gated = mlp_kind == "GluMlp" and not block.mlp.gate_last and isinstance(block.mlp.act, nn.SiLU)
    if mlp_kind != "Mlp" and not gated:
        raise ConfigError(f"timm MLP {mlp_kind} has no tokformer twin (Mlp and SwiGLUPacked convert)")
    if model.global_pool not in ("token", "avg", "map"):
        raise ConfigError(f"timm global_pool={model.global_pool!r} has no tokformer equivalent (token, avg or map)")
    patch = model.patch_embed.patch_size
    if patch[0] != patch[1]:
        raise ConfigError(f"only square patches convert, got {patch}")
    if model.reg_token is not None and not model.no_embed_class:
        raise ConfigError("register tokens with position embeddings (no_embed_class=False) do not convert")
    norm = model.norm if isinstance(model.norm, nn.LayerNorm) else model.fc_norm
    pool = getattr(model, "attn_pool", None)
    return ViTSpec(
        image_size=tuple(model.patch_embed.img_size),
        patch_size=patch[0],
        channels=model.patch_embed.proj.in_channels,
        d_model=model.embed_dim,
        depth=len(model.blocks),
        n_heads=block.attn.num_heads,
        d_ff=block.mlp.fc2.in_features,
        n_classes=model.num_classes,
        class_token=model.has_class_token,
        no_embed_class=model.no_embed_class,
        pool={"token": "cls", "avg": "mean", "map": "map"}[model.global_pool],
        final_norm=isinstance(model.norm, nn.LayerNorm),
        fc_norm=isinstance(model.fc_norm, nn.LayerNorm),
        qkv_bias=block.attn.qkv.bias is not None,
        norm_eps=getattr(norm, "eps", 1e-6),
        activation=_activation_name(block.mlp.act),
        mlp="swiglu" if gated else "plain",
        layer_scale=float(block.ls1.gamma.detach().flatten()[0]) if hasattr(block.ls1, "gamma") else None,
        qk_norm=not isinstance(block.attn.q_norm, nn.Identity),
        n_registers=model.num_reg_tokens,
        pre_norm=not isinstance(model.norm_pre, nn.Identity),
        pool_ff=pool.mlp.fc1.out_features if pool is not None else None,
        patch_bias=model.patch_embed.proj.bias is not None,
    )


def spec_from_state_dict(state: dict[str, Tensor], **overrides: Any) -> ViTSpec:
    """Infer a :class:`ViTSpec` from the tensor shapes of a timm ViT checkpoint.

    What shapes cannot tell is assumed and can be overridden: ``n_heads`` = d/64 (every
    timm ViT from Tiny to Huge), a square image, ``pool`` = ``mean`` when there is an
    ``fc_norm`` else ``cls``, the activation (exact GELU; CLIP's quick GELU and SigLIP's
    tanh GELU leave no trace in the weights: pass ``activation``). A gated MLP is told by
    its ``fc1`` being twice as wide as ``fc2`` reads (SwiGLUPacked).
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


def with_pretrained_normalisation(timm_model: nn.Module, tokenizer_options: dict[str, Any]) -> dict[str, Any]:
    """``tokenizer_options`` with the model's ``pretrained_cfg`` mean/std filled in where not given."""
    pretrained = getattr(timm_model, "pretrained_cfg", None) or {}
    defaults = {key: tuple(pretrained[key]) for key in ("mean", "std") if pretrained.get(key) is not None}
    return {**defaults, **tokenizer_options}


def from_timm(timm_model: nn.Module, **tokenizer_options: Any) -> tuple[ImagePatchTokenizer, EncoderClassifier]:
    """The tokformer twin of a timm ``VisionTransformer``: same weights, same logits.

    Images are normalised with the model's ``pretrained_cfg`` mean/std, as timm's own data
    config would; pass ``mean``/``std`` to override (None: no normalisation).
    """
    spec = spec_from_timm_model(timm_model)
    tokenizer, model = build_vit(spec, **with_pretrained_normalisation(timm_model, tokenizer_options))
    model.load_state_dict(from_timm_state_dict(timm_model.state_dict(), spec))
    return tokenizer, model


def to_timm(model: EncoderClassifier, spec: ViTSpec, **timm_kwargs: Any) -> nn.Module:
    """A timm ``VisionTransformer`` holding ``model``'s weights (imports timm)."""
    from timm.models.vision_transformer import VisionTransformer

    timm_model = VisionTransformer(**{**spec.timm_kwargs(), **timm_kwargs})
    timm_model.load_state_dict(to_timm_state_dict(model.state_dict(), spec))
    return timm_model.eval()

