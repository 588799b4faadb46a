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
``transformer-l2-lpos`` for the same model with a learned position table instead of the 2-D
sin/cos code, and ``transformer-l2-x4`` for the same model trained four times as many steps) so an
experiment grid is a list of names; :func:`build_model` turns one into a module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from tokformer.config import MAX_LAYERS, TransformerConfig
from tokformer.layers import FeedForward
from tokformer.tokenizers.image import ImagePatchTokenizer, PatchEmbedder
from tokformer.tokenizers.image_local import LocalPatchTokenizer
from tokformer.transformer import Encoder

# The generator's images are roughly mid-grey with moderate contrast.
PIXEL_MEAN, PIXEL_STD = 0.5, 0.25
READOUT_HIDDEN = 128  # the hidden width of the one readout every whole-image model ends in


def readout(in_features: int, n_classes: int) -> nn.Sequential:
    """The readout every model that sees the whole image ends in (global-head CNN, Transformers,
    token mixer): ``[B, in_features] -> Linear -> ReLU -> Linear -> [B, n_classes]``.

    One shared head, so that a nonlinearity after the mixing is no family's privilege: once a
    hidden layer encodes which species sit where, "same species?" is a nonlinear function of it.
    """
    return nn.Sequential(nn.Linear(in_features, READOUT_HIDDEN), nn.ReLU(), nn.Linear(READOUT_HIDDEN, n_classes))


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

    def __init__(self, n_classes: int, *, depth: int = 4, width: int = 32, image_size: int = 64) -> None:
        super().__init__()
        self.depth = depth
        self.features = conv_stack(depth, width, pool=True, image_size=image_size)
        side = max(1, image_size // 2**depth)
        self.head = readout(width * side * side, n_classes)

    def forward(self, images: Tensor) -> Tensor:  # [B, 3, H, W] -> [B, n_classes]
        return self.head(self.features(_normalise(images)).flatten(1))  # [B, width, h, w] -> [B, width * h * w]


class BirdTransformer(nn.Module):
    """tokformer's image tokenizer -> embedder -> encoder -> mean of the patch tokens -> :func:`readout`.

    The tokenizer normalises pixels and cuts ``patch`` x ``patch`` patches with 2-D sin/cos
    positions (so attention knows which bird is top-right). With linear patches, 8 x 8 patches
    (a 64-token image, a bird over about 3 x 3 patches) counted better than 16 x 16 ones, whose
    parts a linear embedding must reassemble (measured in the first version); the local CNN
    tokenizer reads a 16 x 16 patch well and does better with it (:data:`LOCAL_TOKENIZER`).
    ``tokenizer="linear"`` embeds each patch linearly (a plain ViT); ``"local"`` embeds it
    with a small CNN that sees that patch only (:mod:`tokformer.tokenizers.image_local`), so
    the locality prior sits in the tokenizer and attention remains the only path between
    patches. The head averages the patch tokens into the readout all whole-image models share;
    the class token stays as a global scratch token every patch can attend to. ``token_norm`` and
    ``position``: see :func:`token_embedder`.
    """

    def __init__(self, n_classes: int, *, n_layers: int = 2, d_model: int = 64, n_heads: int = 4,
                 patch: int = 8, image_size: int = 64, tokenizer: str = "linear", cnn_width: int = 32,
                 cnn_depth: int = 2, token_norm: str = "standardise", position: str = "sincos") -> None:
        super().__init__()
        self.depth = n_layers
        self.tokenizer = _tokenizer(tokenizer, patch, image_size, class_token=True, cnn_width=cnn_width,
                                    cnn_depth=cnn_depth, position=position)
        cfg = TransformerConfig(d_model=d_model, n_heads=n_heads, n_layers=n_layers, d_ff=2 * d_model,
                                dropout=0.0, activation="gelu")
        self.embedder = token_embedder(self.tokenizer, d_model, token_norm)
        self.encoder = Encoder(cfg)
        self.head = readout(d_model, n_classes)

    @property
    def grid_size(self) -> tuple[int, int]:
        return self.tokenizer.grid_size

    def forward(self, images: Tensor) -> Tensor:  # [B, 3, H, W] -> [B, n_classes]
        batch = self.tokenizer.batch(images)
        x = self.encoder(self.embedder(batch), positions=batch.positions)  # [B, 1 + N, d], token 0: class token
        return self.head(x[:, 1:].mean(dim=1))


TOKEN_NORMS = ("standardise", "affine", "none")  # what a token model does to each patch embedding


POSITIONS = ("sincos", "learned")  # the position code a token model adds: :func:`token_embedder`


def token_embedder(tokenizer: ImagePatchTokenizer, d_model: int, norm: str) -> PatchEmbedder:
    """The tokenizer's embedder, with each patch's embedding normalised before the position code is added:
    ``"standardise"`` (a LayerNorm without parameters: every token leaves with zero mean and unit
    variance), ``"affine"`` (timm's ``patch_embed.norm``: a LayerNorm with a learned gain and bias) or
    ``"none"`` (the projection's output as it is: the first version's tokens).

    Why: the 2-D sin/cos code has a fixed norm (``sqrt(d / 2)``, 5.7 at d = 64), a patch embedding
    whatever its projection makes it. Where the embeddings are several times longer, the position is
    a small perturbation of every token, and attention, which must find *where* the compared bird is,
    cannot. A learned gain can grow them back; standardising pins their scale. The mixing track
    (``tokformer.tasks.birds.mixing``) measured the need; ``benchmarks/birds_calibration.py`` compares
    the three on the sweep's Transformers. Every token model of the sweep (both Transformers and the
    token mixer) gets the same, so the tokens they mix are alike.
    """
    if norm not in TOKEN_NORMS:
        raise ValueError(f"token_norm must be one of {', '.join(TOKEN_NORMS)}; got {norm!r}")
    embedder = tokenizer.build_embedder(d_model, position_std=LEARNED_POSITION_STD)
    if norm != "none":
        layer_norm = nn.LayerNorm(d_model, elementwise_affine=norm == "affine")
        embedder.proj = nn.Sequential(embedder.proj, layer_norm)  # [..., features] -> [..., d]
    return embedder


# A learned position table (``position="learned"``, the ``-lpos`` models) starts at the scale of a standardised
# token (unit variance per feature), not timm's 0.02: at 0.02 the table is 1/50 of the token it is added to, AdamW
# moves each entry by about the learning rate per step, so it takes most of a 300-step run to grow into something
# attention can read (measured, benchmarks/results/birds_positions.md: the 2-layer local-tokenizer Transformer at
# 0.514 on the validation comparison with 0.02, 0.786 with 1.0, means of 3 seeds). Why not the sin/cos code: on
# the 4 x 4 grid of 16 px patches its 16 codes are nearly parallel (mean pairwise cosine 0.91 at base 10,000): what
# tells one cell from another, the deviation of a code from their mean, has norm 1.6 against 8 for a standardised
# token. A table of unit-variance entries gives every cell a code as long as the token and nearly orthogonal to the
# others' (``benchmarks/birds_positions.py``).
LEARNED_POSITION_STD = 1.0


def _tokenizer(kind: str, patch: int, image_size: int, *, class_token: bool, cnn_width: int,
               cnn_depth: int, position: str = "sincos") -> ImagePatchTokenizer:
    """The linear or local (per-patch CNN of ``cnn_width``, ``cnn_depth``) patch tokenizer,
    normalising with the generator's statistics, adding ``position`` (:data:`POSITIONS`)."""
    if position not in POSITIONS:
        raise ValueError(f"position must be one of {', '.join(POSITIONS)}; got {position!r}")
    options = dict(patch_size=patch, image_size=image_size, class_token=class_token, resize=False,
                   mean=(PIXEL_MEAN,) * 3, std=(PIXEL_STD,) * 3,  # resize=False: other sizes stay other sizes
                   position=position)
    if kind == "local":
        return LocalPatchTokenizer(**options, cnn_width=cnn_width, cnn_depth=cnn_depth)
    if kind == "linear":
        return ImagePatchTokenizer(**options)
    raise ValueError(f"tokenizer must be 'linear' or 'local', got {kind!r}")


class TokenMixingBlock(nn.Module):
    """A Transformer block with attention replaced by one learned ``N x N`` token-mixing matrix.

    ``x + W · norm1(x)`` then the same MLP sub-block as the Transformer's. ``W[i, j]`` says how
    much token j feeds token i, the same for every image: the mixing is global from the first
    layer, like attention, but fixed rather than computed from the data, and its parameters
    grow with N² (attention's with d²). The lecture's Q&A alternative, built to be compared.
    """

    def __init__(self, n_tokens: int, d_model: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.mix = nn.Parameter(torch.eye(n_tokens) / 2 + torch.randn(n_tokens, n_tokens) * 0.02)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = FeedForward(d_model, 2 * d_model, activation="gelu")

    def forward(self, x: Tensor) -> Tensor:  # [B, N, d] -> [B, N, d]
        x = x + torch.einsum("nm,bmd->bnd", self.mix, self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TokenMixer(nn.Module):
    """Local tokenizer -> ``n_layers`` token-mixing blocks -> mean of the tokens -> :func:`readout`.

    Everything matches the local-tokenizer Transformer (tokenizer, width, MLPs, readout)
    except how tokens meet: a fixed learned matrix instead of attention. The matrix is
    ``N x N`` for the training grid, so the model takes images of the training size only.
    """

    def __init__(self, n_classes: int, *, n_layers: int = 2, d_model: int = 64, patch: int = 8,
                 image_size: int = 64, cnn_width: int = 32, cnn_depth: int = 2,
                 token_norm: str = "standardise", position: str = "sincos") -> None:
        super().__init__()
        self.depth = n_layers
        self.tokenizer = _tokenizer("local", patch, image_size, class_token=False, cnn_width=cnn_width,
                                    cnn_depth=cnn_depth, position=position)
        n_tokens = self.tokenizer.grid_size[0] * self.tokenizer.grid_size[1]
        self.embedder = token_embedder(self.tokenizer, d_model, token_norm)
        self.blocks = nn.ModuleList(TokenMixingBlock(n_tokens, d_model) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = readout(d_model, n_classes)

    def forward(self, images: Tensor) -> Tensor:  # [B, 3, H, W] -> [B, n_classes]
        x = self.embedder(self.tokenizer.batch(images))  # [B, N, d]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x).mean(dim=1))


class PixelMLP(nn.Module):
    """The lecture's other extreme: fully connected layers on the raw pixels.

    Every hidden unit sees every pixel from the first layer (global at once), and the first
    layer's connections grow with the pixel count N times its width (N² if the width
    followed N). Takes images of the training size only.
    """

    def __init__(self, n_classes: int, *, depth: int = 2, hidden: int = 256, image_size: int = 64) -> None:
        super().__init__()
        self.depth = depth
        layers: list[nn.Module] = [nn.Flatten()]
        width = 3 * image_size * image_size
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        layers.append(nn.Linear(width, n_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, images: Tensor) -> Tensor:  # [B, 3, H, W] -> [B, n_classes]
        return self.net(_normalise(images))


@dataclass(frozen=True)
class ModelSpec:
    """A parsed model name: family, depth, whether a token model learns its position table
    (``-lpos``), how many times the sweep's step budget it trains for (``budget``, 1 but for
    ``-xN`` names) and whether it trains until its validation accuracy stops improving (``-es``:
    early stopping, within :data:`CONVERGENCE_CAP` times the steps, which is then its ``budget``)."""

    name: str
    family: str
    depth: int
    budget: int = 1
    learned_positions: bool = False
    converges: bool = False

    @property
    def budget_name(self) -> str:
        """The budget as tables name it: ``3x``, or ``early stop`` for a run to convergence."""
        return "early stop" if self.converges else f"{self.budget}x"

    @property
    def budget_order(self) -> tuple[bool, int]:
        """Sorts budgets as tables show them: the fixed multiples in order, then the run to convergence."""
        return self.converges, self.budget

    @property
    def setting(self) -> str:
        """What the calibration chooses a learning rate for: the family, and ``-lpos`` when the model
        learns its positions (``transformer-local-lpos``), since the two learn at different rates."""
        return self.family + ("-lpos" if self.learned_positions else "")

    @property
    def base(self) -> str:
        """The name without its budget (``mixer-l2-x3``, ``mixer-l2-es`` -> ``mixer-l2``): the same model at
        another budget."""
        match = _SPEC.match(self.name)
        return self.name[: match.start("run")] if match.group("run") else self.name

    @property
    def base_label(self) -> str:
        """:attr:`label` without the step multiple."""
        return parse_spec(self.base).label

    @property
    def label(self) -> str:
        """Human-readable name for tables and plots."""
        layers = f"{self.depth} layer{'s' if self.depth > 1 else ''}"
        label = {
            "local": f"CNN local readout, no pooling, {self.depth} conv",
            "pool": f"CNN local readout, max-pool, {self.depth} conv",
            "global": f"CNN global head (flatten+MLP), {self.depth} conv",
            "transformer": f"Transformer, linear patches, {layers}",
            "transformer-local": f"Transformer, local CNN tokenizer, {layers}",
            "mixer": f"Token-mixing matrix, local CNN tokenizer, {layers}",
            "mlp": f"Fully connected on raw pixels, {self.depth} hidden",
        }[self.family]
        label += ", learned positions" if self.learned_positions else ""
        if self.converges:
            return label + f", early stopping (up to {self.budget}x steps)"
        return label + (f", {self.budget}x steps" if self.budget > 1 else "")

    @property
    def global_view(self) -> bool:
        """Whether every output sees every pixel (no receptive-field limit)."""
        return self.family not in ("local", "pool")

    @property
    def tokens(self) -> bool:
        """Whether the model mixes patch tokens (the Transformers and the token mixer): those take ``token_norm``."""
        return self.family in ("transformer", "transformer-local", "mixer")

    @property
    def any_size(self) -> bool:
        """Whether the model takes images of another size than it was trained on. A flattened map
        (global head, pixel MLP) or an N x N mixing matrix is sized for one image size."""
        return self.family in ("local", "pool", "transformer", "transformer-local")


# The local tokenizer of the sweep: 16 px patches (a bird in at most 2 x 2 tokens; 8 px patches learned
# both tasks more slowly) and a CNN of two conv + pool stages (16 -> 8 -> 4 px maps) of width 32, chosen on
# the validation split (0.742 on comparison, against 0.500-0.602 for three stages of width 16, which the first
# sweep ran after a mislabelled calibration run; docs/birds/calibration.md).
LOCAL_TOKENIZER: dict[str, int] = {"patch": 16, "cnn_depth": 2, "cnn_width": 32}

# family -> (depth letter, default depth); None: the depth must be given
_FAMILIES: dict[str, tuple[str, int | None]] = {
    "local": ("d", None), "pool": ("d", None), "global": ("d", 4), "mlp": ("d", 2),
    "transformer": ("l", None), "transformer-local": ("l", None), "mixer": ("l", None),
}
MAX_BUDGET = 1000  # -xK: the sweep's learning curves take 1, 3 and 10 times the steps
# -es: a run to convergence stops once its validation accuracy has not improved for a while, or at this many
# times the steps (its learning-rate schedule is that long run's), whichever comes first
CONVERGENCE_CAP = 30
# ... and it stops after this many evaluations, one per base budget, without a better validation accuracy: three
# base budgets (900 steps of 64 at the full preset) outlast the evaluations' noise on a curve still rising
PATIENCE = 3
_SPEC = re.compile(r"^(?P<family>[a-z]+(?:-local)?)(?:-(?P<letter>[dl])(?P<depth>\d+))?(?P<lpos>-lpos)?"
                   r"(?P<run>-x(?P<budget>\d+)|-es)?$")


def parse_spec(name: str) -> ModelSpec:
    """``local-d4`` / ``pool-d3`` / ``global`` / ``mlp`` / ``transformer-l2`` / ``transformer-local-l2`` /
    ``mixer-l2``, the token models optionally ``-lpos`` (a learned position table), each optionally ``-xK``
    (K times the step budget) or ``-es`` (until validation stops improving) -> ModelSpec, or ValueError."""
    match = _SPEC.match(name)
    family = match and match.group("family")
    if family not in _FAMILIES:
        raise ValueError(f"unknown model {name!r}; use local-dN, pool-dN, global, mlp, transformer-lN, "
                         "transformer-local-lN or mixer-lN (the last three optionally followed by -lpos: learned "
                         "positions), optionally followed by -xK (K times the steps) or -es (early stopping)")
    letter, default = _FAMILIES[family]
    given = match.group("depth")
    if (given is None and default is None) or (given is not None and match.group("letter") != letter):
        raise ValueError(f"model {name!r}: {family} takes a depth as -{letter}N")
    converges = match.group("run") == "-es"
    depth, budget = int(given or default), CONVERGENCE_CAP if converges else int(match.group("budget") or 1)
    if not (1 <= depth <= MAX_LAYERS and 1 <= budget <= MAX_BUDGET):  # past them: memory or time without end
        raise ValueError(f"model {name!r}: the depth must be 1..{MAX_LAYERS} and the step multiple 1..{MAX_BUDGET}")
    spec = ModelSpec(name, family, depth, budget, learned_positions=match.group("lpos") is not None,
                     converges=converges)
    if spec.learned_positions and not spec.tokens:
        raise ValueError(f"model {name!r}: only the token models (transformer, transformer-local, mixer) take -lpos")
    return spec


def build_model(name: str, n_classes: int, image_size: int = 64, *, token_norm: str = "standardise",
                **options: Any) -> nn.Module:
    """A freshly initialised model for spec ``name`` (seed torch first for reproducibility).

    ``options`` go to the model's constructor (calibration tries e.g. ``patch=16``); the sweep
    uses the defaults. ``token_norm`` applies to the token models only (:func:`token_embedder`), as
    does the name's ``-lpos`` (``position="learned"``).
    """
    spec = parse_spec(name)
    if spec.tokens:
        options = {"token_norm": token_norm, "position": "learned" if spec.learned_positions else "sincos", **options}
    if spec.family in ("local", "pool"):
        return LocalCNN(n_classes, spec.depth, pool=spec.family == "pool", image_size=image_size, **options)
    if spec.family == "global":
        return GlobalCNN(n_classes, depth=spec.depth, image_size=image_size, **options)
    if spec.family == "mlp":
        return PixelMLP(n_classes, depth=spec.depth, image_size=image_size, **options)
    if spec.family == "mixer":
        return TokenMixer(n_classes, n_layers=spec.depth, image_size=image_size, **{**LOCAL_TOKENIZER, **options})
    if spec.family == "transformer-local":
        options = {**LOCAL_TOKENIZER, **options}
        return BirdTransformer(n_classes, n_layers=spec.depth, image_size=image_size, tokenizer="local", **options)
    return BirdTransformer(n_classes, n_layers=spec.depth, image_size=image_size, **options)


def prefers_channels_last(model: nn.Module) -> bool:
    """Convolution models run several times faster on CPU in channels-last memory order."""
    return isinstance(model, (LocalCNN, GlobalCNN))
