"""timm's RoPE ViTs (``timm.models.eva.Eva``) <-> tokformer: the mapping, and the spec read off a model.

Two downloaded families are covered by one mapping:

* naver's RoPE-ViT, ``vit_{small,base,large}_patch16_rope_224`` (axial 'cat' RoPE,
  ``rope_grid_indexing='xy'``, temperature 100, class token, layer scale, ``attn_type='rope'``)
  and its ``*_rope_ape_224`` variants (learned absolute positions as well);
* timm's SBB ``vit_{medium,mediumd,betwixt,base}_patch16_rope_reg*_gap_256`` (no class token,
  register tokens, average pooling + ``fc_norm``, ``ref_feat_shape`` rescaling, EVA attention
  with q/v biases only).

Beyond the keys every family shares (:mod:`.common`):

==============================  ======================================  ==============================
timm ``Eva``                    tokformer                               how
==============================  ======================================  ==============================
(rope: temperature, 'xy', ref)  TransformerConfig rope_theta,           interleaved layout
                                rope_axes, rope_ref_grid
blocks.i.attn.qkv.weight        encoder.blocks.i.attn.qkv.weight        same (fused)
blocks.i.attn.{q,k,v}_proj.*    encoder.blocks.i.attn.qkv.*             stacked (unfused)
blocks.i.attn.{q,v}_bias        encoder.blocks.i.attn.qkv.bias          [q; 0; v]: EVA has no k bias
blocks.i.gamma_1 / gamma_2      encoder.blocks.i.ls1.gamma / ls2.gamma  same
blocks.i.{norm1,norm2,mlp,...}  encoder.blocks.i.{same}                 same names
==============================  ======================================  ==============================

How the rotation matches: timm builds, per head, ``bands = 1 / T^(i / (d/4))`` for each of the
two grid axes, rotates adjacent channel pairs (``rotate_half=False``), gives the first half of
the channels to the row (``ij``) or the column (``xy``), rescales coordinates by
``ref_feat_shape / grid`` when set, and leaves the prefix (class and register) tokens
unrotated. tokformer's 2-D RoPE does the same with ``rope_layout='interleaved'``,
``rope_axes`` and ``rope_ref_grid``; its class token sits at (0, 0), which every supported
coordinate transform keeps at 0 (no rotation), and its registers are never rotated.

Options that would make the two compute different functions are refused with one line
naming them (e.g. ``rope_type='mixed'``, ``rope_grid_offset``, ``scale_mlp``, attention
pooling), rather than converted wrongly. The rotary settings are not in an Eva's weights, so
an Eva converts from a timm model, never from a checkpoint file alone. timm is imported
only by :meth:`EvaSpec.timm_kwargs` and :func:`timm_class`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from tokformer.classifier import EncoderClassifier
from tokformer.errors import ConfigError
from tokformer.interop.timm import common
from tokformer.tokenizers.image import ImagePatchTokenizer

FAMILY = "Eva"
TIMM_CLASS = "timm.models.eva.Eva"
_BLOCK_SAME_NAMES = ("norm1.", "attn.q_norm.", "attn.k_norm.", "attn.proj.", "norm2.", "mlp.fc1.", "mlp.fc2.")
_refuse = partial(common.refuse, FAMILY)


@dataclass
class EvaSpec(common.Shape):
    """Everything that fixes a timm RoPE ViT's shape: enough to build it in either library.

    ``attn_type``: timm's attention class, ``eva`` (EvaAttention: q and v biases only) or
    ``rope`` (AttentionRope: a bias on q, k and v). ``qkv_fused``: one ``qkv`` projection or
    three. ``abs_pos``: learned absolute positions as well. ``rope_ref_grid``: timm's
    ``ref_feat_shape`` (rows, cols).
    """

    qkv_fused: bool = True
    attn_type: str = "eva"
    n_kv_heads: int | None = None
    abs_pos: bool = False
    rope: bool = True
    rope_theta: float = 10000.0
    rope_axes: str = "ij"
    rope_ref_grid: tuple[int, int] | None = None
    dynamic_img_size: bool = False

    @property
    def patch_bias(self) -> bool:
        """timm's Eva drops the patch projection's bias exactly when it has a pre-norm."""
        return not self.pre_norm

    def timm_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``timm.models.eva.Eva`` for this spec."""
        from timm.layers import LayerNorm

        return {
            **self.shared_timm_kwargs(),
            "num_kv_heads": self.n_kv_heads,
            "qkv_fused": self.qkv_fused,
            # timm sizes the MLP as int(d * ratio): half a unit up keeps float error from flooring d_ff - 1
            "mlp_ratio": (self.d_ff + 0.5) / self.d_model,
            "swiglu_mlp": self.mlp == "swiglu",
            "attn_type": self.attn_type,
            "norm_layer": partial(LayerNorm, eps=self.norm_eps),
            "num_reg_tokens": self.n_registers,
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


def timm_class() -> type[nn.Module]:
    """timm's ``Eva`` (imports timm)."""
    from timm.models.eva import Eva

    return Eva


def build(spec: EvaSpec, **tokenizer_options: Any) -> tuple[ImagePatchTokenizer, EncoderClassifier]:
    """A freshly initialised tokformer twin of ``spec``: its tokenizer and model."""
    encoder = {
        "activation": "gelu",  # Eva's Mlp is always exact GELU; a gated MLP brings its own SiLU
        "qkv_bias": spec.qkv_bias,
        "n_kv_heads": spec.n_kv_heads,
        "rope": "2d" if spec.rope else "none",
        "rope_theta": spec.rope_theta,
        "rope_layout": "interleaved",
        "rope_axes": spec.rope_axes if spec.rope else "ij",
        "rope_ref_grid": spec.rope_ref_grid if spec.rope else None,
    }
    position = "learned" if spec.abs_pos else "none"
    return common.build_classifier(spec, tokenizer_options, position=position, encoder=encoder)


# -- reading a timm model --------------------------------------------------------------


def _check_rope(rope: nn.Module) -> None:
    if not common.is_kind(rope, "RotaryEmbeddingCat"):
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
    if common.is_kind(block, "EvaBlockPostNorm"):
        _refuse("use_post_norm=True (norm after each branch)")
    attn = block.attn
    if not common.is_kind(attn, "EvaAttention", "AttentionRope"):
        _refuse(f"attention {type(attn).__name__}")
    if not isinstance(attn.norm, nn.Identity):
        _refuse("scale_attn_inner=True (a norm inside attention)")
    if attn.gate is not None:
        _refuse("gated_attn=True (a sigmoid gate on attention)")
    if attn.head_dim * attn.num_heads != block.norm1.normalized_shape[0]:
        _refuse(f"attn_head_dim={attn.head_dim} (head width other than embed_dim / num_heads)")
    if (block.gamma_1 is None) != (block.gamma_2 is None):
        _refuse("attn_only_layer_scale=True (layer scale on one branch only)")
    mlp = block.mlp
    if common.is_kind(mlp, "SwiGLU"):
        _refuse("a SwiGLU of separate gate/up layers (scale_mlp or swiglu_align_to)")
    if not common.is_kind(mlp, "Mlp", "GluMlp"):
        _refuse(f"MLP {type(mlp).__name__}")
    if not isinstance(mlp.norm, nn.Identity):
        _refuse("scale_mlp=True (a norm inside the MLP)")
    if common.is_kind(mlp, "GluMlp") and (mlp.gate_last or not isinstance(mlp.act, nn.SiLU)):
        _refuse("a gated MLP other than SwiGLU with the gate first")
    if common.is_kind(mlp, "Mlp") and (not isinstance(mlp.act, nn.GELU) or mlp.act.approximate != "none"):
        _refuse(f"MLP activation {type(mlp.act).__name__}")


def spec_from_model(model: nn.Module) -> EvaSpec:
    """Read the shape of a ``timm.models.eva.Eva`` instance, refusing what tokformer cannot compute."""
    for block in model.blocks:
        _check_block(block)
    shape = common.shape_of(model, FAMILY, pools=("token", "avg"))
    if model.rope is not None:
        _check_rope(model.rope)
    if model.patch_embed.proj.bias is None and isinstance(model.norm_pre, nn.Identity):
        _refuse("a patch embedding without bias (and no pre-norm)")
    kv_heads = {getattr(b.attn, "num_kv_heads", b.attn.num_heads) for b in model.blocks}
    if len(kv_heads) != 1:
        _refuse(f"a different num_kv_heads per block {sorted(kv_heads)}")
    block = model.blocks[0]
    attn = block.attn
    fused = attn.qkv is not None
    if common.is_kind(attn, "EvaAttention"):
        qkv_bias = attn.q_bias is not None if fused else attn.q_proj.bias is not None
    else:
        qkv_bias = (attn.qkv if fused else attn.q_proj).bias is not None
    n_kv = kv_heads.pop()
    rope = model.rope
    return EvaSpec(
        **shape,
        mlp="swiglu" if common.is_kind(block.mlp, "GluMlp") else "plain",
        layer_scale=block.init_values if block.gamma_1 is not None else None,
        qkv_bias=qkv_bias,
        qkv_fused=fused,
        attn_type="eva" if common.is_kind(attn, "EvaAttention") else "rope",
        n_kv_heads=None if n_kv == attn.num_heads else n_kv,
        abs_pos=model.pos_embed is not None,
        rope=rope is not None,
        rope_theta=float(rope.temperature) if rope is not None else 10000.0,
        rope_axes=rope.grid_indexing if rope is not None else "ij",
        rope_ref_grid=tuple(rope.ref_feat_shape) if rope is not None and rope.ref_feat_shape is not None else None,
        dynamic_img_size=model.dynamic_img_size,
    )


# -- state dicts -------------------------------------------------------------------------


def from_timm_state_dict(state: dict[str, Tensor], spec: EvaSpec) -> dict[str, Tensor]:
    """timm ``Eva`` state dict -> the state dict of :func:`build` ``(spec)``'s model."""

    def block(remaining: dict[str, Tensor], theirs: str, ours: str) -> dict[str, Tensor]:
        weight, qkv_bias = _qkv_from_timm(remaining, theirs + "attn.", spec)
        out = {ours + "attn.qkv.weight": weight}
        if qkv_bias is not None:
            out[ours + "attn.qkv.bias"] = qkv_bias
        for gamma, ls in (("gamma_1", "ls1"), ("gamma_2", "ls2")):
            if theirs + gamma in remaining:
                out[f"{ours}{ls}.gamma"] = remaining.pop(theirs + gamma)
        return out

    return common.from_timm_keys(state, spec, FAMILY, same_in_blocks=_BLOCK_SAME_NAMES, block=block)


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


def to_timm_state_dict(state: dict[str, Tensor], spec: EvaSpec) -> dict[str, Tensor]:
    """The inverse of :func:`from_timm_state_dict`: a tokformer model's state dict -> timm's."""
    d_q = spec.d_model
    d_kv = (spec.n_kv_heads or spec.n_heads) * (spec.d_model // spec.n_heads)

    def block_key(name: str, value: Tensor, out: dict[str, Tensor]) -> bool:
        if name.endswith(("attn.qkv.weight", "attn.qkv.bias")):
            attn = name.removeprefix("encoder.").rsplit("qkv.", 1)[0]  # blocks.i.attn.
            _qkv_to_timm(out, attn, name.rsplit(".", 1)[1], value.split([d_q, d_kv, d_kv]), spec)
        elif name.startswith("encoder.blocks.") and ".ls" in name:
            block, ls = name.removeprefix("encoder.").removesuffix(".gamma").rsplit(".", 1)
            out[f"{block}.gamma_{ls[-1]}"] = value
        else:
            return False
        return True

    return common.to_timm_keys(state, spec, FAMILY, key=block_key)


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
