"""timm RoPE ViTs (Eva: naver RoPE-ViT, timm SBB) <-> tokformer through the one entry (from_timm/to_timm):
same tables, same logits, exact round trips."""

import pytest
import torch

eva = pytest.importorskip("timm.models.eva")

from timm.layers.pos_embed_sincos import RotaryEmbeddingCat  # noqa: E402
from tiny import randomised  # noqa: E402

from tokformer.config import TransformerConfig  # noqa: E402
from tokformer.errors import ConfigError  # noqa: E402
from tokformer.interop.timm import (  # noqa: E402
    EvaSpec,
    build_vit,
    from_timm,
    from_timm_state_dict,
    spec_from_timm_model,
    to_timm,
    to_timm_state_dict,
)
from tokformer.rotary import RotaryEmbedding  # noqa: E402
from tokformer.tokenizers.image import grid_positions  # noqa: E402

SMALL = {"img_size": 32, "patch_size": 8, "embed_dim": 48, "depth": 2, "num_heads": 3, "num_classes": 7}
NAVER = {  # vit_*_patch16_rope_224 without the sizes
    "attn_type": "rope", "qkv_bias": True, "init_values": 1e-5, "class_token": True, "global_pool": "token",
    "use_abs_pos_emb": False, "use_rot_pos_emb": True, "rope_grid_indexing": "xy", "rope_temperature": 100.0,
}
SBB = {  # vit_*_patch16_rope_reg*_gap_256 without the sizes (ref_feat_shape scaled to the small grid)
    "qkv_fused": True, "qkv_bias": True, "init_values": 1e-5, "class_token": False, "num_reg_tokens": 1,
    "use_rot_pos_emb": True, "use_abs_pos_emb": False, "ref_feat_shape": (3, 3),
}
FAMILIES = {
    "naver": NAVER,
    "naver-rect": {**NAVER, "img_size": (24, 40)},  # a non-square grid tells 'xy' from 'ij'
    "naver-ape": {**NAVER, "use_abs_pos_emb": True, "no_embed_class": True},
    "sbb-reg1": SBB,
    "sbb-reg4-no-qkv-bias-rect": {**SBB, "num_reg_tokens": 4, "qkv_bias": False, "img_size": (40, 24),
                                  "ref_feat_shape": (4, 2)},
    "eva-unfused-swiglu-ij": {**SBB, "qkv_fused": False, "swiglu_mlp": True, "mlp_ratio": 2.0, "class_token": True,
                              "num_reg_tokens": 0, "use_abs_pos_emb": True},
    "rope-gqa-qknorm-prenorm": {**NAVER, "qkv_fused": False, "num_kv_heads": 1, "qk_norm": True,
                                "use_pre_transformer_norm": True, "global_pool": "avg", "num_reg_tokens": 2},
}


def make_eva(name: str, **overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    return randomised(eva.Eva(**{**SMALL, **FAMILIES[name], **overrides}))


def _size(model: torch.nn.Module) -> tuple[int, int]:
    return tuple(model.patch_embed.img_size)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_same_logits_as_timm_and_exact_round_trip(name):
    timm_model = make_eva(name)
    tokenizer, model = from_timm(timm_model, mean=None, std=None)
    images = torch.randn(3, 3, *_size(timm_model))
    with torch.no_grad():
        expected = timm_model(images)
        torch.testing.assert_close(model.eval()(tokenizer.batch(images)), expected, atol=1e-5, rtol=1e-5)
    spec = spec_from_timm_model(timm_model)
    assert isinstance(spec, EvaSpec)
    back = to_timm(model, spec)
    assert type(back) is eva.Eva
    original = timm_model.state_dict()
    assert back.state_dict().keys() == original.keys()
    assert all(torch.equal(back.state_dict()[k], v) for k, v in original.items())
    with torch.no_grad():
        torch.testing.assert_close(back(images), expected, atol=1e-6, rtol=1e-6)
    ours = model.state_dict()
    again = from_timm_state_dict(to_timm_state_dict(ours, spec), spec)
    assert again.keys() == ours.keys() and all(torch.equal(again[k], ours[k]) for k in ours)


@pytest.mark.parametrize("name", ["naver", "naver-ape", "sbb-reg1"])
def test_other_image_sizes_match_timm_dynamic_img_size(name):
    """RoPE is recomputed for any grid (rescaled to ref_feat_shape where set); a learned table is resampled."""
    timm_model = make_eva(name, dynamic_img_size=True)
    tokenizer, model = from_timm(timm_model, mean=None, std=None, resize=False)
    images = torch.randn(2, 3, 48, 24)  # training size is 32x32
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(tokenizer.batch(images)), timm_model(images), atol=1e-5, rtol=1e-5)


def test_mean_and_std_come_from_pretrained_cfg():
    timm_model = make_eva("sbb-reg1")
    timm_model.pretrained_cfg = {"mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)}
    tokenizer, _ = from_timm(timm_model)
    assert tokenizer.mean == (0.5, 0.5, 0.5) and tokenizer.std == (0.5, 0.5, 0.5)
    assert tokenizer.position == "none" and not tokenizer.class_token


@pytest.mark.parametrize(
    ("axes", "ref", "grid", "theta"),
    [("xy", None, (3, 5), 100.0), ("ij", None, (4, 2), 10000.0), ("ij", (16, 16), (14, 9), 10000.0),
     ("xy", (6, 4), (5, 7), 100.0)],
)
def test_rotary_table_equals_timm(axes, ref, grid, theta):
    """The interleaved 2-D table is timm's RotaryEmbeddingCat table, value for value."""
    d_head = 32
    timm_rope = RotaryEmbeddingCat(d_head, temperature=theta, in_pixels=False, grid_indexing=axes,
                                   ref_feat_shape=list(ref) if ref else None)
    sin, cos = timm_rope.get_embed(shape=list(grid)).chunk(2, dim=-1)  # [N, d_head] each
    ours = RotaryEmbedding(d_head, theta, dims=2, layout="interleaved", axes=axes, ref_grid=ref)
    rope = ours(grid_positions(*grid)[None])  # cos/sin [1, 1, N, d_head]
    torch.testing.assert_close(rope.cos[0, 0], cos, atol=0, rtol=0)
    torch.testing.assert_close(rope.sin[0, 0], sin, atol=0, rtol=0)


def test_rotary_defaults_and_prefix_identity():
    """Defaults keep the half layout; position (0, 0) stays unrotated under every grid transform."""
    cfg = TransformerConfig(d_model=32, n_heads=2, rope="2d")
    assert (cfg.rope_layout, cfg.rope_axes, cfg.rope_ref_grid) == ("half", "ij", None)
    positions = torch.cat((torch.zeros(1, 2), grid_positions(3, 4)))[None]  # a class token, then the grid
    rope = RotaryEmbedding(16, 100.0, dims=2, layout="interleaved", axes="xy", ref_grid=(7, 5))(positions)
    assert torch.equal(rope.cos[..., 0, :], torch.ones(1, 1, 16)) and not rope.sin[..., 0, :].any()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"rope_layout": "pairs"}, "rope_layout"), ({"rope_axes": "yx", "rope": "2d"}, "rope_axes"),
     ({"rope_ref_grid": (4, 4), "rope": "1d"}, "need rope='2d'"), ({"rope_ref_grid": (0, 4), "rope": "2d"},
                                                                    "two positive integers")],
)
def test_config_validates_rope_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TransformerConfig(d_model=32, n_heads=2, **kwargs)
    assert TransformerConfig(d_model=32, n_heads=2, rope="2d", rope_ref_grid=[4, 4]).rope_ref_grid == (4, 4)


@pytest.mark.parametrize(
    ("name", "overrides", "message"),
    [("naver", {"rope_type": "mixed"}, "rope_type='mixed'"),
     ("naver", {"rope_grid_offset": 1.0}, "rope_grid_offset"),
     ("naver", {"rope_rotate_half": True}, "rope_rotate_half"),
     ("sbb-reg1", {"swiglu_mlp": True, "scale_mlp": True}, "SwiGLU of separate"),
     ("sbb-reg1", {"scale_mlp": True}, "scale_mlp"),
     ("sbb-reg1", {"scale_attn_inner": True}, "scale_attn_inner"),
     ("sbb-reg1", {"use_post_norm": True}, "use_post_norm"),
     ("naver", {"attn_only_layer_scale": True}, "attn_only_layer_scale"),
     ("sbb-reg1", {"global_pool": "max"}, "global_pool='max'"),
     ("sbb-reg1", {"use_abs_pos_emb": True}, "register tokens with position embeddings"),
     ("naver", {"rope_shift_coords": 0.5}, "coordinate augmentation")],
)
def test_unsupported_eva_options_are_refused(name, overrides, message):
    with pytest.raises(ConfigError, match=message):
        from_timm(make_eva(name, **overrides))


def test_fresh_tokformer_model_exports_to_timm():
    spec = spec_from_timm_model(make_eva("sbb-reg1"))
    tokenizer, model = build_vit(spec, mean=None, std=None)
    timm_model = to_timm(model.eval(), spec)
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(tokenizer.batch(images)), timm_model(images), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["naver", "sbb-reg1"])
def test_eva_weights_files_are_refused_in_one_line(tmp_path, name):
    """A file holds no rotary settings: its Eva keys are named, with what to do instead."""
    from safetensors.torch import save_file

    from tokformer.interop.timm import load_timm_checkpoint, spec_from_state_dict

    state = {k: v.contiguous() for k, v in make_eva(name).state_dict().items()}
    path = tmp_path / "eva.safetensors"
    save_file(state, path)
    for refused in (lambda: spec_from_state_dict(state, n_heads=3), lambda: load_timm_checkpoint(path)):
        with pytest.raises(ConfigError, match=r"RoPE ViT \(timm Eva\).*from_timm") as err:
            refused()
        assert "\n" not in str(err.value)
