"""The local image tokenizer: a per-patch CNN whose tokens see their own patch and nothing else."""

from __future__ import annotations

import pytest
import torch

from tokformer.tokenizers.base import TokenizerError
from tokformer.tokenizers.image import ImagePatchTokenizer
from tokformer.tokenizers.image_local import LocalPatchTokenizer, PatchCNN
from tokformer.tokenizers.registry import load_tokenizer


def _patch_of_pixel(patch: int, grid_w: int) -> torch.Tensor:  # [H, W] -> token index (class token excluded)
    rows = torch.arange(patch * 4)[:, None] // patch
    cols = torch.arange(patch * grid_w)[None, :] // patch
    return rows * grid_w + cols


@pytest.mark.parametrize(("patch", "depth", "train"), [(8, 2, True), (8, 3, False), (4, 2, True), (16, 3, True)])
def test_each_token_sees_only_its_own_patch(patch: int, depth: int, train: bool) -> None:
    """d token_i / d pixel is exactly zero for every pixel outside patch i, and not zero inside it."""
    torch.manual_seed(0)
    grid_h, grid_w = 4, 3
    tokenizer = LocalPatchTokenizer(patch, (grid_h * patch, grid_w * patch), cnn_depth=depth, cnn_width=8)
    embedder = tokenizer.build_embedder(16).train(train)
    images = torch.rand(2, 3, grid_h * patch, grid_w * patch, requires_grad=True)
    batch = tokenizer.batch(images)
    tokens = embedder(batch)  # [2, 1 + 12, 16]
    owner = _patch_of_pixel(patch, grid_w)[: grid_h * patch]  # [H, W]
    for i in range(grid_h * grid_w):
        (grad,) = torch.autograd.grad(tokens[1, 1 + i].square().sum(), images, retain_graph=True)
        outside = grad[:, :, owner != i]
        assert torch.count_nonzero(outside) == 0, f"token {i} depends on pixels outside its patch"
        assert grad[1][:, owner == i].abs().sum() > 0, f"token {i} ignores its own patch"
        assert torch.count_nonzero(grad[0]) == 0, "a token depends on another image of the batch"


def test_tokenization_is_the_linear_tokenizers() -> None:
    """Only the embedding differs: features, positions and mask are those of the patch tokenizer."""
    images = torch.rand(3, 3, 32, 48)
    local = LocalPatchTokenizer(8, (32, 48)).batch(images)
    linear = ImagePatchTokenizer(8, (32, 48)).batch(images)
    assert torch.equal(local.features, linear.features)
    assert torch.equal(local.positions, linear.positions)
    assert torch.equal(local.mask, linear.mask)


def test_patch_cnn_reads_conv_weight_order() -> None:
    """The flattened (c, p1, p2) features are reshaped back into the patch as it was cut."""
    torch.manual_seed(1)
    cnn = PatchCNN(3, 8, 12, width=4, depth=2)
    patches = torch.rand(5, 3, 8, 8)
    direct = cnn.out(cnn.convs(patches).flatten(1))  # [5, 12]
    assert torch.allclose(cnn(patches.flatten(1)), direct)


def test_patch_cnn_convolves_in_channels_last_order() -> None:
    """Every conv and pool gets its input channels-last, the order oneDNN runs 1.3-1.6x as fast on CPU
    (benchmarks/results/patch_cnn.md); the values are the NCHW ones (the test above)."""
    cnn = PatchCNN(3, 8, 12, width=4, depth=2)
    orders: list[bool] = []
    for layer in cnn.convs:
        layer.register_forward_pre_hook(
            lambda _, inputs: orders.append(inputs[0].is_contiguous(memory_format=torch.channels_last)))
    cnn(torch.rand(5, 3 * 8 * 8))
    assert len(orders) == len(cnn.convs) and all(orders)


def test_save_and_load_round_trip(tmp_path) -> None:
    tokenizer = LocalPatchTokenizer(4, 16, cnn_width=6, cnn_depth=3, channels=1, mean=None, std=None)
    tokenizer.save(tmp_path)
    loaded = load_tokenizer(tmp_path)
    assert isinstance(loaded, LocalPatchTokenizer)
    assert loaded.get_config() == tokenizer.get_config()
    torch.manual_seed(2)
    a = tokenizer.build_embedder(8)
    torch.manual_seed(2)
    b = loaded.build_embedder(8)
    batch = tokenizer.batch(torch.rand(2, 1, 16, 16))
    assert torch.equal(a(batch), b(batch))


@pytest.mark.parametrize("bad", [{"cnn_width": 0}, {"cnn_depth": 0}])
def test_rejects_empty_cnn(bad: dict) -> None:
    with pytest.raises(TokenizerError, match="must be positive"):
        LocalPatchTokenizer(8, 32, **bad)
