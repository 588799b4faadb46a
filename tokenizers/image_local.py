"""Local image tokenizer: each patch token is computed by a small CNN from that patch alone.

A linear patch embedding has no locality prior: it must learn from data that neighbouring
pixels belong together, which a small Vision Transformer on a small data set does slowly.
A convolution has that prior built in. This tokenizer puts it where the lecture says domain
knowledge belongs, *where data become tokens*, and nowhere else: the CNN runs on every
``P x P`` patch separately (zero padding at the patch's border, no normalisation across
patches), so a token depends on its own patch's pixels only and attention stays the one
path between far-apart patches. ``tests/test_image_local.py`` checks that the gradient of
token i with respect to every pixel outside patch i is exactly zero.

Tokenization (resizing, normalisation, patch cutting, positions, class token) is the
linear patch tokenizer's; only the embedder's projection differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from einops import rearrange
from torch import Tensor, nn

from tokformer.tokenizers.base import TokenizerError
from tokformer.tokenizers.image import ImagePatchTokenizer, PatchEmbedder
from tokformer.tokenizers.registry import register_tokenizer


class PatchCNN(nn.Module):
    """``[..., C*P*P]`` pixels of one patch (conv-weight order) -> ``[..., d_model]``.

    ``depth`` stages of 3x3 conv + ReLU, each followed by a 2x2 max-pool while the map is
    at least 4 px wide (so a 2x2 map with its layout survives to the end), channels doubling
    per stage from ``width``; then the map is flattened and projected linearly to
    ``d_model``. Flattening (not pooling) keeps where inside the patch a feature sits.

    Args:
        channels: image channels C.
        patch_size: patch side P.
        d_model: token width.
        width: channels of the first conv.
        depth: conv stages.
    """

    def __init__(self, channels: int, patch_size: int, d_model: int, *, width: int = 32, depth: int = 2) -> None:
        super().__init__()
        self.channels, self.patch_size = channels, patch_size
        layers: list[nn.Module] = []
        c_in, side = channels, patch_size
        for stage in range(depth):
            c_out = width * 2**stage
            layers += [nn.Conv2d(c_in, c_out, kernel_size=3, padding=1), nn.ReLU()]
            if side >= 4 and side % 2 == 0:
                layers.append(nn.MaxPool2d(2))
                side //= 2
            c_in = c_out
        self.convs = nn.Sequential(*layers)
        self.out = nn.Linear(c_in * side * side, d_model)
        self.out_features = d_model
        for layer in self.convs:
            if isinstance(layer, nn.Conv2d):  # He init: ReLU stacks keep their signal scale
                nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
                nn.init.zeros_(layer.bias)

    def forward(self, patches: Tensor) -> Tensor:  # [..., C*P*P] -> [..., d]
        lead = patches.shape[:-1]
        x = patches.reshape(-1, self.channels, self.patch_size, self.patch_size)  # [B*N, C, P, P]: patches apart
        # channels-last: oneDNN's convolutions and max-pools run 1.3-1.6x as fast in it on CPU
        # (benchmarks/results/patch_cnn.md); the same function, its sums taken in another order
        x = x.contiguous(memory_format=torch.channels_last)
        x = self.convs(x)  # [B*N, c, s, s]
        return self.out(rearrange(x, "n c h w -> n (c h w)")).reshape(*lead, -1)


@register_tokenizer("image_local")
class LocalPatchTokenizer(ImagePatchTokenizer):
    """The patch tokenizer with a per-patch CNN as its embedding (see the module doc).

    Takes every option of :class:`ImagePatchTokenizer`, plus:

    Args:
        cnn_width: channels of the CNN's first conv (they double per stage).
        cnn_depth: conv stages of the CNN.
    """

    def __init__(
        self,
        patch_size: int = 8,
        image_size: int | Sequence[int] = 224,
        *,
        cnn_width: int = 32,
        cnn_depth: int = 2,
        **options: Any,
    ) -> None:
        self.cnn_width = int(cnn_width)
        self.cnn_depth = int(cnn_depth)
        if self.cnn_width < 1 or self.cnn_depth < 1:
            raise TokenizerError(f"image_local: cnn_width and cnn_depth must be positive, got "
                                 f"{self.cnn_width} and {self.cnn_depth}")
        super().__init__(patch_size, image_size, **options)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "cnn_width": self.cnn_width, "cnn_depth": self.cnn_depth}

    def build_embedder(self, d_model: int, *, dropout: float = 0.0,
                       position_std: float | None = None) -> PatchEmbedder:
        cnn = PatchCNN(self.channels, self.patch_size, d_model, width=self.cnn_width, depth=self.cnn_depth)
        return self._embedder(d_model, dropout, proj=cnn, position_std=position_std)
