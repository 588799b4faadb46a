"""The mixing-only track: one frozen patch encoder for everyone, and only the token mixing differs.

The lecture's question is about how tokens meet, not about who extracts features best. So every
contestant here gets the same tokens: a per-patch encoder (the local tokenizer's CNN, each token
computed from its own 16 px patch only) trained once to name the species of single-bird images,
then frozen. On top of those ``[B, N, d]`` tokens (N = 16 at 64 px, 36 at 96 px), the contestants
differ only in their mixing:

* ``conv-k``: k layers of 3x3 convolution over the token grid (a token meets the tokens within k
  steps). The grid's corners are 3 (64 px) and 5 (96 px) steps apart, but the birds fill their
  quadrants: at 64 px the compared birds' tokens touch diagonally at the centre in nearly every
  image, so one layer reaches both; :func:`bird_token_gap` measures it per image;
* ``attention-l``: l pre-norm Transformer blocks (tokformer's encoder) over the tokens plus fixed
  2-D sin/cos positions: every token can meet every other in one layer, with d²-sized weights;
* ``attention-l-lpos``: the same with a learned position table in place of the sin/cos code (N·d weights);
* ``matrix-l``: l blocks whose token mixing is one learned N x N matrix, the same for every image
  (N² weights per layer, tied to one grid);
* ``fc``: one fully connected layer over all N·d token features ((N·d)² weights).

Then the same readout for all, applied to **each token separately** and averaged (an additive
readout, as the local-readout CNNs have): the readout cannot relate two tokens, so whatever
relates the two compared birds is the mixing. ``benchmarks/birds_mixing.py`` runs the track at two
image sizes and writes the accuracy and parameter table.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from tokformer.config import TransformerConfig
from tokformer.engine import TrainConfig, build_optimizer, lr_at, seed_everything, set_lr
from tokformer.positional import SinCos2DPositions
from tokformer.tasks.birds.attention import attention_maps, box_cells, corner_attention
from tokformer.tasks.birds.data import (
    BOTTOM_LEFT,
    BOTTOM_RIGHT,
    N_CLASSES,
    N_SPECIES,
    TOP_LEFT,
    TOP_RIGHT,
    BirdImages,
    generate,
)
from tokformer.tasks.birds.experiment import BirdsConfig
from tokformer.tasks.birds.models import (
    LEARNED_POSITION_STD,
    PIXEL_MEAN,
    PIXEL_STD,
    READOUT_HIDDEN,
    TokenMixingBlock,
    prefers_channels_last,
)
from tokformer.tasks.birds.stream import SpilledCache, SplitTensors, TrainStream, batched_accuracy, to_float
from tokformer.tokenizers.image import grid_positions
from tokformer.tokenizers.image_local import LocalPatchTokenizer
from tokformer.transformer import Encoder

PATCH, WIDTH = 16, 64  # the encoder's patch side and token width
MIXERS: tuple[str, ...] = ("conv-1", "conv-2", "conv-3", "conv-4", "conv-6", "attention-1", "attention-2",
                           "attention-1-lpos", "attention-2-lpos",
                           "matrix-1", "matrix-2", "fc")


class PatchEncoder(nn.Module):
    """Images ``[B, 3, H, W]`` in [0, 1] -> tokens ``[B, N, d]``, each from its own patch only (no
    position code: the mixers that need one add it). Trained by :func:`train_encoder`, then frozen.

    Every token leaves standardised (a layer norm without parameters: zero mean, unit variance over
    its d features), so a frozen token has norm sqrt(d), the norm of the unit-amplitude sin/cos
    position code attention adds. Unnormalised, the trained encoder's tokens came out about 4x
    longer than that code (norm ~25 vs 5.7 at d = 64), nothing trainable could rescale them, and
    the attention mixers could not tell where a token was: they stayed at chance at every learning
    rate and budget tried (``benchmarks/results/birds_mixing.md`` says what changed with it).
    """

    def __init__(self, image_size: int = 64, d_model: int = WIDTH) -> None:
        super().__init__()
        self.tokenizer = LocalPatchTokenizer(patch_size=PATCH, image_size=image_size, class_token=False,
                                             position="none", resize=False, cnn_width=32, cnn_depth=2,
                                             mean=(PIXEL_MEAN,) * 3, std=(PIXEL_STD,) * 3)
        self.embedder = self.tokenizer.build_embedder(d_model)

    def forward(self, images: Tensor) -> Tensor:  # [B, 3, H, W] -> [B, N, d]
        tokens = self.embedder(self.tokenizer.batch(images))
        return F.layer_norm(tokens, tokens.shape[-1:])


def train_encoder(seed: int, steps: int = 300, batch_size: int = 64, image_size: int = 64) -> PatchEncoder:
    """The shared encoder: trained to name the species of single-bird images (mean of the tokens ->
    linear), then frozen. Single-bird images are the counting task's one-bird images."""
    seed_everything(seed)
    encoder, head = PatchEncoder(image_size), nn.Linear(WIDTH, N_SPECIES)
    cfg = TrainConfig(steps=steps, batch_size=batch_size, lr=3e-3, warmup_steps=max(1, steps // 20), seed=seed)
    params = nn.ModuleList([encoder, head])
    optimizer = build_optimizer(params, cfg)
    images, species = _single_birds(seed, steps * batch_size, image_size)
    for step in range(steps):
        set_lr(optimizer, lr_at(step, cfg))
        batch = slice(step * batch_size, (step + 1) * batch_size)
        logits = head(encoder(images[batch].float().div(255)).mean(dim=1))  # [B, N_SPECIES]
        loss = F.cross_entropy(logits, species[batch])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return encoder.eval().requires_grad_(False)


def encoder_at(encoder: PatchEncoder, image_size: int) -> PatchEncoder:
    """The same frozen weights for images of another side: a token still reads one 16 px patch, there
    are just more of them."""
    other = PatchEncoder(image_size)
    other.load_state_dict(encoder.state_dict())
    return other.eval().requires_grad_(False)


def _single_birds(seed: int, n: int, image_size: int) -> tuple[Tensor, Tensor]:
    """``n`` one-bird images ``[n, 3, H, W]`` uint8 and their species ``[n]``, from the counting
    task's training stream (a quarter of its images hold one bird)."""
    images, species, chunk = [], [], 0
    while sum(len(s) for s in species) < n:
        data = generate("count", 2048, seed, size=image_size, split="train", chunk=1000 + chunk)
        one = data.labels == 0
        images.append(torch.from_numpy(data.images[one]).permute(0, 3, 1, 2))
        species.append(torch.from_numpy(data.species_present()[one].argmax(axis=1)))
        chunk += 1
    return torch.cat(images)[:n], torch.cat(species)[:n]


class ConvMixer(nn.Module):
    """``depth`` x (3x3 conv over the token grid + ReLU), residual: a token meets its grid neighbours."""

    def __init__(self, depth: int, d_model: int, grid: tuple[int, int]) -> None:
        super().__init__()
        self.grid = grid
        self.convs = nn.ModuleList(nn.Conv2d(d_model, d_model, 3, padding=1) for _ in range(depth))

    def forward(self, tokens: Tensor) -> Tensor:  # [B, N, d] -> [B, N, d]
        x = rearrange(tokens, "b (h w) d -> b d h w", h=self.grid[0])
        for conv in self.convs:
            x = x + F.relu(conv(x))
        return rearrange(x, "b d h w -> b (h w) d")


class AttentionMixer(nn.Module):
    """tokformer's encoder over the tokens, with a position code added first (attention alone does not
    know where a token is): fixed 2-D sin/cos positions, or (``learned``, the ``-lpos`` mixers) a learned
    ``[N, d]`` table at a standardised token's scale, as the sweep's ``-lpos`` Transformers have
    (:data:`~tokformer.tasks.birds.models.LEARNED_POSITION_STD`; its N·d weights are built for one grid)."""

    def __init__(self, n_layers: int, d_model: int, grid: tuple[int, int], learned: bool = False) -> None:
        super().__init__()
        code = SinCos2DPositions(d_model)(grid_positions(*grid)[None])  # [1, N, d]
        if learned:
            self.positions = nn.Parameter(torch.randn_like(code) * LEARNED_POSITION_STD)
        else:
            self.register_buffer("positions", code, persistent=False)
        self.encoder = Encoder(TransformerConfig(d_model=d_model, n_heads=4, n_layers=n_layers, d_ff=2 * d_model,
                                                 dropout=0.0, activation="gelu"))

    def forward(self, tokens: Tensor) -> Tensor:  # [B, N, d] -> [B, N, d]
        return self.encoder(tokens + self.positions.to(tokens.dtype))


class MatrixMixer(nn.Module):
    """``n_layers`` blocks mixing tokens by one learned N x N matrix each (:class:`TokenMixingBlock`)."""

    def __init__(self, n_layers: int, d_model: int, grid: tuple[int, int]) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*(TokenMixingBlock(grid[0] * grid[1], d_model) for _ in range(n_layers)))

    def forward(self, tokens: Tensor) -> Tensor:  # [B, N, d] -> [B, N, d]
        return self.blocks(tokens)


class FullyConnectedMixer(nn.Module):
    """One fully connected layer over every token's every feature, residual: ``(N·d)²`` weights."""

    def __init__(self, d_model: int, grid: tuple[int, int]) -> None:
        super().__init__()
        self.layer = nn.Linear(grid[0] * grid[1] * d_model, grid[0] * grid[1] * d_model)

    def forward(self, tokens: Tensor) -> Tensor:  # [B, N, d] -> [B, N, d]
        return tokens + F.relu(self.layer(tokens.flatten(1))).view_as(tokens)


_MIXER = re.compile(r"^(conv|attention|matrix)-(\d+)$|^attention-(\d+)-lpos$|^fc$")


def build_mixer(name: str, d_model: int, grid: tuple[int, int]) -> nn.Module:
    """``conv-k`` / ``attention-l`` / ``attention-l-lpos`` / ``matrix-l`` / ``fc`` -> the mixing module for a
    token grid."""
    match = _MIXER.match(name)
    depth = next((int(d) for d in (match.group(2), match.group(3)) if d is not None), None) if match else None
    if match is None or (depth is not None and depth < 1):
        raise ValueError(f"unknown mixer {name!r}; use conv-K, attention-L, attention-L-lpos, matrix-L (K, L >= 1) "
                         "or fc")
    if name == "fc":
        return FullyConnectedMixer(d_model, grid)
    if match.group(3) is not None:
        return AttentionMixer(depth, d_model, grid, learned=True)
    kind = match.group(1)
    return {"conv": ConvMixer, "attention": AttentionMixer, "matrix": MatrixMixer}[kind](depth, d_model, grid)


class MixingModel(nn.Module):
    """Frozen encoder -> mixer -> the same per-token readout, averaged over tokens (additive)."""

    def __init__(self, encoder: PatchEncoder, mixer: str, n_classes: int) -> None:
        super().__init__()
        self.encoder = encoder
        grid = encoder.tokenizer.grid_size
        self.mixer = build_mixer(mixer, WIDTH, grid)
        self.norm = nn.LayerNorm(WIDTH)
        self.readout = nn.Sequential(nn.Linear(WIDTH, READOUT_HIDDEN), nn.ReLU(), nn.Linear(READOUT_HIDDEN, n_classes))

    def forward(self, images: Tensor) -> Tensor:  # [B, 3, H, W] -> [B, n_classes]
        with torch.no_grad():
            tokens = self.encoder(images)  # [B, N, d], frozen
        return self.mix(tokens)

    def mix(self, tokens: Tensor) -> Tensor:  # [B, N, d] -> [B, n_classes]
        """Everything after the frozen encoder: mixing, then per-token scores, averaged."""
        return self.readout(self.norm(self.mixer(tokens))).mean(dim=1)


class OnTokens(nn.Module):
    """A mixing model seen from its encoder's tokens: what :func:`train_mixer` trains on an
    :class:`EncodedStream` (the frozen encoder's output is computed once, for every mixer)."""

    def __init__(self, model: MixingModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, tokens: Tensor) -> Tensor:  # [B, N, d] -> [B, n_classes]
        return self.model.mix(tokens)


@torch.no_grad()
def encode(encoder: PatchEncoder, split: SplitTensors, batch_size: int = 250) -> Tensor:
    """A held-out split's tokens ``[N, n_tokens, d]`` through the frozen ``encoder``, once for every mixer."""
    return torch.cat([encoder(split.images[i : i + batch_size].float().div(255))
                      for i in range(0, len(split.labels), batch_size)])


def token_accuracy(model: MixingModel, tokens: Tensor, labels: Tensor, batch_size: int = 250) -> float:
    """Fraction of a split classified correctly from its encoded ``tokens`` (:func:`encode`): what
    :func:`tokformer.tasks.birds.experiment.accuracy` gives on its images, without re-encoding them."""
    return batched_accuracy(model, lambda rows: model.mix(tokens[rows]), labels, batch_size)


class EncodedStream:
    """A :class:`TrainStream`'s batches through the frozen ``encoder``, computed once per step: every
    mixer of a (task, seed, size) trains on the same tokens, and the encoder, which costs more than
    most mixers, runs once instead of once per mixer. The tokens (``[B, N, d]`` float per step: about
    0.6 MB at 96 px, so 1.8 GB for a 3,000-step run) wait on disk (:class:`SpilledCache`)."""

    def __init__(self, stream: TrainStream, encoder: PatchEncoder) -> None:
        self.stream, self.encoder = stream, encoder
        self._tokens = SpilledCache(f"tokformer-birds-tokens-{stream.task}-{stream.seed}-")

    @torch.no_grad()
    def inputs(self, step: int, batch_size: int, device: torch.device,
               channels_last: bool) -> tuple[Tensor, Tensor, Tensor]:
        """Tokens ``[B, N, d]``, labels ``[B]`` and species present of ``step`` (``channels_last``:
        images only, ignored)."""
        images, labels, species = self.stream.batch(step, batch_size)
        tokens = self._tokens.get(step, lambda: self.encoder.to(device)(to_float(images, device, channels_last=False)))
        return tokens, labels, species


def fit(model: nn.Module, task: str, train: TrainStream, cfg: BirdsConfig, *, steps: int, lr: float,
        warmup: float, seed: int, species_aux: float) -> float:
    """The mixing track's training loop: the engine's optimiser and schedule (AdamW with decay on
    matrices only, warmup + cosine, gradient clipping at 1) over fresh batches from ``train`` (an
    :class:`EncodedStream`, or any stream with its ``inputs``), without the engine's run folder: the
    mixers train on tokens encoded once per step for all of them, not on images. With ``species_aux``
    > 0 the logits past the task's classes also predict the species present. Returns the seconds spent
    training (computing the inputs excluded). ``tests/test_birds_task.py`` checks it against the engine."""
    device = next(model.parameters()).device
    cl = prefers_channels_last(model)
    n_classes = N_CLASSES[task]
    train_cfg = TrainConfig(steps=steps, batch_size=cfg.batch_size, lr=lr, weight_decay=cfg.weight_decay,
                            warmup_steps=max(1, round(warmup * steps)), seed=seed)
    optimizer = build_optimizer(model, train_cfg)
    trainable = [p for p in model.parameters() if p.requires_grad]
    seconds = 0.0
    for step in range(steps):
        # [B, 3, H, W] (or tokens), [B], [B, N_SPECIES]
        inputs, labels, species = train.inputs(step, cfg.batch_size, device, cl)
        start = time.perf_counter()
        set_lr(optimizer, lr_at(step, train_cfg))
        logits = model(inputs)  # [B, n_classes (+ N_SPECIES)]
        loss = F.cross_entropy(logits[:, :n_classes], labels.to(device))
        if species_aux > 0:
            aux = F.binary_cross_entropy_with_logits(logits[:, n_classes:], species.to(device))
            loss = loss + species_aux * aux
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(trainable, train_cfg.grad_clip)
        optimizer.step()
        seconds += time.perf_counter() - start
    return seconds


def mixing_parameters(model: MixingModel) -> int:
    """Trainable parameters: the mixer, its norm and the readout (the frozen encoder is everyone's)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def train_mixer(tokens: EncodedStream, mixer: str, task: str, cfg: BirdsConfig, seed: int) -> tuple[MixingModel, float]:
    """A mixer (initialised from ``seed``) on the frozen encoder of ``tokens``, trained by the sweep's loop
    on the task label alone (the tokens already know the species); returns the whole model (encoder
    included, for images) and the seconds its training took (the encoder's share excluded: it is
    everyone's, computed once)."""
    seed_everything(seed)
    model = MixingModel(tokens.encoder, mixer, N_CLASSES[task])
    return model, fit(OnTokens(model), task, tokens, cfg, steps=cfg.steps, lr=cfg.lr, warmup=cfg.warmup,
                      seed=seed, species_aux=0.0)


def corner_attention_of(model: MixingModel, test: SplitTensors, n_images: int = 200) -> list[list[list[float]]]:
    """``[layer][head] = [mass, share]`` of an attention mixer: the attention of the top-right bird's
    tokens on the bottom-left bird's tokens, and the share uniform attention would give them, averaged
    over the first ``n_images`` held-out images (:func:`tokformer.tasks.birds.attention.corner_attention`)."""
    indices = np.arange(min(n_images, len(test.labels)))
    maps = attention_maps(model, test.images[indices].float() / 255, model.mixer.encoder.blocks)
    return corner_attention(maps, test.meta, indices, PATCH, first=0).round(4).tolist()


DIAGONALS: dict[str, tuple[int, int]] = {  # directed pairs of diagonal slots: either diagonal answers "same"
    "top-right -> bottom-left": (TOP_RIGHT, BOTTOM_LEFT), "bottom-left -> top-right": (BOTTOM_LEFT, TOP_RIGHT),
    "top-left -> bottom-right": (TOP_LEFT, BOTTOM_RIGHT), "bottom-right -> top-left": (BOTTOM_RIGHT, TOP_LEFT),
}


LABELS: dict[str, int] = {"same": 1, "different": 0}  # the comparison's labels: where the twins sit


def diagonal_attention_of(model: MixingModel, test: SplitTensors, n_images: int = 200,
                          label: int | None = None) -> dict[str, list]:
    """Per directed diagonal pair (:data:`DIAGONALS`): ``[layer][head] = [mass, share]`` as
    :func:`corner_attention_of`, over the first ``n_images`` held-out images (of ``label`` only, if given).
    In the twins scene one diagonal holds the twin pair, so a model may compare either diagonal, in
    either direction: the compared pair's is one route of four. Split by label, a route a model reads
    only where the twins sit (the compared diagonal in "same" images, the other in "different" ones)
    shows, where the average over both labels would halve it."""
    rows = np.arange(len(test.labels)) if label is None else np.flatnonzero(test.labels.numpy() == label)
    indices = rows[:n_images]
    maps = attention_maps(model, test.images[indices].float() / 255, model.mixer.encoder.blocks)
    return {name: corner_attention(maps, test.meta, indices, PATCH, first=0, source=source, target=target)
            .round(4).tolist() for name, (source, target) in DIAGONALS.items()}


def bird_token_gap(meta: BirdImages, index: int, patch: int = PATCH) -> int:
    """How many token steps apart the compared birds of image ``index`` are: the smallest Chebyshev
    distance on the token grid between a token overlapping the top-right bird's box and one
    overlapping the bottom-left bird's. A conv mixer of depth k lets a token meet tokens within k
    steps, so depth ``ceil(gap / 2)`` already brings both birds into one token's reach."""
    grid = meta.size // patch
    boxes = meta.bird_boxes(index)

    def cells(slot: int) -> np.ndarray:  # [n, 2] (row, col) of the tokens a bird's box overlaps
        rows, cols = box_cells(boxes[slot], patch, grid)
        return np.stack(np.meshgrid(rows, cols, indexing="ij"), axis=-1).reshape(-1, 2)

    top_right, bottom_left = cells(TOP_RIGHT), cells(BOTTOM_LEFT)
    return int(np.abs(top_right[:, None] - bottom_left[None]).max(axis=-1).min())


@dataclass
class MixingResult:
    mixer: str
    task: str
    seed: int
    image_size: int
    tokens: int
    accuracy: float
    parameters: int
    train_seconds: float
