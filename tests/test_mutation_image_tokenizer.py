"""What the image tokenizers promise that their tests left unchecked (mutation testing,
benchmarks/results/mutation.md): the sin/cos code reaching the tokens at all, the learned table's
gather, resampling and dtype, the tokens' device, the defaults, the options reaching the embedder,
the per-patch CNN's layout, a palette's transparency, and what the errors say."""

from __future__ import annotations

import re
import warnings

import pytest
import torch
from PIL import Image
from torch import nn
from torchvision.transforms import InterpolationMode
from torchvision.transforms.v2 import functional as TF

from tokformer.batch import TokenBatch
from tokformer.engine.optim import no_decay_names
from tokformer.errors import DataError
from tokformer.positional import SinCos2DPositions
from tokformer.tokenizers import image as image_module
from tokformer.tokenizers.base import TokenizerError
from tokformer.tokenizers.image import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    ImagePatchTokenizer,
    PatchEmbedder,
    _arange_like,
    grid_positions,
    patchify,
    resample_grid_table,
)
from tokformer.tokenizers.image_local import LocalPatchTokenizer, PatchCNN


def randomised(module: nn.Module) -> nn.Module:
    torch.manual_seed(5)
    for p in module.parameters():
        nn.init.normal_(p, std=0.3)
    return module


def subset(batch: TokenBatch, order: torch.Tensor) -> TokenBatch:
    """The batch's tokens ``order`` (a permutation, or fewer of them), grids kept."""
    return TokenBatch(mask=batch.mask[:, order], features=batch.features[:, order],
                      positions=batch.positions[:, order], extras=batch.extras)


# -- defaults ------------------------------------------------------------------------


def test_the_tokenizers_defaults() -> None:
    """ViT-B/16's layout: 16 px patches of a 224 px image, a class token whose learned position is the table's
    first row; ImageNet's normalisation; sin/cos positions; antialiased bicubic resizing."""
    assert ImagePatchTokenizer().get_config() == {
        "patch_size": 16, "image_size": [224, 224], "resize": True, "channels": 3, "class_token": True,
        "position": "sincos", "no_embed_class": False, "size_policy": "pad", "mean": list(IMAGENET_MEAN),
        "std": list(IMAGENET_STD), "interpolation": "bicubic"}
    local = LocalPatchTokenizer().get_config()
    assert (local["patch_size"], local["image_size"], local["cnn_width"], local["cnn_depth"]) == (8, [224, 224], 32, 2)


def test_the_patch_embedders_defaults() -> None:
    embedder = PatchEmbedder(12, 8, grid_size=(2, 3))
    assert embedder.n_prefix == 1 and embedder.cls_token is not None
    assert embedder.sincos is not None and embedder.pos_embed is None
    assert embedder.interpolation == "bicubic" and embedder.drop.p == 0.0
    assert isinstance(embedder.proj, nn.Linear)
    learned = PatchEmbedder(12, 8, grid_size=(2, 3), position="learned")
    assert learned.cls_has_pos and learned.pos_embed.shape == (1, 1 + 6, 8)  # the class token's row first
    assert patchify(torch.rand(1, 3, 4, 6), 2).shape == (1, 6, 12)  # no class slot unless asked


def test_a_given_projection_replaces_the_linear_one() -> None:
    proj = nn.Identity()
    assert PatchEmbedder(8, 8, grid_size=(1, 1), proj=proj).proj is proj


def test_the_class_token_starts_near_zero_and_a_position_std_sets_the_tables_scale() -> None:
    torch.manual_seed(0)
    cls = PatchEmbedder(12, 64, grid_size=(2, 2)).cls_token
    assert 0 < cls.abs().max() < 1e-5  # timm: normal, std 1e-6
    table = PatchEmbedder(12, 64, grid_size=(8, 8), position="learned", position_std=0.5).pos_embed
    assert table.std().item() == pytest.approx(0.5, rel=0.05)


def test_the_class_token_and_the_table_are_not_decayed() -> None:
    learned = PatchEmbedder(12, 8, grid_size=(2, 2), position="learned")
    assert {"cls_token", "pos_embed"} <= no_decay_names(learned)
    assert learned.no_weight_decay() == ["cls_token", "pos_embed"]
    assert PatchEmbedder(12, 8, grid_size=(2, 2), class_token=False).no_weight_decay() == []


# -- what the embedder adds ----------------------------------------------------------


def test_sincos_positions_are_added_to_each_patchs_projection() -> None:
    tokenizer = ImagePatchTokenizer(4, (8, 12), class_token=False)
    embedder = randomised(tokenizer.build_embedder(16))
    batch = tokenizer.batch(torch.rand(2, 3, 8, 12))
    code = SinCos2DPositions(16)(grid_positions(2, 3)[None])  # [1, 6, 16]: (row, col) of each patch
    torch.testing.assert_close(embedder(batch), embedder.proj(batch.features) + code)


@pytest.mark.parametrize("position", ["sincos", "learned"])
def test_under_autocast_the_tokens_take_the_projections_dtype(position: str) -> None:
    """The position code (float32 positions, a float32 table) is cast to the tokens', not the other way.
    (No class token: autocast's cat would promote the tokens to the float32 parameter's dtype.)"""
    tokenizer = ImagePatchTokenizer(4, 8, position=position, class_token=False)
    embedder = tokenizer.build_embedder(16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        tokens = embedder(tokenizer.batch(torch.rand(2, 3, 8, 8)))
    assert tokens.dtype == torch.bfloat16


def test_the_learned_table_is_gathered_for_tokens_out_of_grid_order() -> None:
    tokenizer = ImagePatchTokenizer(4, (8, 12), class_token=False, position="learned")
    embedder = randomised(tokenizer.build_embedder(16))
    batch = tokenizer.batch(torch.rand(2, 3, 8, 12))
    for order in (torch.tensor([5, 0, 3]), torch.tensor([3, 4, 5, 0, 1, 2])):  # fewer tokens; all, permuted
        part = subset(batch, order)
        added = embedder(part) - embedder.proj(part.features)
        torch.testing.assert_close(added, embedder.pos_embed[:, order].expand(2, -1, -1))


def test_patches_in_grid_order_add_the_table_without_a_gather(monkeypatch: pytest.MonkeyPatch) -> None:
    tokenizer = ImagePatchTokenizer(4, (8, 12), class_token=False, position="learned")
    embedder = tokenizer.build_embedder(16)
    batch = tokenizer.batch(torch.rand(2, 3, 8, 12))

    def gather(*args, **kwargs):
        raise AssertionError("the usual batch (every patch, in grid order) needs no gather")

    monkeypatch.setattr(image_module.F, "embedding", gather)
    embedder(batch)


def test_a_traced_embedder_refuses_another_grid_in_words() -> None:
    embedder = ImagePatchTokenizer(4, 8, position="learned").build_embedder(16)
    rows = cols = torch.zeros(1, 4, dtype=torch.long)
    with pytest.raises(RuntimeError, match="^a traced PatchEmbedder takes images of its training size only$"):
        embedder._learned_traced(rows, cols, torch.tensor([[3, 3]]))


def test_the_tokens_are_made_on_the_images_device() -> None:
    batch = ImagePatchTokenizer(4, 8)._tokens_same_size(torch.empty(2, 3, 8, 8, device="meta"))
    assert {t.device.type for t in (batch.features, batch.positions, batch.mask, batch.extras["grid"])} == {"meta"}
    assert _arange_like(torch.zeros(2, 3, dtype=torch.long, device="meta")).device.type == "meta"


# -- resampling ----------------------------------------------------------------------


@pytest.mark.parametrize(("mode", "new"), [("bicubic", (4, 5)), ("bilinear", (1, 2)), ("bicubic", (1, 2))])
def test_a_resampled_table_matches_timm(mode: str, new: tuple[int, int]) -> None:
    """A non-square grid (rows and columns told apart), down and up, antialiased like timm."""
    from timm.layers import resample_abs_pos_embed

    table = torch.randn(1, 2 * 3, 8)
    theirs = resample_abs_pos_embed(table, list(new), [2, 3], num_prefix_tokens=0, interpolation=mode)
    torch.testing.assert_close(resample_grid_table(table, (2, 3), new, mode), theirs)


def test_a_table_is_resampled_bicubic_by_default() -> None:
    table = torch.randn(1, 2 * 3, 8)
    torch.testing.assert_close(resample_grid_table(table, (2, 3), (4, 5)),
                               resample_grid_table(table, (2, 3), (4, 5), "bicubic"))


def test_a_resampled_table_keeps_its_dtype() -> None:
    table = torch.randn(1, 4, 8, dtype=torch.bfloat16)
    assert resample_grid_table(table, (2, 2), (3, 3)).dtype == torch.bfloat16


def test_the_embedders_table_is_resampled_with_its_interpolation() -> None:
    embedder = ImagePatchTokenizer(4, 8, position="learned", interpolation="bilinear").build_embedder(16)
    randomised(embedder)
    expected = resample_grid_table(embedder.pos_embed[:, 1:], (2, 2), (3, 3), "bilinear")[0]
    torch.testing.assert_close(embedder.grid_table((3, 3)), expected)


# -- options reaching the embedder ---------------------------------------------------


def test_the_tokenizers_options_reach_its_embedder() -> None:
    tokenizer = ImagePatchTokenizer(4, 8, position="learned", interpolation="bilinear")
    assert tokenizer.build_embedder(16).drop.p == 0.0
    embedder = tokenizer.build_embedder(16, dropout=0.25)
    assert embedder.interpolation == "bilinear" and embedder.drop.p == 0.25
    local = LocalPatchTokenizer(8, 16, cnn_width=5, cnn_depth=3).build_embedder(16)
    assert isinstance(local.proj, PatchCNN)
    convs = [m for m in local.proj.convs if isinstance(m, nn.Conv2d)]
    assert [c.out_channels for c in convs] == [5, 10, 20]


# -- the per-patch CNN ---------------------------------------------------------------


def test_the_patch_cnns_defaults() -> None:
    cnn = PatchCNN(3, 8, 16)
    assert [m.out_channels for m in cnn.convs if isinstance(m, nn.Conv2d)] == [32, 64]
    assert cnn.out_features == 16


@pytest.mark.parametrize(("patch", "depth", "side"), [(8, 3, 2), (6, 2, 3), (4, 2, 2), (16, 3, 2), (8, 1, 4)])
def test_the_patch_cnn_pools_while_its_map_is_at_least_4_px_and_even(patch: int, depth: int, side: int) -> None:
    """The map halves per stage while it is at least 4 px and even, so a 2 x 2 map (or an odd one) is kept."""
    cnn = PatchCNN(3, patch, 16, width=4, depth=depth)
    assert cnn.out.in_features == 4 * 2 ** (depth - 1) * side * side


def test_a_one_channel_one_stage_cnn_is_allowed_and_zero_is_not() -> None:
    assert LocalPatchTokenizer(8, 16, cnn_width=1, cnn_depth=1).cnn_width == 1
    for width, depth in ((0, 1), (1, 0)):
        with pytest.raises(TokenizerError, match="cnn_width and cnn_depth must be positive"):
            LocalPatchTokenizer(8, 16, cnn_width=width, cnn_depth=depth)


# -- preprocessing -------------------------------------------------------------------


def test_a_list_of_same_size_tensors_is_preprocessed_in_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    tokenizer = ImagePatchTokenizer(4, 8)
    calls: list[torch.Size] = []
    original = tokenizer.preprocess
    monkeypatch.setattr(tokenizer, "preprocess", lambda images: calls.append(images.shape) or original(images))
    tokenizer.batch([torch.rand(3, 8, 8) for _ in range(3)])
    assert calls == [torch.Size([3, 3, 8, 8])]
    calls.clear()
    tokenizer.batch([torch.rand(3, 8, 8), torch.rand(3, 8, 8, dtype=torch.float64)])  # two dtypes: one at a time
    assert len(calls) == 2


def test_an_image_already_at_image_size_is_not_resampled(monkeypatch: pytest.MonkeyPatch) -> None:
    def resize(*args, **kwargs):
        raise AssertionError("resampled an image already at image_size")

    monkeypatch.setattr(TF, "resize", resize)
    tokenizer = ImagePatchTokenizer(4, (8, 12))
    tokenizer.batch(torch.rand(2, 3, 8, 12))  # a [B, C, H, W] batch
    tokenizer.batch([Image.new("RGB", (12, 8))])  # one [C, H, W] image at a time


@pytest.mark.parametrize(("options", "size", "target"), [
    ({}, (20, 24), [8, 8]),  # resize to image_size
    ({"resize": False, "size_policy": "resize"}, (20, 20), [16, 16]),  # to the nearest multiple of the patch
])
def test_resizing_is_antialiased_bicubic(options: dict, size: tuple[int, int], target: list[int]) -> None:
    tokenizer = ImagePatchTokenizer(**{"patch_size": 8 if options else 4, "image_size": 8, "mean": None, "std": None,
                                       "class_token": False, **options})
    image = torch.rand(3, *size)
    expected = TF.resize(image, target, interpolation=InterpolationMode.BICUBIC, antialias=True)
    torch.testing.assert_close(tokenizer.batch([image]).features, tokenizer.batch(expected[None]).features)


def test_a_palette_image_with_transparency_is_converted_through_rgba() -> None:
    """PIL warns when a palette with per-entry transparency goes straight to RGB; through RGBA it does not."""
    image = Image.new("P", (8, 8))
    image.putpalette([255, 0, 0, 0, 255, 0] * 128)
    image.info["transparency"] = b"\x00\x80" + b"\xff" * 254
    tokenizer = ImagePatchTokenizer(4, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tokens = tokenizer.batch([image]).features
    torch.testing.assert_close(tokens, tokenizer.batch([image.convert("RGBA").convert("RGB")]).features)


def test_an_unconvertible_image_is_named_by_its_path_or_not_at_all(tmp_path) -> None:
    tokenizer = ImagePatchTokenizer(4, 8, channels=1, mean=None, std=None)  # PIL turns LAB into RGB, not into L
    with pytest.raises(DataError, match=r"^cannot convert a PIL image of mode 'LAB' to L"):
        tokenizer.batch([Image.new("LAB", (8, 8))])
    path = tmp_path / "lab.tif"
    Image.new("LAB", (8, 8)).save(path)
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}: cannot convert a PIL image of mode 'LAB'"):
        tokenizer.batch([str(path)])


@pytest.mark.parametrize(("options", "message"), [
    ({"position": "rope"}, "position must be 'sincos', 'learned' or 'none', got 'rope'"),
    ({"interpolation": "nearest"}, "interpolation must be 'bilinear' or 'bicubic', got 'nearest'"),
    ({"mean": (0.5, 0.5, 0.5), "std": None}, "give both mean and std, or neither"),
    ({"std": (0.5, 0.0, 0.5)}, "std must be positive, got (0.5, 0.0, 0.5)"),
])
def test_a_bad_option_is_refused_in_words(options: dict, message: str) -> None:
    with pytest.raises(TokenizerError, match=re.escape(f"image tokenizer: {message}")):
        ImagePatchTokenizer(4, 8, **options)


def test_read_at_size_is_the_sample_as_a_float_tensor_resized_as_a_batch_would_be() -> None:
    """What a dataset returns for the batch (vqa's user images): the sample's own pixels brought to the model's
    size with the tokenizer's interpolation and antialiasing, not normalised; at that size already, untouched;
    with ``resize`` off, at its own size."""
    picture = Image.fromarray(torch.randint(0, 256, (30, 50, 3), dtype=torch.uint8).numpy())
    tokenizer = ImagePatchTokenizer(patch_size=8, image_size=16, interpolation="bilinear")
    pixels = tokenizer.to_tensor(picture)  # [3, 30, 50] in [0, 1]
    read = tokenizer.read_at_size(picture)
    expected = TF.resize(pixels, [16, 16], interpolation=InterpolationMode.BILINEAR, antialias=True)
    assert read.shape == (3, 16, 16) and torch.equal(read, expected)
    assert torch.equal(tokenizer.read_at_size(read), read)  # already at the model's size
    assert torch.equal(ImagePatchTokenizer(patch_size=8, image_size=16, resize=False).read_at_size(picture), pixels)


def test_one_image_is_a_picture_or_an_image_tensor_and_a_four_d_tensor_is_a_batch() -> None:
    from tokformer.tokenizers.image import is_one_image

    assert is_one_image(Image.new("RGB", (4, 4)))
    assert is_one_image(torch.zeros(3, 4, 4)) and is_one_image(torch.zeros(4, 4))  # [C, H, W] and [H, W]
    assert not is_one_image(torch.zeros(2, 3, 4, 4)) and not is_one_image(torch.zeros(4))
    assert not is_one_image([Image.new("RGB", (4, 4))]) and not is_one_image("img.png")  # paths: the task's rule
