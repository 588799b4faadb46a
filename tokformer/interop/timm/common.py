"""What every timm ViT family shares on its way to and from tokformer.

Both families (:mod:`.vit`, :mod:`.eva`) become the same tokformer model, an
:class:`~tokformer.tokenizers.image.ImagePatchTokenizer` feeding an
:class:`~tokformer.classifier.EncoderClassifier`, and name everything outside their blocks
alike. Held here once: the fields every spec has (:class:`Shape`), building the model
(:func:`build_classifier`), reading those fields off a timm model (:func:`shape_of`), the
keys outside the blocks in both directions (:func:`from_timm_keys`, :func:`to_timm_keys`)
and the one-line refusal (:func:`refuse`).

==============================  ======================================  ==========================
timm                            tokformer                               how
==============================  ======================================  ==========================
patch_embed.proj.weight         embedder.proj.weight                    [d, C, P, P] -> [d, C*P*P]
patch_embed.proj.bias           embedder.proj.bias                      same; a zero one where timm
                                                                        has none (pre-norm models)
cls_token, pos_embed            embedder.cls_token, embedder.pos_embed  same (``no_embed_class`` kept)
reg_token                       encoder.registers                       same values
norm_pre.*                      encoder.norm_pre.*                      CLIP's pre-norm
norm.*                          encoder.norm.*                          final norm
fc_norm.*                       head.norm.*                             post-pool norm
head.*                          head.proj.*                             same
==============================  ======================================  ==========================

A conv with kernel = stride = P is a linear map of each flattened patch, and the image
tokenizer flattens patches in the conv weight's ``(c, p1, p2)`` order, so the projection is
the conv weight reshaped. tokformer's encoder puts register tokens before the class token
where timm puts them after: attention does not see the order, and neither carries a
position (or a rotation).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NoReturn

import torch
from torch import Tensor, nn

from tokformer.classifier import EncoderClassifier
from tokformer.config import TransformerConfig
from tokformer.errors import ConfigError
from tokformer.heads import ClassificationHead
from tokformer.tokenizers.image import ImagePatchTokenizer

#: timm's ``global_pool`` -> tokformer's ``pool``
POOLS = {"token": "cls", "avg": "mean", "map": "map"}
#: (timm prefix, tokformer prefix) of what sits outside the blocks, both families
OUTER_RENAMES = (("norm_pre.", "encoder.norm_pre."), ("norm.", "encoder.norm."), ("fc_norm.", "head.norm."),
                 ("head.", "head.proj."))
#: what to do with a timm model whose weights alone cannot say how it computes
BUILD_IN_TIMM = "build the model with timm (timm.create_model) and convert it with tokformer.interop.timm.from_timm"


@dataclass
class Shape:
    """The fields every timm ViT family's spec has; :class:`~.vit.ViTSpec` and
    :class:`~.eva.EvaSpec` add their own. Each spec also says ``patch_bias``."""

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
    n_registers: int = 0
    pool: str = "cls"
    final_norm: bool = True
    fc_norm: bool = False
    pre_norm: bool = False
    norm_eps: float = 1e-6
    mlp: str = "plain"
    qkv_bias: bool = True
    qk_norm: bool = False
    layer_scale: float | None = None

    def shared_timm_kwargs(self) -> dict[str, Any]:
        """The keyword arguments timm's ``VisionTransformer`` and ``Eva`` both take, for this spec."""
        return {
            "img_size": self.image_size,
            "patch_size": self.patch_size,
            "in_chans": self.channels,
            "num_classes": self.n_classes,
            "global_pool": {ours: theirs for theirs, ours in POOLS.items()}[self.pool],
            "embed_dim": self.d_model,
            "depth": self.depth,
            "num_heads": self.n_heads,
            "qkv_bias": self.qkv_bias,
            "qk_norm": self.qk_norm,
            "init_values": self.layer_scale,
            "class_token": self.class_token,
            "no_embed_class": self.no_embed_class,
        }


def refuse(family: str, what: str) -> NoReturn:
    """The one-line error for a timm option tokformer would compute differently."""
    raise ConfigError(f"timm {family} with {what} has no tokformer twin")


def is_kind(module: nn.Module | None, *names: str) -> bool:
    """Whether ``module``'s class is one of ``names`` (timm is never imported to ask)."""
    return module is not None and type(module).__name__ in names


def shape_of(model: nn.Module, family: str, pools: tuple[str, ...] = tuple(POOLS)) -> dict[str, Any]:
    """The :class:`Shape` fields of a timm ``VisionTransformer`` or ``Eva``, refusing what neither converts.

    ``pools``: the family's ``global_pool`` values that convert.
    """
    patch = tuple(model.patch_embed.patch_size)
    if patch[0] != patch[1]:
        refuse(family, f"non-square patches {patch}")
    if model.pos_embed is not None and model.reg_token is not None and not model.no_embed_class:
        refuse(family, "register tokens with position embeddings (no_embed_class=False)")
    if model.global_pool not in pools:
        refuse(family, f"global_pool={model.global_pool!r} ({', '.join(pools[:-1])} or {pools[-1]} convert)")
    if not isinstance(model.head, nn.Linear):
        refuse(family, "num_classes=0 (no classifier head)")
    block = model.blocks[0]
    norms = [model.norm_pre, model.norm, model.fc_norm]
    for b in model.blocks:
        norms += [b.norm1, b.norm2, b.attn.q_norm, b.attn.k_norm]
    for norm in norms:
        if not isinstance(norm, (nn.LayerNorm, nn.Identity)):
            refuse(family, f"norm_layer={type(norm).__name__} (only LayerNorm converts)")
    return {
        "image_size": tuple(model.patch_embed.img_size),
        "patch_size": patch[0],
        "channels": model.patch_embed.proj.in_channels,
        "d_model": model.embed_dim,
        "depth": len(model.blocks),
        "n_heads": block.attn.num_heads,
        "d_ff": block.mlp.fc2.in_features,
        "n_classes": model.num_classes,
        "class_token": model.cls_token is not None,
        "no_embed_class": model.no_embed_class,
        "n_registers": model.reg_token.shape[1] if model.reg_token is not None else 0,
        "pool": POOLS[model.global_pool],
        "final_norm": not isinstance(model.norm, nn.Identity),
        "fc_norm": not isinstance(model.fc_norm, nn.Identity),
        "pre_norm": not isinstance(model.norm_pre, nn.Identity),
        "norm_eps": block.norm1.eps,
        "qk_norm": not isinstance(block.attn.q_norm, nn.Identity),
    }


def build_classifier(
    spec: Any,
    tokenizer_options: dict[str, Any],
    *,
    position: str,
    encoder: dict[str, Any],
    head: dict[str, Any] | None = None,
) -> tuple[ImagePatchTokenizer, EncoderClassifier]:
    """A freshly initialised tokformer twin of ``spec``: the tokenizer and the classifier.

    ``position``: the tokenizer's (``learned`` or ``none``); ``encoder`` and ``head``: the
    family's own :class:`TransformerConfig` and :class:`ClassificationHead` options.
    """
    tokenizer = ImagePatchTokenizer(
        spec.patch_size,
        spec.image_size,
        channels=spec.channels,
        class_token=spec.class_token,
        position=position,
        no_embed_class=spec.no_embed_class,
        **tokenizer_options,
    )
    encoder_cfg = TransformerConfig(
        d_model=spec.d_model,
        n_heads=spec.n_heads,
        n_layers=spec.depth,
        d_ff=spec.d_ff,
        dropout=0.0,
        mlp=spec.mlp,
        norm_eps=spec.norm_eps,
        final_norm=spec.final_norm,
        layer_scale=spec.layer_scale,
        qk_norm=spec.qk_norm,
        n_registers=spec.n_registers,
        input_norm=spec.pre_norm,
        **encoder,
    )
    classifier = ClassificationHead(
        spec.d_model,
        spec.n_classes,
        pool=spec.pool,
        n_prefix=int(spec.class_token),
        norm=spec.fc_norm,
        norm_eps=spec.norm_eps,
        **(head or {}),
    )
    return tokenizer, EncoderClassifier(tokenizer.build_embedder(spec.d_model), encoder_cfg, classifier)


# A family's part of the mapping: from timm, (remaining timm keys, "blocks.i.", "encoder.blocks.i.") -> our
# tensors, popping what it took; to timm, (our key, tensor, timm state being built) -> whether it took the key.
BlockFromTimm = Callable[[dict[str, Tensor], str, str], dict[str, Tensor]]
KeyToTimm = Callable[[str, Tensor, dict[str, Tensor]], bool]


def from_timm_keys(
    state: dict[str, Tensor],
    spec: Any,
    family: str,
    *,
    same_in_blocks: tuple[str, ...],
    block: BlockFromTimm,
    renames: Iterable[tuple[str, str]] = (),
) -> dict[str, Tensor]:
    """A timm state dict under tokformer's names; any key left over is refused in one line.

    ``same_in_blocks``: block parts named alike in both (``norm1``, ``mlp.fc1``, ...);
    ``block``: the family's conversion of each block's other keys; ``renames``: the family's
    own (timm prefix, tokformer prefix) pairs outside the blocks.
    """
    remaining = dict(state)
    take = remaining.pop
    out = {"embedder.proj.weight": take("patch_embed.proj.weight").flatten(1)}  # [d, C, P, P] -> [d, C*P*P]
    out["embedder.proj.bias"] = take("patch_embed.proj.bias") if spec.patch_bias else torch.zeros(spec.d_model)
    for key in ("cls_token", "pos_embed"):
        if key in remaining:
            out[f"embedder.{key}"] = take(key)
    if "reg_token" in remaining:
        out["encoder.registers"] = take("reg_token")
    for i in range(spec.depth):
        out.update(block(remaining, f"blocks.{i}.", f"encoder.blocks.{i}."))
    for key in [k for k in remaining if k.startswith("blocks.") and k.split(".", 2)[2].startswith(same_in_blocks)]:
        out["encoder." + key] = take(key)
    for theirs, ours in (*renames, *OUTER_RENAMES):
        for key in [k for k in remaining if k.startswith(theirs)]:
            out[ours + key.removeprefix(theirs)] = take(key)
    if remaining:
        raise ConfigError(f"timm {family} weights not understood: {', '.join(sorted(remaining)[:8])}")
    return out


def to_timm_keys(
    state: dict[str, Tensor],
    spec: Any,
    family: str,
    *,
    key: KeyToTimm,
    renames: Iterable[tuple[str, str]] = (),
) -> dict[str, Tensor]:
    """The inverse of :func:`from_timm_keys`: a tokformer twin's state dict under timm's names.

    ``key`` takes the family's own keys first; ``renames`` as for :func:`from_timm_keys`.
    """
    pairs = (*renames, *OUTER_RENAMES)
    out: dict[str, Tensor] = {}
    for name, value in state.items():
        if key(name, value, out):
            continue
        if name == "embedder.proj.weight":
            c, p = spec.channels, spec.patch_size
            out["patch_embed.proj.weight"] = value.reshape(-1, c, p, p)  # [d, C*P*P] -> [d, C, P, P]
        elif name == "embedder.proj.bias":
            if spec.patch_bias:
                out["patch_embed.proj.bias"] = value
            elif value.any():
                raise ConfigError(f"this model has a non-zero patch-embedding bias, which a pre-norm timm {family} "
                                  "lacks")
        elif name.startswith("embedder."):
            out[name.removeprefix("embedder.")] = value
        elif name == "encoder.registers":
            out["reg_token"] = value
        elif theirs := next((t + name.removeprefix(o) for t, o in pairs if name.startswith(o)), None):
            out[theirs] = value
        elif name.startswith("encoder."):
            out[name.removeprefix("encoder.")] = value
        else:
            raise ConfigError(f"not part of a timm {family}: {name}")
    return out
