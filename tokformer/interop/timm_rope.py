"""timm RoPE ViTs (``timm.models.eva.Eva``) <-> tokformer (image patch tokenizer + EncoderClassifier).

Two downloaded families are covered by one mapping:

* naver's RoPE-ViT, ``vit_{small,base,large}_patch16_rope_224`` (axial 'cat' RoPE,
  ``rope_grid_indexing='xy'``, temperature 100, class token, layer scale, ``attn_type='rope'``)
  and its ``*_rope_ape_224`` variants (learned absolute positions as well);
* timm's SBB ``vit_{medium,mediumd,betwixt,base}_patch16_rope_reg*_gap_256`` (no class token,
  register tokens, average pooling + ``fc_norm``, ``ref_feat_shape`` rescaling, EVA attention
  with q/v biases only).

==============================  ======================================  ==============================
timm ``Eva``                    tokformer                               how
==============================  ======================================  ==============================
patch_embed.proj.weight/bias    embedder.proj.weight/bias               [d, C, P, P] -> [d, C*P*P]
cls_token, pos_embed            embedder.cls_token, embedder.pos_embed  same
reg_token                       encoder.registers                       same values
norm_pre.*                      encoder.norm_pre.*                      same
(rope: temperature, 'xy', ref)  TransformerConfig rope_theta,           interleaved layout
                                rope_axes, rope_ref_grid
blocks.i.attn.qkv.weight        encoder.blocks.i.attn.qkv.weight        same (fused)
blocks.i.attn.{q,k,v}_proj.*    encoder.blocks.i.attn.qkv.*             stacked (unfused)
blocks.i.attn.{q,v}_bias        encoder.blocks.i.attn.qkv.bias          [q; 0; v]: EVA has no k bias
blocks.i.gamma_1 / gamma_2      encoder.blocks.i.ls1.gamma / ls2.gamma  same
blocks.i.{norm1,norm2,mlp,...}  encoder.blocks.i.{same}                 same names
norm.*, fc_norm.*, head.*       encoder.norm.*, head.norm.*, head.proj  same
==============================  ======================================  ==============================

How the rotation matches: timm builds, per head, ``bands = 1 / T^(i / (d/4))`` for each of the
two grid axes, rotates adjacent channel pairs (``rotate_half=False``), gives the first half of
the channels to the row (``ij``) or the column (``xy``), rescales coordinates by
``ref_feat_shape / grid`` when set, and leaves the prefix (class and register) tokens
unrotated. tokformer's 2-D RoPE does the same with ``rope_layout='interleaved'``,
``rope_axes`` and ``rope_ref_grid``; its class token sits at (0, 0), which every supported
coordinate transform keeps at 0 (no rotation), and its registers are never rotated.
Token order differs (timm: class, registers, patches; tokformer: registers, class, patches),
which attention does not see: neither prefix kind is rotated.

Options that would make the two compute different functions are refused with one line
naming them (e.g. ``rope_type='mixed'``, ``rope_grid_offset``, ``scale_mlp``), rather than
converted wrongly. timm is imported only by :func:`to_timm_eva`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from tokformer.classifier import EncoderClassifier
from tokformer.config import TransformerConfig
from tokformer.errors import ConfigError
from tokformer.heads import ClassificationHead
from tokformer.tokenizers.image import ImagePatchTokenizer
from tokformer.tokenizers.timm_vit import with_pretrained_normalisation

_POOLS = {"token": "cls", "avg": "mean"}
_BLOCK_SAME_NAMES = ("norm1.", "attn.q_norm.", "attn.k_norm.", "attn.proj.", "norm2.", "mlp.fc1.", "mlp.fc2.")


@dataclass
class EvaSpec:
    """Everything that fixes a timm RoPE ViT's shape: enough to build it in either library.

    ``attn_type``: timm's attention class, ``eva`` (EvaAttention: q and v biases only) or
    ``rope`` (AttentionRope: a bias on q, k and v). ``qkv_fused``: one ``qkv`` projection or
    three. ``rope_ref_grid``: timm's ``ref_feat_shape`` (rows, cols).
    """

    image_size: tuple[int, int]
    patch_size: int
    channels: int
    d_model: int
    depth: int
    n_heads: int
    d_ff: int
    n_classes: int
    class_token: bool = True
    n_registers: int = 0
    pool: str = "cls"
    final_norm: bool = True
    fc_norm: bool = False
    norm_eps: float = 1e-6
    mlp: str = "plain"
    layer_scale: float | None = None
    qk_norm: bool = False
    qkv_bias: bool = True
    qkv_fused: bool = True
    attn_type: str = "eva"
    n_kv_heads: int | None = None
    pre_norm: bool = False
    abs_pos: bool = False
    no_embed_class: bool = False
    rope: bool = True
    rope_theta: float = 10000.0
    rope_axes: str = "ij"
    rope_ref_grid: tuple[int, int] | None = None
    dynamic_img_size: bool = False

    def timm_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``timm.models.eva.Eva`` for this spec."""
        from timm.layers import LayerNorm

        return {
            "img_size": self.image_size,
            "patch_size": self.patch_size,
            "in_chans": self.channels,
            "num_classes": self.n_classes,
            "global_pool": {"cls": "token", "mean": "avg"}[self.pool],
            "embed_dim": self.d_model,
            "depth": self.depth,
            "num_heads": self.n_heads,
            "num_kv_heads": self.n_kv_heads,
            "qkv_bias": self.qkv_bias,
            "qkv_fused": self.qkv_fused,
            "qk_norm": self.qk_norm,
            # timm sizes the MLP as int(d * ratio): half a unit up keeps float error from flooring d_ff - 1
            "mlp_ratio": (self.d_ff + 0.5) / self.d_model,
            "swiglu_mlp": self.mlp == "swiglu",
            "attn_type": self.attn_type,
            "norm_layer": partial(LayerNorm, eps=self.norm_eps),
            "init_values": self.layer_scale,
            "class_token": self.class_token,
            "num_reg_tokens": self.n_registers,
            "no_embed_class": self.no_embed_class,
            "use_abs_pos_emb": self.abs_pos,
            "use_rot_pos_emb": self.rope,
            "rope_type": "cat",
            "rope_grid_indexing": self.rope_axes,
            "rope_temperature": self.rope_theta,
            "ref_feat_shape": self.rope_ref_grid,
            "use_pre_transformer_norm": self.pre_norm,
            "use_post_transformer_norm": self.final_norm,
            "use_fc_norm": self.fc_norm,
            "dynamic_img_size": self.dynamic_img_size,
        }


def build_eva(spec: EvaSpec, **tokenizer_options: Any) -> tuple[ImagePatchTokenizer, EncoderClassifier]:
    """A freshly initialised tokformer twin of ``spec``: its tokenizer and model."""
    tokenizer = ImagePatchTokenizer(
        spec.patch_size,
        spec.image_size,
        channels=spec.channels,
        class_token=spec.class_token,
        position="learned" if spec.abs_pos else "none",
        no_embed_class=spec.no_embed_class,
        **tokenizer_options,
    )
    encoder_cfg = TransformerConfig(
        d_model=spec.d_model,
        n_heads=spec.n_heads,
        n_layers=spec.depth,
        d_ff=spec.d_ff,
        dropout=0.0,
        activation="gelu",  # Eva's Mlp is always exact GELU; a gated MLP brings its own SiLU
        mlp=spec.mlp,
        norm_eps=spec.norm_eps,
        final_norm=spec.final_norm,
        qkv_bias=spec.qkv_bias,
        n_kv_heads=spec.n_kv_heads,
        qk_norm=spec.qk_norm,
        layer_scale=spec.layer_scale,
        rope="2d" if spec.rope else "none",
        rope_theta=spec.rope_theta,
        rope_layout="interleaved",
        rope_axes=spec.rope_axes if spec.rope else "ij",
        rope_ref_grid=spec.rope_ref_grid if spec.rope else None,
        n_registers=spec.n_registers,
        input_norm=spec.pre_norm,
    )
    head = ClassificationHead(
        spec.d_model, spec.n_classes, pool=spec.pool, n_prefix=int(spec.class_token), norm=spec.fc_norm,
        norm_eps=spec.norm_eps,
    )
    return tokenizer, EncoderClassifier(tokenizer.build_embedder(spec.d_model), encoder_cfg, head)


# -- reading a timm model --------------------------------------------------------------


def _refuse(what: str) -> None:
    raise ConfigError(f"timm Eva with {what} has no tokformer twin")


def _is(module: nn.Module | None, *names: str) -> bool:
    return module is not None and type(module).__name__ in names


def _check_rope(rope: nn.Module) -> None:
    if not _is(rope, "RotaryEmbeddingCat"):
        kind = {"RotaryEmbeddingMixed": "mixed", "RotaryEmbeddingDinoV3": "dinov3", "RotaryEmbeddingMRope": "mrope"}
        _refuse(f"rope_type={kind.get(type(rope).__name__, type(rope).__name__)!r} (only axial 'cat' RoPE converts)")
    if rope.rotate_half:
        _refuse("rope_rotate_half=True (only the interleaved layout converts)")
    if rope.grid_offset:
        _refuse(f"rope_grid_offset={rope.grid_offset} (an offset would rotate the class token too)")
    if rope.in_pixels or rope.grid_type != "index":
        _refuse(f"a {rope.grid_type!r} RoPE grid (only integer grid indices convert)")
    if rope.aug_active:
        _refuse("RoPE coordinate augmentation (rope_shift/jitter/rescale_coords)")


def _check_block(block: nn.Module) -> None:
    if _is(block, "EvaBlockPostNorm"):
        _refuse("use_post_norm=True (norm after each branch)")
    attn = block.attn
    if not _is(attn, "EvaAttention", "AttentionRope"):
        _refuse(f"attention {type(attn).__name__}")
    if not isinstance(attn.norm, nn.Identity):
        _refuse("scale_attn_inner=True (a norm inside attention)")
    if attn.gate is not None:
        _refuse("gated_attn=True (a sigmoid gate on attention)")
    if attn.head_dim * attn.num_heads != block.norm1.normalized_shape[0]:
        _refuse(f"attn_head_dim={attn.head_dim} (head width other than embed_dim / num_heads)")
    for norm in (block.norm1, block.norm2, attn.q_norm, attn.k_norm):
        if not isinstance(norm, (nn.LayerNorm, nn.Identity)):
            _refuse(f"norm_layer={type(norm).__name__} (only LayerNorm converts)")
    if (block.gamma_1 is None) != (block.gamma_2 is None):
        _refuse("attn_only_layer_scale=True (layer scale on one branch only)")
    mlp = block.mlp
    if _is(mlp, "SwiGLU"):
        _refuse("a SwiGLU of separate gate/up layers (scale_mlp or swiglu_align_to)")
    if not _is(mlp, "Mlp", "GluMlp"):
        _refuse(f"MLP {type(mlp).__name__}")
    if not isinstance(mlp.norm, nn.Identity):
        _refuse("scale_mlp=True (a norm inside the MLP)")
    if _is(mlp, "GluMlp") and (mlp.gate_last or not isinstance(mlp.act, nn.SiLU)):
        _refuse("a gated MLP other than SwiGLU with the gate first")
    if _is(mlp, "Mlp") and (not isinstance(mlp.act, nn.GELU) or mlp.act.approximate != "none"):
        _refuse(f"MLP activation {type(mlp.act).__name__}")


def eva_spec_from_timm(model: nn.Module) -> EvaSpec:
    """Read the shape of a ``timm.models.eva.Eva`` instance, refusing what tokformer cannot compute."""
    if type(model).__name__ != "Eva":
        raise ConfigError(f"expected a timm Eva model, got {type(model).__name__}")
    for block in model.blocks:
        _check_block(block)
    block = model.blocks[0]
    if model.rope is not None:
        _check_rope(model.rope)
    if model.global_pool not in _POOLS or model.attn_pool is not None:
        _refuse(f"global_pool={model.global_pool!r} (token and avg convert)")
    if not isinstance(model.head, nn.Linear):
        _refuse("num_classes=0 (no classifier head)")
    patch = tuple(model.patch_embed.patch_size)
    if patch[0] != patch[1]:
        _refuse(f"non-square patches {patch}")
    if model.pos_embed is not None and model.reg_token is not None and not model.no_embed_class:
        _refuse("register tokens with position embeddings (no_embed_class=False)")
    if model.patch_embed.proj.bias is None and isinstance(model.norm_pre, nn.Identity):
        _refuse("a patch embedding without bias (and no pre-norm)")
    kv_heads = {getattr(b.attn, "num_kv_heads", b.attn.num_heads) for b in model.blocks}
    if len(kv_heads) != 1:
        _refuse(f"a different num_kv_heads per block {sorted(kv_heads)}")
    attn = block.attn
    fused = attn.qkv is not None
    if _is(attn, "EvaAttention"):
        qkv_bias = attn.q_bias is not None if fused else attn.q_proj.bias is not None
    else:
        qkv_bias = (attn.qkv if fused else attn.q_proj).bias is not None
    n_kv = kv_heads.pop()
    rope = model.rope
    return EvaSpec(
        image_size=tuple(model.patch_embed.img_size),
        patch_size=patch[0],
        channels=model.patch_embed.proj.in_channels,
        d_model=model.embed_dim,
        depth=len(model.blocks),
        n_heads=attn.num_heads,
        d_ff=block.mlp.fc2.in_features,
        n_classes=model.num_classes,
        class_token=model.cls_token is not None,
        n_registers=model.reg_token.shape[1] if model.reg_token is not None else 0,
        pool=_POOLS[model.global_pool],
        final_norm=not isinstance(model.norm, nn.Identity),
        fc_norm=not isinstance(model.fc_norm, nn.Identity),
        norm_eps=block.norm1.eps,
        mlp="swiglu" if _is(block.mlp, "GluMlp") else "plain",
        layer_scale=block.init_values if block.gamma_1 is not None else None,
        qk_norm=not isinstance(attn.q_norm, nn.Identity),
        qkv_bias=qkv_bias,
        qkv_fused=fused,
        attn_type="eva" if _is(attn, "EvaAttention") else "rope",
        n_kv_heads=None if n_kv == attn.num_heads else n_kv,
        pre_norm=not isinstance(model.norm_pre, nn.Identity),
        abs_pos=model.pos_embed is not None,
        no_embed_class=model.no_embed_class,
        rope=rope is not None,
        rope_theta=float(rope.temperature) if rope is not None else 10000.0,
        rope_axes=rope.grid_indexing if rope is not None else "ij",
        rope_ref_grid=tuple(rope.ref_feat_shape) if rope is not None and rope.ref_feat_shape is not None else None,
        dynamic_img_size=model.dynamic_img_size,
    )


# -- state dicts -------------------------------------------------------------------------


def from_timm_eva_state_dict(state: dict[str, Tensor], spec: EvaSpec) -> dict[str, Tensor]:
    """timm ``Eva`` state dict -> the state dict of :func:`build_eva` ``(spec)``'s model."""
    remaining = dict(state)
    out: dict[str, Tensor] = {}
    take = remaining.pop
    out["embedder.proj.weight"] = take("patch_embed.proj.weight").flatten(1)  # [d, C, P, P] -> [d, C*P*P]
    bias = take("patch_embed.proj.bias", None)  # absent with a pre-norm: ours is a zero one
    out["embedder.proj.bias"] = bias if bias is not None else torch.zeros(spec.d_model)
    for key in ("cls_token", "pos_embed"):
        if key in remaining:
            out[f"embedder.{key}"] = take(key)
    if "reg_token" in remaining:
        out["encoder.registers"] = take("reg_token")
    for i in range(spec.depth):
        prefix = f"blocks.{i}."
        ours = f"encoder.blocks.{i}."
        weight, qkv_bias = _qkv_from_timm(remaining, prefix + "attn.", spec)
        out[ours + "attn.qkv.weight"] = weight
        if qkv_bias is not None:
            out[ours + "attn.qkv.bias"] = qkv_bias
        for gamma, ls in (("gamma_1", "ls1"), ("gamma_2", "ls2")):
            if prefix + gamma in remaining:
                out[f"{ours}{ls}.gamma"] = take(prefix + gamma)
        for key in [k for k in remaining if k.startswith(prefix) and k[len(prefix) :].startswith(_BLOCK_SAME_NAMES)]:
            out["encoder." + key] = take(key)
    for theirs, ours in (("norm_pre.", "encoder.norm_pre."), ("norm.", "encoder.norm."), ("fc_norm.", "head.norm."),
                         ("head.", "head.proj.")):
        for key in [k for k in remaining if k.startswith(theirs)]:
            out[ours + key.removeprefix(theirs)] = take(key)
    if remaining:
        raise ConfigError(f"timm Eva weights not understood: {', '.join(sorted(remaining)[:8])}")
    return out


def _qkv_from_timm(remaining: dict[str, Tensor], attn: str, spec: EvaSpec) -> tuple[Tensor, Tensor | None]:
    """One block's q/k/v weights and biases, fused or not, as one ``[q; k; v]`` weight and bias."""
    take = remaining.pop
    weight = take(attn + "qkv.weight") if spec.qkv_fused else torch.cat([take(f"{attn}{p}_proj.weight") for p in "qkv"])
    if not spec.qkv_bias:
        return weight, None
    if spec.attn_type == "rope":
        if spec.qkv_fused:
            return weight, take(attn + "qkv.bias")
        return weight, torch.cat([take(f"{attn}{p}_proj.bias") for p in "qkv"])
    # EvaAttention: no key bias (fused: a zero buffer outside the state dict)
    q, v = (take(f"{attn}{p}_bias") for p in "qv") if spec.qkv_fused else (take(f"{attn}{p}_proj.bias") for p in "qv")
    return weight, torch.cat((q, torch.zeros(weight.shape[0] - q.shape[0] - v.shape[0], dtype=q.dtype), v))


def to_timm_eva_state_dict(state: dict[str, Tensor], spec: EvaSpec) -> dict[str, Tensor]:
    """The inverse of :func:`from_timm_eva_state_dict`: a tokformer model's state dict -> timm's."""
    out: dict[str, Tensor] = {}
    d_q = spec.d_model
    d_kv = (spec.n_kv_heads or spec.n_heads) * (spec.d_model // spec.n_heads)
    for key, value in state.items():
        if key == "embedder.proj.weight":
            c, p = spec.channels, spec.patch_size
            out["patch_embed.proj.weight"] = value.reshape(-1, c, p, p)  # [d, C*P*P] -> [d, C, P, P]
        elif key == "embedder.proj.bias":
            if not spec.pre_norm:
                out["patch_embed.proj.bias"] = value
            elif value.any():
                raise ConfigError("this model has a non-zero patch-embedding bias, which a pre-norm timm Eva lacks")
        elif key.startswith("embedder."):
            out[key.removeprefix("embedder.")] = value
        elif key == "encoder.registers":
            out["reg_token"] = value
        elif key.endswith(("attn.qkv.weight", "attn.qkv.bias")):
            attn = key.removeprefix("encoder.").rsplit("qkv.", 1)[0]  # blocks.i.attn.
            _qkv_to_timm(out, attn, key.rsplit(".", 1)[1], value.split([d_q, d_kv, d_kv]), spec)
        elif key.startswith("encoder.blocks.") and ".ls" in key:
            block, ls = key.removeprefix("encoder.").removesuffix(".gamma").rsplit(".", 1)
            out[f"{block}.gamma_{ls[-1]}"] = value
        elif key.startswith("encoder."):
            out[key.removeprefix("encoder.")] = value
        elif key.startswith("head.norm."):
            out["fc_norm." + key.removeprefix("head.norm.")] = value
        elif key.startswith("head.proj."):
            out["head." + key.removeprefix("head.proj.")] = value
        else:
            raise ConfigError(f"not part of a timm Eva: {key}")
    return out


def _qkv_to_timm(out: dict[str, Tensor], attn: str, kind: str, qkv: tuple[Tensor, ...], spec: EvaSpec) -> None:
    if kind == "bias" and spec.attn_type == "eva":
        q, k, v = qkv
        if k.any():
            raise ConfigError("this model has a non-zero key bias, which timm's EvaAttention lacks (attn_type='rope')")
        names = ("q_bias", "v_bias") if spec.qkv_fused else ("q_proj.bias", "v_proj.bias")
        out[attn + names[0]], out[attn + names[1]] = q, v
    elif spec.qkv_fused:
        out[f"{attn}qkv.{kind}"] = torch.cat(qkv)
    else:
        for p, part in zip("qkv", qkv, strict=True):
            out[f"{attn}{p}_proj.{kind}"] = part


# -- whole models ------------------------------------------------------------------------


def from_timm_eva(model: nn.Module, **tokenizer_options: Any) -> tuple[ImagePatchTokenizer, EncoderClassifier]:
    """The tokformer twin of a timm RoPE ViT (``Eva``): same weights, same logits.

    Images are normalised with the model's ``pretrained_cfg`` mean/std, as timm's own data
    config would; pass ``mean``/``std`` to override (None: no normalisation).
    """
    spec = eva_spec_from_timm(model)
    tokenizer, ours = build_eva(spec, **with_pretrained_normalisation(model, tokenizer_options))
    ours.load_state_dict(from_timm_eva_state_dict(model.state_dict(), spec))
    return tokenizer, ours


def to_timm_eva(model: EncoderClassifier, spec: EvaSpec, **timm_kwargs: Any) -> nn.Module:
    """A timm ``Eva`` holding ``model``'s weights (imports timm), in eval mode."""
    from timm.models.eva import Eva

    timm_model = Eva(**{**spec.timm_kwargs(), **timm_kwargs})
    timm_model.load_state_dict(to_timm_eva_state_dict(model.state_dict(), spec))
    return timm_model.eval()
