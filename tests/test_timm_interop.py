"""timm VisionTransformer <-> tokformer ViT through the one entry: same logits (1e-5), exact round trips, files."""

import pytest
import torch
from safetensors.torch import save_file

timm_vit = pytest.importorskip("timm.models.vision_transformer")

from tiny import randomised  # noqa: E402

from tokformer.errors import ConfigError, DataError  # noqa: E402
from tokformer.interop.timm import (  # noqa: E402
    build_vit,
    from_timm,
    from_timm_state_dict,
    load_timm_checkpoint,
    spec_from_state_dict,
    spec_from_timm_model,
    to_timm,
    to_timm_state_dict,
)

SMALL = {"img_size": 32, "patch_size": 8, "embed_dim": 48, "depth": 2, "num_heads": 3, "num_classes": 7}
CONFIGS = {
    "token": {},
    "avg+cls": {"global_pool": "avg"},
    "avg-no-cls": {"global_pool": "avg", "class_token": False},
    "avg-final-norm": {"global_pool": "avg", "fc_norm": False},
    "no-embed-class": {"no_embed_class": True},
    "patch4-rect-no-qkv-bias": {"patch_size": 4, "img_size": (24, 32), "qkv_bias": False},
    "deeper-mlp2": {"depth": 3, "mlp_ratio": 2.0, "embed_dim": 64, "num_heads": 4, "img_size": 48, "patch_size": 16},
    "no-final-norm": {"final_norm": False},
}


def make_timm(**overrides) -> torch.nn.Module:
    """A small timm ViT with every parameter randomised (timm zero-inits some: biases, head)."""
    torch.manual_seed(0)
    model = timm_vit.VisionTransformer(**{**SMALL, **overrides}).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.1)
    return model


@pytest.mark.parametrize("name", list(CONFIGS))
def test_same_logits_as_timm(name):
    timm_model = make_timm(**CONFIGS[name])
    tokenizer, model = from_timm(timm_model, mean=None, std=None)
    model.eval()
    images = torch.randn(3, 3, *tokenizer.image_size)
    with torch.no_grad():
        expected = timm_model(images)
        got = model(tokenizer.batch(images))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["token", "avg-no-cls", "patch4-rect-no-qkv-bias"])
def test_round_trips_are_exact(name):
    timm_model = make_timm(**CONFIGS[name])
    spec = spec_from_timm_model(timm_model)
    _, model = from_timm(timm_model)
    back = to_timm(model, spec).state_dict()
    original = timm_model.state_dict()
    assert back.keys() == original.keys()
    assert all(torch.equal(back[k], original[k]) for k in original)
    ours = model.state_dict()
    again = from_timm_state_dict(to_timm_state_dict(ours, spec), spec)
    assert again.keys() == ours.keys() and all(torch.equal(again[k], ours[k]) for k in ours)


@pytest.mark.parametrize("name", ["token", "no-embed-class", "avg-no-cls"])
def test_other_image_sizes_match_timm_dynamic_img_size(name):
    """Learned positions resampled like timm's resample_abs_pos_embed (bicubic, antialiased)."""
    timm_model = make_timm(**CONFIGS[name], dynamic_img_size=True)
    tokenizer, model = from_timm(timm_model, mean=None, std=None, resize=False)
    images = torch.randn(2, 3, 48, 24)  # training size is 32x32
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(tokenizer.batch(images)), timm_model(images), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("suffix", [".safetensors", ".pth"])
def test_checkpoint_files(tmp_path, suffix):
    timm_model = make_timm(global_pool="avg", embed_dim=128, num_heads=2)  # n_heads = d / 64
    path = tmp_path / f"vit{suffix}"
    state = {k: v.contiguous() for k, v in timm_model.state_dict().items()}
    if suffix == ".safetensors":
        save_file(state, path)
    else:
        torch.save({"state_dict": {f"module.{k}": v for k, v in state.items()}}, path)
    tokenizer, model = load_timm_checkpoint(path)
    tokenizer.mean = tokenizer.std = None
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(tokenizer.batch(images)), timm_model(images), atol=1e-5, rtol=1e-5)


def test_spec_inference_from_shapes():
    spec = spec_from_state_dict(make_timm(no_embed_class=True).state_dict(), n_heads=3)
    assert (spec.image_size, spec.patch_size, spec.d_model, spec.depth, spec.d_ff) == ((32, 32), 8, 48, 2, 192)
    assert spec.class_token and spec.no_embed_class and spec.pool == "cls" and not spec.fc_norm
    rect = spec_from_state_dict(make_timm(img_size=(24, 32)).state_dict(), n_heads=3, image_size=(24, 32))
    assert not rect.no_embed_class
    with pytest.raises(ConfigError, match="unknown ViT spec field"):
        spec_from_state_dict(make_timm().state_dict(), heads=3)


def test_unpicklable_and_foreign_files_are_refused(tmp_path):
    evil = tmp_path / "evil.pth"
    torch.save({"state_dict": {"x": torch.zeros(1)}, "obj": object()}, evil)
    with pytest.raises(DataError, match="cannot read weights"):
        load_timm_checkpoint(evil)  # weights_only=True will not unpickle arbitrary objects
    other = tmp_path / "other.safetensors"
    save_file({"fc.weight": torch.zeros(2, 2)}, other)
    with pytest.raises(DataError, match="not a timm ViT"):
        load_timm_checkpoint(other)
    with pytest.raises(DataError, match="not found"):
        load_timm_checkpoint(tmp_path / "missing.safetensors")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [({"reg_tokens": 2}, "register tokens with position"), ({"global_pool": "max"}, "global_pool='max'"),
     ({"act_layer": "relu"}, "activation ReLU")],
)
def test_unsupported_timm_options_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        from_timm(make_timm(**overrides))


def test_one_entry_takes_the_classic_and_the_rope_family():
    """from_timm/to_timm dispatch on the model and the spec: a VisionTransformer and an Eva alike."""
    from timm.models.eva import Eva

    from tokformer.interop.timm import EvaSpec, ViTSpec

    rope_vit = randomised(Eva(**SMALL, attn_type="rope", use_rot_pos_emb=True, rope_grid_indexing="xy"))
    for timm_model, kind in ((make_timm(), ViTSpec), (rope_vit, EvaSpec)):
        tokenizer, model = from_timm(timm_model, mean=None, std=None)
        images = torch.randn(2, 3, *tokenizer.image_size)
        with torch.no_grad():
            torch.testing.assert_close(model.eval()(tokenizer.batch(images)), timm_model(images), atol=1e-5,
                                       rtol=1e-5)
        spec = spec_from_timm_model(timm_model)
        assert isinstance(spec, kind)
        back = to_timm(model, spec)
        assert type(back) is type(timm_model)
        assert all(torch.equal(back.state_dict()[k], v) for k, v in timm_model.state_dict().items())


@pytest.mark.parametrize("model", [torch.nn.Linear(4, 2), "resnet"])
def test_models_of_no_supported_family_are_refused_in_one_line(model):
    if model == "resnet":
        from timm.models.resnet import BasicBlock, ResNet

        model = ResNet(BasicBlock, [1, 1, 1, 1], num_classes=3)
    with pytest.raises(ConfigError, match="is not a timm ViT that converts") as err:
        from_timm(model)
    assert "\n" not in str(err.value)


def test_fresh_tokformer_vit_exports_to_timm():
    spec = spec_from_timm_model(make_timm(global_pool="avg"))
    tokenizer, model = build_vit(spec, mean=None, std=None)
    timm_model = to_timm(model.eval(), spec)
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(tokenizer.batch(images)), timm_model(images), atol=1e-5, rtol=1e-5)


# Today's families, at small sizes with each family's own options (timm's model functions add
# only sizes to these, plus pretrained_cfg).
FAMILIES = {
    "deit3": {"init_values": 1e-5, "no_embed_class": True},
    "dinov2": {"init_values": 1e-5, "img_size": 28, "patch_size": 7},
    "dinov2-reg4": {"init_values": 1e-5, "reg_tokens": 4, "no_embed_class": True, "img_size": 28, "patch_size": 7},
    "dinov2-swiglu": {"init_values": 1e-5, "mlp_layer": "swiglu_packed", "mlp_ratio": 2.0, "act_layer": "silu"},
    "clip-openai": {"pre_norm": True, "act_layer": "quick_gelu"},
    "openclip": {"pre_norm": True, "global_pool": "avg", "fc_norm": False},
    "siglip": {"class_token": False, "global_pool": "map", "act_layer": "gelu_tanh"},
    "qk-norm-avg": {"qk_norm": True, "global_pool": "avg", "init_values": 0.1},
}


def make_family(name: str) -> torch.nn.Module:
    options = dict(FAMILIES[name])
    if options.get("mlp_layer") == "swiglu_packed":
        from timm.layers import SwiGLUPacked

        options["mlp_layer"] = SwiGLUPacked
    torch.manual_seed(0)
    return randomised(timm_vit.VisionTransformer(**{**SMALL, **options}))


@pytest.mark.parametrize("name", list(FAMILIES))
def test_todays_families_match_timm_and_round_trip(name):
    timm_model = make_family(name)
    tokenizer, model = from_timm(timm_model, mean=None, std=None)
    images = torch.randn(3, 3, *tokenizer.image_size)
    with torch.no_grad():
        expected = timm_model(images)
        torch.testing.assert_close(model.eval()(tokenizer.batch(images)), expected, atol=1e-5, rtol=1e-5)
    spec = spec_from_timm_model(timm_model)
    back = to_timm(model, spec)
    assert back.state_dict().keys() == timm_model.state_dict().keys()
    assert all(torch.equal(back.state_dict()[k], v) for k, v in timm_model.state_dict().items())
    with torch.no_grad():
        torch.testing.assert_close(back(images), expected, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("name", ["dinov2-reg4", "siglip", "dinov2-swiglu", "clip-openai"])
def test_todays_families_load_from_checkpoint_files(tmp_path, name):
    """Shapes alone give the spec (registers, MAP head, SwiGLU, pre-norm); activation is passed."""
    timm_model = make_family(name)
    path = tmp_path / "vit.safetensors"
    save_file({k: v.contiguous() for k, v in timm_model.state_dict().items()}, path)
    activation = {"siglip": "gelu_tanh", "clip-openai": "quick_gelu", "dinov2-swiglu": "silu"}.get(name, "gelu")
    size = timm_model.patch_embed.img_size
    tokenizer, model = load_timm_checkpoint(path, n_heads=3, activation=activation, image_size=tuple(size))
    tokenizer.mean = tokenizer.std = None
    images = torch.randn(2, 3, *size)
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(tokenizer.batch(images)), timm_model(images), atol=1e-5, rtol=1e-5)


def test_from_timm_uses_the_models_own_mean_and_std():
    timm_model = make_family("siglip")
    timm_model.pretrained_cfg = {"mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)}  # what create_model sets
    tokenizer, model = from_timm(timm_model)
    assert tokenizer.mean == (0.5, 0.5, 0.5) and tokenizer.std == (0.5, 0.5, 0.5)
    pixels = torch.rand(2, 3, 32, 32)  # images in [0, 1], as the tokenizer takes them
    with torch.no_grad():
        expected = timm_model((pixels - 0.5) / 0.5)
        torch.testing.assert_close(model.eval()(tokenizer.batch(pixels)), expected, atol=1e-5, rtol=1e-5)
    overridden, _ = from_timm(timm_model, mean=(0.1, 0.2, 0.3), std=(1.0, 1.0, 1.0))
    assert overridden.mean == (0.1, 0.2, 0.3)
