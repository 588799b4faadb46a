"""The contestants: local-readout CNNs of growing depth, a global-head CNN, a small Transformer.

Every model maps ``[B, 3, H, W]`` images in [0, 1] to ``[B, n_classes]`` logits.

* :class:`LocalCNN` -- ``depth`` 3x3 conv + ReLU layers (optionally each followed by 2x2
  max-pooling while the map is bigger than one cell), then a *pointwise* readout (1x1
  convs, so no wider view) giving class scores at every location, averaged over
  locations. Each location's score depends only on the pixels in its receptive field,
  and averaging is additive, so the only way two far-apart birds can interact is for
  one receptive field to cover both.
* :class:`GlobalCNN` -- the stronger baseline: a pooled conv stack whose whole final map
  is flattened into an MLP, so every logit sees every pixel.
* :class:`BirdTransformer` -- tokformer's image patch tokenizer + shared encoder +
  classification head (a small ViT): every token can attend to every other from layer 1.

Models are named by spec strings (``local-d4``, ``pool-d3``, ``global``, ``transformer-l2``,
and ``transformer-l2-x4`` for the same model trained four times as many steps) so an
experiment grid is a list of names; :func:`build_model` turns one into a module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from torch import Tensor, nn

from tokformer.classifier import EncoderClassifier
from tokformer.config import TransformerConfig
from tokformer.heads import ClassificationHead
from tokformer.tokenizers.image import ImagePatchTokenizer

# The generator's images are roughly mid-grey with moderate contrast.
PIXEL_MEAN, PIXEL_STD = 0.5, 0.25


def _normalise(images: Tensor) -> Tensor:
    return (images - PIXEL_MEAN) / PIXEL_STD


def conv_stack(depth: int, width: int, pool: bool, image_size: int) -> nn.Sequential:
    """``depth`` x (3x3 conv, ReLU[, 2x2 max-pool while the map is > 1 px]); [B, 3, H, W] -> [B, width, h, w]."""
    layers: list[nn.Module] = []
    channels, side = 3, image_size
    for _ in range(depth):
        layers += [nn.Conv2d(channels, width, kernel_size=3, padding=1), nn.ReLU()]
        channels = width
        if pool and side > 1:
            layers.append(nn.MaxPool2d(2))
            side //= 2
    return nn.Sequential(*layers)


class LocalCNN(nn.Module):
    """Conv stack + pointwise readout, logits = mean over locations of per-location scores.

    Args:
        n_classes: logits per location (and per image).
        depth: number of 3x3 conv layers.
        width: channels of every conv layer.
        pool: 2x2 max-pool after each conv (receptive field grows geometrically).
        image_size: input side, to stop pooling at a 1x1 map.
        readout_width: hidden width of the 1x1-conv readout MLP.
    """

    def __init__(
        self, n_classes: int, depth: int, *, width: int = 16, pool: bool = False, image_size: int = 64,
        readout_width: int = 32,
    ) -> None:
        super().__init__()
        self.depth = depth
        self.pool = pool
        self.features = conv_stack(depth, width, pool, image_size)
        self.readout = nn.Sequential(  # 1x1 convs: a per-location MLP that widens nothing
            nn.Conv2d(width, readout_width, kernel_size=1),
            nn.ReLU(),
            nn.Conv2d(readout_width, n_classes, kernel_size=1),
        )

    def score_map(self, images: Tensor) -> Tensor:
        """Per-location class scores ``[B, n_classes, h, w]``: each depends only on its receptive field."""
        return self.readout(self.features(_normalise(images)))

    def forward(self, images: Tensor) -> Tensor:  # [B, 3, H, W] -> [B, n_classes]
        # The mean is a sum scaled by the fixed number of locations: additive over locations.
        return self.score_map(images).mean(dim=(2, 3))


class GlobalCNN(nn.Module):
    """Pooled conv stack, then flatten + MLP: every logit depends on the whole image."""

    def __init__(self, n_classes: int, *, depth: int = 4, width: int = 32, image_size: int = 64,
                 hidden: int = 128) -> None:
        super().__init__()
        self.depth = depth
        self.features = conv_stack(depth, width, pool=True, image_size=image_size)
        side = max(1, image_size // 2**depth)
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(width * side * side, hidden), nn.ReLU(), nn.Linear(hidden, n_classes)
        )

    def forward(self, images: Tensor) -> Tensor:  # [B, 3, H, W] -> [B, n_classes]
        return self.head(self.features(_normalise(images)))


class BirdTransformer(nn.Module):
    """tokformer's image patch tokenizer -> embedder -> encoder -> mean-pooled head.

    The tokenizer normalises pixels and cuts ``patch`` x ``patch`` patches with 2-D sin/cos
    positions (so attention knows which bird is top-right). 8 x 8 patches make a 64-token
    image in which a bird covers about 3 x 3 patches; with 16 x 16 patches a bird's parts
    fall into up to four tokens that must be reassembled, and counting suffered (measured).
    The head averages the patch tokens, like the CNNs' mean readout; the class token stays as
    a global scratch token every patch can attend to.
    """

    def __init__(self, n_classes: int, *, n_layers: int = 2, d_model: int = 64, n_heads: int = 4,
                 patch: int = 8, image_size: int = 64) -> None:
        super().__init__()
        self.depth = n_layers
        self.tokenizer = ImagePatchTokenizer(
            patch_size=patch, image_size=image_size, class_token=True,
            mean=(PIXEL_MEAN,) * 3, std=(PIXEL_STD,) * 3,
        )
        cfg = TransformerConfig(d_model=d_model, n_heads=n_heads, n_layers=n_layers, d_ff=2 * d_model,
                                dropout=0.0, activation="gelu")
        head = ClassificationHead(d_model, n_classes, pool="mean", n_prefix=1)
        self.net = EncoderClassifier(self.tokenizer.build_embedder(d_model), cfg, head)

    @property
    def grid_size(self) -> tuple[int, int]:
        return self.tokenizer.grid_size

    def forward(self, images: Tensor) -> Tensor:  # [B, 3, H, W] -> [B, n_classes]
        return self.net(self.tokenizer.batch(images))


@dataclass(frozen=True)
class ModelSpec:
    """A parsed model name: family (local, pool, global, transformer), depth, and how many
    times the sweep's step budget it trains for (``budget``, 1 but for ``-xN`` names)."""

    name: str
    family: str
    depth: int
    budget: int = 1

    @property
    def label(self) -> str:
        """Human-readable name for tables and plots."""
        label = {
            "local": f"CNN local readout, no pooling, {self.depth} conv",
            "pool": f"CNN local readout, max-pool, {self.depth} conv",
            "global": f"CNN global head (flatten+MLP), {self.depth} conv",
            "transformer": f"Transformer, {self.depth} layer{'s' if self.depth > 1 else ''}",
        }[self.family]
        return label + (f", {self.budget}x steps" if self.budget > 1 else "")


_SPEC = re.compile(r"^(local|pool)-d(\d+)$|^(global)$|^(transformer)-l(\d+)(?:-x(\d+))?$")


def parse_spec(name: str) -> ModelSpec:
    """``local-d4`` / ``pool-d3`` / ``global`` / ``transformer-l2`` / ``transformer-l2-x4`` -> ModelSpec,
    or ValueError."""
    match = _SPEC.match(name)
    if match is None:
        raise ValueError(f"unknown model {name!r}; use local-dN, pool-dN, global, transformer-lN or transformer-lN-xK")
    budget = 1
    if match.group(1):
        family, depth = match.group(1), int(match.group(2))
    elif match.group(3):
        family, depth = "global", 4
    else:
        family, depth, budget = "transformer", int(match.group(5)), int(match.group(6) or 1)
    if depth < 1 or budget < 1:
        raise ValueError(f"model {name!r}: depth and step multiple must be at least 1")
    return ModelSpec(name, family, depth, budget)


def build_model(name: str, n_classes: int, image_size: int = 64) -> nn.Module:
    """A freshly initialised model for spec ``name`` (seed torch first for reproducibility)."""
    spec = parse_spec(name)
    if spec.family in ("local", "pool"):
        return LocalCNN(n_classes, spec.depth, pool=spec.family == "pool", image_size=image_size)
    if spec.family == "global":
        return GlobalCNN(n_classes, depth=spec.depth, image_size=image_size)
    return BirdTransformer(n_classes, n_layers=spec.depth, image_size=image_size)


def prefers_channels_last(model: nn.Module) -> bool:
    """Convolution models run several times faster on CPU in channels-last memory order."""
    return isinstance(model, (LocalCNN, GlobalCNN))
