"""Image patch tokenizer: flatten order, positions, sizes, input kinds, padding, save/load."""

import numpy as np
import pytest
import torch
from PIL import Image

from tokformer.classifier import EncoderClassifier
from tokformer.config import TransformerConfig
from tokformer.errors import DataError
from tokformer.heads import ClassificationHead
from tokformer.tokenizers import TokenizerError, load_tokenizer
from tokformer.tokenizers.image import ImagePatchTokenizer, resample_grid_table
from tokformer.tokenizers.image_local import LocalPatchTokenizer


def raw(**kwargs) -> ImagePatchTokenizer:
    """A tokenizer that leaves pixel values alone (no normalisation), so tests can compare them."""
    return ImagePatchTokenizer(**{"mean": None, "std": None, **kwargs})


def test_flattened_patches_times_conv_weight_equal_the_conv():
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 16, kernel_size=4, stride=4)
    images = torch.rand(2, 3, 8, 12)
    tokens = raw(patch_size=4, image_size=8, resize=False, class_token=False).batch(images)
    linear = tokens.features @ conv.weight.flatten(1).T + conv.bias  # [B, n, 16]
    expected = conv(images).flatten(2).transpose(1, 2)  # [B, gh*gw, 16], row-major like timm
    torch.testing.assert_close(linear, expected)


def test_patches_and_positions_are_row_major_with_class_token_first():
    image = torch.arange(4 * 6, dtype=torch.float32).reshape(1, 4, 6) / 100  # pixel (r, c) holds (6r + c) / 100
    tok = raw(patch_size=2, image_size=(4, 6), resize=False, channels=1)
    batch = tok.batch([image])
    assert batch.features.shape == (1, 1 + 6, 4)
    assert torch.equal(batch.features[0, 0], torch.zeros(4))  # class-token slot
    # patch (row 1, col 2) holds pixels rows 2-3, cols 4-5
    assert batch.features[0, 1 + 1 * 3 + 2].tolist() == pytest.approx([0.16, 0.17, 0.22, 0.23])
    assert batch.positions[0, 1:].tolist() == [[r, c] for r in range(2) for c in range(3)]
    assert batch.extras["grid"].tolist() == [[2, 3]]
    assert batch.mask.all()


@pytest.mark.parametrize(
    ("policy", "size", "grid"),
    [("pad", (10, 7), (3, 2)), ("resize", (11, 7), (3, 2)), ("pad", (3, 2), (1, 1)), ("resize", (2, 2), (1, 1))],
)
def test_sizes_that_are_not_a_multiple_of_the_patch(policy, size, grid):
    tok = raw(patch_size=4, image_size=8, resize=False, size_policy=policy, class_token=False)
    batch = tok.batch([torch.ones(3, *size)])
    assert batch.extras["grid"].tolist() == [list(grid)]
    if policy == "pad":  # padding is zero (the mean colour once normalised), real pixels kept
        assert batch.features.sum().item() == pytest.approx(3 * size[0] * size[1])


def test_error_policy_names_the_size():
    tok = raw(patch_size=4, image_size=8, resize=False, size_policy="error")
    with pytest.raises(DataError, match="10x7"):
        tok.batch([torch.zeros(3, 10, 7)])


@pytest.mark.parametrize("channels, dtype", [(3, torch.uint8), (1, torch.uint8), (3, torch.float32)])
def test_a_list_of_equal_size_tensors_tokenizes_as_each_image_alone(channels, dtype):
    """A dataset's tensors are stacked and preprocessed at once (resized, channels matched, normalised):
    the tokens must be those of each image on its own."""
    images = torch.randint(0, 256, (3, channels, 37, 21), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    images = images.float() / 255 if dtype.is_floating_point else images
    tok = ImagePatchTokenizer(patch_size=4, image_size=8)
    together = tok.batch(list(images))
    odd_one = torch.zeros(channels, 5, 5, dtype=dtype)  # another size: each image is preprocessed on its own
    alone = [tok.batch([image, odd_one]).select(slice(0, 1)) for image in images]
    torch.testing.assert_close(together.features, torch.cat([a.features for a in alone]))
    torch.testing.assert_close(together.positions, torch.cat([a.positions for a in alone]))
    assert together.extras["grid"].tolist() == [[2, 2]] * 3


def test_a_list_mixing_uint8_and_float_tensors_scales_each_by_its_own_type():
    """One picture as uint8 (0..255) and as float (0..1) in one list: both must give the same tokens,
    so such a list is not stacked into one dtype before scaling."""
    pixels = torch.randint(0, 256, (3, 8, 8), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    batch = ImagePatchTokenizer(patch_size=4, image_size=8).batch([pixels, pixels.float() / 255])
    torch.testing.assert_close(batch.features[0], batch.features[1])


def test_resize_to_training_size_by_default():
    tok = raw(patch_size=4, image_size=8)
    batch = tok.batch([torch.rand(3, 37, 21)])
    assert batch.extras["grid"].tolist() == [[2, 2]]


def test_pil_modes_uint8_and_float_tensors_agree():
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, size=(8, 8, 3), dtype=np.uint8)
    tok = ImagePatchTokenizer(patch_size=4, image_size=8)
    from_pil = tok.batch([Image.fromarray(pixels)]).features
    as_uint8 = torch.from_numpy(pixels).permute(2, 0, 1)
    torch.testing.assert_close(tok.batch([as_uint8]).features, from_pil)
    torch.testing.assert_close(tok.batch([as_uint8.float() / 255]).features, from_pil)
    torch.testing.assert_close(tok.batch(as_uint8[None]).features, from_pil)  # batched fast path
    rgba = Image.fromarray(np.dstack([pixels, np.full((8, 8), 7, np.uint8)]), "RGBA")
    torch.testing.assert_close(tok.batch([rgba]).features, from_pil)


@pytest.mark.parametrize("mode", ["L", "P", "1", "RGBA", "I;16"])
def test_any_pil_mode_becomes_three_channels(mode):
    image = Image.new("RGB", (9, 9), (200, 30, 60)).convert(mode)
    batch = raw(patch_size=3, image_size=9).batch([image])
    assert batch.features.shape == (1, 1 + 9, 27)


def test_grayscale_is_repeated_over_channels():
    gray = Image.fromarray(np.arange(64, dtype=np.uint8).reshape(8, 8) * 3, "L")
    rgb = gray.convert("RGB")
    tok = raw(patch_size=4, image_size=8)
    torch.testing.assert_close(tok.batch([gray]).features, tok.batch([rgb]).features)


def test_files_and_corrupt_files(tmp_path):
    good = tmp_path / "good.png"
    Image.new("RGB", (8, 8), (1, 2, 3)).save(good)
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image at all")
    tok = raw(patch_size=4, image_size=8)
    assert tok.batch([str(good)]).features.shape == (1, 5, 48)
    with pytest.raises(DataError, match="bad.png"):
        tok.batch([bad])
    with pytest.raises(DataError, match="missing.png: no such file"):
        tok.batch([tmp_path / "missing.png"])
    with pytest.raises(DataError, match="shape"):
        tok.batch([torch.zeros(1, 1, 3, 8, 8)])
    with pytest.raises(DataError, match="channels"):
        tok.batch([torch.zeros(2, 8, 8)])


def _tiny_vit(tok: ImagePatchTokenizer, d: int = 16) -> EncoderClassifier:
    torch.manual_seed(0)
    pool = "cls" if tok.class_token else "mean"
    head = ClassificationHead(d, 5, pool=pool, n_prefix=int(tok.class_token))
    cfg = TransformerConfig(d_model=d, n_heads=2, n_layers=2, dropout=0.0, activation="gelu")
    return EncoderClassifier(tok.build_embedder(d), cfg, head).eval()


@pytest.mark.parametrize("position", ["sincos", "learned"])
@pytest.mark.parametrize("class_token", [True, False])
def test_mixed_sizes_in_one_batch_match_single_images(position, class_token):
    tok = raw(patch_size=4, image_size=8, resize=False, position=position, class_token=class_token)
    model = _tiny_vit(tok)
    images = [torch.rand(3, 8, 8), torch.rand(3, 12, 16), torch.rand(3, 4, 8)]
    batch = tok.batch(images)
    assert batch.mask.sum(dim=1).tolist() == [int(class_token) + n for n in (4, 12, 2)]
    assert batch.extras["grid"].tolist() == [[2, 2], [3, 4], [1, 2]]
    with torch.no_grad():
        together = model(batch)
        alone = torch.cat([model(tok.batch([im])) for im in images])
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-5)


def test_learned_table_is_interpolated_for_other_grids():
    table = torch.arange(4.0).reshape(1, 4, 1)  # 2x2 grid, 1 channel: [[0, 1], [2, 3]]
    assert resample_grid_table(table, (2, 2), (2, 2)) is table
    bigger = resample_grid_table(table, (2, 2), (4, 4), mode="bilinear").reshape(4, 4)
    assert bigger[0, 0] < bigger[0, 3] < bigger[3, 3]  # keeps the layout: increases right and down
    assert bigger.mean().item() == pytest.approx(1.5)


@pytest.mark.parametrize("kind", [ImagePatchTokenizer, LocalPatchTokenizer])
def test_position_std_draws_the_learned_table_at_that_scale_and_every_other_weight_as_before(kind) -> None:
    tok = kind(patch_size=4, image_size=32, position="learned")  # 64 cells + the class token's row

    def built(**kwargs) -> dict[str, torch.Tensor]:
        torch.manual_seed(0)
        return tok.build_embedder(64, **kwargs).state_dict()

    timm_init, wide = built(), built(position_std=1.0)
    assert timm_init["pos_embed"].std().item() == pytest.approx(0.02, rel=0.05)  # timm's default, kept
    assert wide["pos_embed"].std().item() == pytest.approx(1.0, rel=0.05)
    assert wide.keys() == timm_init.keys()
    assert all(torch.equal(wide[k], timm_init[k]) for k in wide if k != "pos_embed")  # only the table differs
    no_table = kind(patch_size=4, image_size=32).build_embedder(64, position_std=1.0)
    assert no_table.pos_embed is None  # sin/cos: nothing to draw


def test_save_and_load_round_trip(tmp_path):
    tok = ImagePatchTokenizer(patch_size=4, image_size=(8, 12), position="learned", no_embed_class=True)
    tok.save(tmp_path)
    loaded = load_tokenizer(tmp_path)
    assert isinstance(loaded, ImagePatchTokenizer)
    assert loaded.get_config() == tok.get_config()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"patch_size": 16, "image_size": 8}, "smaller than one"),
        ({"patch_size": 3, "image_size": 8}, "not a multiple"),
        ({"size_policy": "stretch"}, "size_policy"),
        ({"mean": (0.5,)}, "mean has 1 values"),
        ({"channels": 2}, "channels"),
    ],
)
def test_bad_settings_are_clear_errors(kwargs, message):
    with pytest.raises(TokenizerError, match=message):
        ImagePatchTokenizer(**kwargs)


def test_sincos_needs_width_divisible_by_four():
    with pytest.raises(TokenizerError, match="divisible by 4"):
        ImagePatchTokenizer(patch_size=4, image_size=8).build_embedder(18)


@pytest.mark.parametrize("patch", [0, -4])
def test_a_patch_size_that_is_not_positive_is_one_tokenizer_error(patch: int) -> None:
    """`--patch-size 0` divided by zero while the other checks ran (an internal ZeroDivisionError)."""
    with pytest.raises(TokenizerError, match=f"patch_size must be positive, got {patch}"):
        ImagePatchTokenizer(patch_size=patch, image_size=64)


@pytest.mark.parametrize("channels", [1, 3])
def test_a_16_bit_png_is_scaled_to_0_1_not_clipped_white(tmp_path, channels: int) -> None:
    """PIL's convert clips a 16-bit grey image at 255: a full-range ramp came out 99.6% white."""
    ramp = np.arange(256 * 256, dtype=np.uint16).reshape(256, 256)  # 0 .. 65535
    Image.fromarray(ramp).save(tmp_path / "ramp16.png")
    assert Image.open(tmp_path / "ramp16.png").mode == "I;16"
    pixels = raw(channels=channels, image_size=256, patch_size=16).to_tensor(tmp_path / "ramp16.png")
    assert pixels.shape == (channels, 256, 256)
    expected = torch.from_numpy(ramp.astype(np.float32) / 65535)
    for c in range(channels):
        torch.testing.assert_close(pixels[c], expected)
