"""Image patch tokenizer: an image becomes a sequence of P x P patches, each told its grid cell.

``[C, H, W]`` -> ``(H/P) * (W/P)`` tokens of ``C * P * P`` pixel values, flattened in
``(c, p1, p2)`` order: exactly the order of a ``Conv2d(C, d, kernel=P, stride=P)``
weight ``[d, C, P, P]`` flattened, so a linear projection of these features *is* timm's
``patch_embed.proj`` (see ``tokformer.interop.timm``). Positions are each patch's
``(row, col)`` in the patch grid; an optional class token is emitted as token 0.

Preprocessing (torchvision transforms v2, deterministic so inference matches training):
PIL images of any mode are converted to RGB (or L for one channel), tensors are scaled to
``[0, 1]``; optionally resized to ``image_size``; normalised with ``mean``/``std``.

Sizes that are not a multiple of the patch size follow ``size_policy``:
``pad`` (default; zero-pad right/bottom after normalisation, i.e. with the mean colour,
like timm's ``dynamic_img_pad``), ``resize`` (to the nearest multiple, at least one
patch) or ``error``. Images of different sizes may share a batch: shorter token
sequences are padded and masked.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from einops import rearrange
from PIL import Image, UnidentifiedImageError
from torch import Tensor, nn

from tokformer.batch import TokenBatch
from tokformer.errors import DataError
from tokformer.files import file_error
from tokformer.positional import SinCos2DPositions
from tokformer.tokenizers.base import Tokenizer, TokenizerError, pad_features
from tokformer.tokenizers.registry import register_tokenizer

if TYPE_CHECKING:
    from torchvision.transforms import InterpolationMode

# What PIL raises for a file it cannot identify or decode (DecompressionBombError: a header
# claiming a huge size; NotImplementedError: e.g. an unknown DDS pixel format).
DECODE_ERRORS = (
    UnidentifiedImageError,
    OSError,
    SyntaxError,
    ValueError,
    NotImplementedError,
    Image.DecompressionBombError,
)
#: PIL's modes of 16-bit grey images (a 16-bit PNG opens as I;16).
SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
SizePolicy = Literal["pad", "resize", "error"]
Position = Literal["sincos", "learned", "none"]


def _pair(value: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(value, int):
        return value, value
    h, w = value
    return int(h), int(w)


def patchify(images: Tensor, patch_size: int, n_prefix: int = 0) -> Tensor:
    """``[B, C, H, W]`` -> ``[B, n_prefix + (H/P)(W/P), C*P*P]``: patches row-major, pixels in
    conv-weight order, after ``n_prefix`` zero slots (for class tokens). One copy of the pixels.
    """
    grid = rearrange(images, "b c (h p1) (w p2) -> b h w c p1 p2", p1=patch_size, p2=patch_size)  # a view
    b, gh, gw, c, _, _ = grid.shape
    out = images.new_empty(b, n_prefix + gh * gw, c * patch_size**2)
    out[:, :n_prefix] = 0
    out[:, n_prefix:].view(grid.shape).copy_(grid)
    return out


def _stackable(samples: Sequence[Any]) -> bool:
    """Whether ``samples`` are ``[C, H, W]`` tensors of one shape and dtype, so they batch as one tensor."""
    first = samples[0]
    return isinstance(first, Tensor) and first.dim() == 3 and all(
        isinstance(s, Tensor) and s.shape == first.shape and s.dtype == first.dtype for s in samples)


@functools.lru_cache(maxsize=32)
def grid_positions(grid_h: int, grid_w: int) -> Tensor:
    """``[gh*gw, 2]`` float (row, col) of each patch, row-major like :func:`patchify`.

    Cached (every batch of one size needs the same grid): treat the result as read-only.
    """
    rows, cols = torch.meshgrid(torch.arange(grid_h), torch.arange(grid_w), indexing="ij")
    return torch.stack((rows.flatten(), cols.flatten()), dim=-1).float()


def resample_grid_table(table: Tensor, old: tuple[int, int], new: tuple[int, int], mode: str = "bicubic") -> Tensor:
    """A learned ``[1, gh*gw, d]`` position table interpolated to another grid (``[1, gh'*gw', d]``).

    Same arithmetic as timm's ``resample_abs_pos_embed`` (float32, antialiased, corners
    not aligned), so a resized model matches timm's ``dynamic_img_size`` exactly.
    """
    if old == new:
        return table
    grid = rearrange(table.float(), "1 (h w) d -> 1 d h w", h=old[0], w=old[1])
    grid = F.interpolate(grid, size=new, mode=mode, align_corners=False, antialias=mode in ("bilinear", "bicubic"))
    return rearrange(grid, "1 d h w -> 1 (h w) d").to(table.dtype)


class PatchEmbedder(nn.Module):
    """Image TokenBatch -> ``[B, N, d]``: patch projection + 2-D position, class token at 0.

    Args:
        in_features: ``C * P * P``.
        d_model: token width.
        grid_size: the training grid ``(gh, gw)``; a learned table has one entry per cell
            and is interpolated for other grids.
        class_token: token 0 of each sample is a learned class token.
        position: ``sincos`` (fixed, any grid), ``learned`` (timm's ``pos_embed``) or ``none``
            (no additive code: for encoders that rotate queries and keys by the positions, RoPE).
        no_embed_class: learned only: the class token gets no position entry (timm's
            flag of the same name); otherwise the table's first row is the class token's.
        interpolation: mode used to resample a learned table to another grid.
        dropout: dropout on the output tokens (timm's ``pos_drop``).
        proj: the patch projection, ``[..., in_features] -> [..., d_model]``; default a
            linear layer (timm's ``patch_embed.proj``). A per-patch CNN makes the local tokenizer.
        position_std: learned only: entries drawn from a normal of this std in place of timm's
            truncated normal at 0.02, for a table that must be as long as the tokens from the first
            step (a from-scratch model whose position decides the task; the birds experiment measured
            it). Drawn over timm's draw, which is kept so that seeded runs made before this option
            (which redrew the table after building it) reproduce.
    """

    def __init__(
        self,
        in_features: int,
        d_model: int,
        *,
        grid_size: tuple[int, int],
        class_token: bool = True,
        position: Position = "sincos",
        no_embed_class: bool = False,
        interpolation: str = "bicubic",
        dropout: float = 0.0,
        proj: nn.Module | None = None,
        position_std: float | None = None,
    ) -> None:
        super().__init__()
        self.grid_size = grid_size
        self.d_model = d_model
        self.drop = nn.Dropout(dropout)
        self.n_prefix = int(class_token)
        self.interpolation = interpolation
        self.proj = nn.Linear(in_features, d_model) if proj is None else proj
        self.cls_token = nn.Parameter(torch.randn(1, 1, d_model) * 1e-6) if class_token else None
        self.sincos = SinCos2DPositions(d_model) if position == "sincos" else None
        self.pos_embed: nn.Parameter | None = None
        self.cls_has_pos = class_token and position == "learned" and not no_embed_class
        if position == "learned":
            n_pos = grid_size[0] * grid_size[1] + int(self.cls_has_pos)
            self.pos_embed = nn.Parameter(nn.init.trunc_normal_(torch.empty(1, n_pos, d_model), std=0.02))
            if position_std is not None:
                nn.init.normal_(self.pos_embed, std=position_std)

    def no_weight_decay(self) -> list[str]:
        """Class token and position table: decaying them toward zero only erases information."""
        return [name for name in ("cls_token", "pos_embed") if getattr(self, name) is not None]

    def forward(self, batch: TokenBatch) -> Tensor:  # -> [B, N, d]
        # Project every token, the empty class slot too (one row of waste per sample, but the
        # input stays contiguous: no copy), then drop that slot.
        x = self.proj(batch.features)[:, self.n_prefix :]  # [B, n, d]
        positions = batch.positions[:, self.n_prefix :]  # [B, n, 2]
        if self.sincos is not None:
            x = x + self.sincos(positions).to(x.dtype)
        elif self.pos_embed is not None:
            x = x + self._learned(positions, batch.extras["grid"]).to(x.dtype)
        if self.cls_token is not None:
            cls = self.cls_token
            if self.cls_has_pos:
                cls = cls + self.pos_embed[:, :1]
            x = torch.cat((cls.expand(x.shape[0], -1, -1), x), dim=1)
        return self.drop(x)

    def grid_table(self, grid: tuple[int, int]) -> Tensor:
        """The patch part of the learned table, resampled to ``grid``: ``[gh*gw, d]``."""
        table = self.pos_embed[:, int(self.cls_has_pos) :]  # [1, gh0*gw0, d]
        return resample_grid_table(table, self.grid_size, grid, self.interpolation)[0]

    def _learned(self, positions: Tensor, grids: Tensor) -> Tensor:  # [B, n, 2], [B, 2] -> [B, n, d]
        rows, cols = positions[..., 0].long(), positions[..., 1].long()  # [B, n]
        if torch.compiler.is_compiling():
            return self._learned_traced(rows, cols, grids)
        distinct = grids.unique(dim=0).tolist()
        if len(distinct) == 1:  # the usual case: one image size per batch
            gh, gw = distinct[0]
            table = self.grid_table((gh, gw))  # [gh*gw, d]
            index = rows * gw + cols  # [B, n]
            if index.shape[1] == gh * gw and torch.equal(index, _arange_like(index)):
                return table.unsqueeze(0)  # every patch in grid order: add the table as is (no gather)
            return F.embedding(index, table)
        out = positions.new_zeros(*positions.shape[:2], self.d_model)
        for gh, gw in distinct:
            chosen = (grids == grids.new_tensor([gh, gw])).all(dim=-1)  # [B]
            out[chosen] = F.embedding(rows[chosen] * gw + cols[chosen], self.grid_table((gh, gw))).to(out.dtype)
        return out

    def _learned_traced(self, rows: Tensor, cols: Tensor, grids: Tensor) -> Tensor:  # [B, n] x2, [B, 2] -> [B, n, d]
        """The learned table at its training grid, for torch.compile and torch.export.

        A batch's grid is data, and data cannot size the table's interpolation inside a
        graph (nor split a batch by image size), so traced models support the training
        grid only: what the classify task feeds (it resizes every image to ``image_size``).
        Other grids fail at run time (an assertion in the graph) instead of reading the
        wrong table rows; ONNX has no assertion, so an ONNX file trusts its input. Eager
        mode handles any grids, mixed in one batch too.
        """
        trained = grids.new_tensor(self.grid_size)  # [2]
        torch._assert_async((grids == trained).all(), "a traced PatchEmbedder takes images of its training size only")
        return F.embedding(rows * self.grid_size[1] + cols, self.grid_table(self.grid_size))


def _arange_like(index: Tensor) -> Tensor:  # [B, n] -> [B, n] holding 0..n-1 in every row
    return torch.arange(index.shape[1], device=index.device).expand_as(index)


@register_tokenizer("image_patches")
class ImagePatchTokenizer(Tokenizer):
    """Images (PIL, tensors, or file paths) -> patch tokens with ``(row, col)`` positions.

    Args:
        patch_size: P, the side of a square patch.
        image_size: the training size ``H`` or ``(H, W)``; it sets the learned table's grid.
        resize: resize every image to ``image_size`` first; False keeps native sizes (a
            learned table is then interpolated per grid, like timm's ``dynamic_img_size``).
        channels: 3 (RGB) or 1 (grayscale); images are converted to this.
        class_token: emit a class token as token 0.
        position: ``sincos`` (default), ``learned`` or ``none`` (the encoder places tokens itself: RoPE).
        no_embed_class: learned positions only: no table entry for the class token.
        size_policy: what to do with sides that are not a multiple of P: ``pad``,
            ``resize`` or ``error``.
        mean / std: per-channel normalisation; None for inputs that are already normalised.
        interpolation: resampling of images and of a learned table (``bilinear``, ``bicubic``).
    """

    def __init__(
        self,
        patch_size: int = 16,
        image_size: int | Sequence[int] = 224,
        *,
        resize: bool = True,
        channels: int = 3,
        class_token: bool = True,
        position: Position = "sincos",
        no_embed_class: bool = False,
        size_policy: SizePolicy = "pad",
        mean: Sequence[float] | None = IMAGENET_MEAN,
        std: Sequence[float] | None = IMAGENET_STD,
        interpolation: str = "bicubic",
    ) -> None:
        self.patch_size = int(patch_size)
        self.image_size = _pair(image_size)
        self.resize = resize
        self.channels = channels
        self.class_token = class_token
        self.position = position
        self.no_embed_class = no_embed_class
        self.size_policy = size_policy
        self.mean = None if mean is None else tuple(float(m) for m in mean)
        self.std = None if std is None else tuple(float(s) for s in std)
        self.interpolation = interpolation
        self._check()

    def _check(self) -> None:
        problems = []
        if self.patch_size <= 0:
            problems.append(f"patch_size must be positive, got {self.patch_size}")
        if min(self.image_size) < self.patch_size:
            problems.append(f"image_size {self.image_size} is smaller than one {self.patch_size}px patch")
        elif self.patch_size > 0 and any(s % self.patch_size for s in self.image_size):
            problems.append(f"image_size {self.image_size} is not a multiple of patch_size {self.patch_size}")
        if self.channels not in (1, 3):
            problems.append(f"channels must be 1 or 3, got {self.channels}")
        if self.position not in ("sincos", "learned", "none"):
            problems.append(f"position must be 'sincos', 'learned' or 'none', got {self.position!r}")
        if self.size_policy not in ("pad", "resize", "error"):
            problems.append(f"size_policy must be 'pad', 'resize' or 'error', got {self.size_policy!r}")
        if self.interpolation not in ("bilinear", "bicubic"):
            problems.append(f"interpolation must be 'bilinear' or 'bicubic', got {self.interpolation!r}")
        if (self.mean is None) != (self.std is None):
            problems.append("give both mean and std, or neither")
        for name in ("mean", "std"):
            value = getattr(self, name)
            if value is not None and len(value) != self.channels:
                problems.append(f"{name} has {len(value)} values for {self.channels} channels")
        if self.std is not None and any(s <= 0 for s in self.std):
            problems.append(f"std must be positive, got {self.std}")
        if problems:
            raise TokenizerError("image tokenizer: " + "; ".join(problems))

    @property
    def grid_size(self) -> tuple[int, int]:
        return self.image_size[0] // self.patch_size, self.image_size[1] // self.patch_size

    @property
    def patch_features(self) -> int:
        return self.channels * self.patch_size**2

    def get_config(self) -> dict[str, Any]:
        return {
            "patch_size": self.patch_size,
            "image_size": list(self.image_size),
            "resize": self.resize,
            "channels": self.channels,
            "class_token": self.class_token,
            "position": self.position,
            "no_embed_class": self.no_embed_class,
            "size_policy": self.size_policy,
            "mean": None if self.mean is None else list(self.mean),
            "std": None if self.std is None else list(self.std),
            "interpolation": self.interpolation,
        }

    def build_embedder(self, d_model: int, *, dropout: float = 0.0,
                       position_std: float | None = None) -> PatchEmbedder:
        """The embedder of these tokens; ``position_std``: :class:`PatchEmbedder`'s."""
        return self._embedder(d_model, dropout, proj=None, position_std=position_std)

    def _embedder(self, d_model: int, dropout: float, proj: nn.Module | None,
                  position_std: float | None) -> PatchEmbedder:
        """The embedder around ``proj`` (None: linear), after checking ``d_model`` suits the positions."""
        if self.position == "sincos" and d_model % 4:
            raise TokenizerError(f"2-D sin/cos positions need d_model divisible by 4, got {d_model}")
        return PatchEmbedder(
            self.patch_features,
            d_model,
            grid_size=self.grid_size,
            class_token=self.class_token,
            position=self.position,
            no_embed_class=self.no_embed_class,
            interpolation=self.interpolation,
            dropout=dropout,
            proj=proj,
            position_std=position_std,
        )

    # -- preprocessing ---------------------------------------------------------------

    def to_tensor(self, sample: Any) -> Tensor:
        """One sample (PIL image, ``[C, H, W]``/``[H, W]`` tensor, or file path) -> float ``[C, H, W]`` in [0, 1]."""
        from torchvision.transforms.v2 import functional as TF  # torchvision: ~1 s to import, only when used
        path = sample if isinstance(sample, (str, Path)) else None
        if path is not None:
            sample = open_image(path)
        if isinstance(sample, Image.Image) and sample.mode in SIXTEEN_BIT_MODES:
            # PIL's convert to L/RGB clips 16-bit values at 255 (a full-range image turns white): scale instead
            try:
                pixels = np.asarray(sample, dtype=np.float32) / 65535.0  # [H, W] in [0, 1]
            except DECODE_ERRORS as err:
                raise DataError(f"{path or 'image'}: cannot decode a {sample.mode} image: {err}") from None
            return self._match_channels(torch.from_numpy(pixels)[None])  # [channels, H, W]
        if isinstance(sample, Image.Image):
            mode, original = ("RGB" if self.channels == 3 else "L"), sample.mode
            try:
                if sample.mode == "P":  # palette: expand through RGBA so transparency is resolved first
                    sample = sample.convert("RGBA")
                sample = sample.convert(mode)  # loads a lazily opened image: decoding errors surface here
            except DECODE_ERRORS as err:  # e.g. modes PIL cannot convert ("La", "LAB" to L)
                where = f"{path}: " if path is not None else ""
                raise DataError(f"{where}cannot convert a PIL image of mode {original!r} to {mode}: {err}") from None
            return TF.to_dtype(TF.to_image(sample), torch.float32, scale=True)
        if not isinstance(sample, Tensor):
            raise DataError(f"image tokenizer takes PIL images, tensors or paths, got {type(sample).__name__}")
        image = sample if sample.dim() == 3 else sample.unsqueeze(0) if sample.dim() == 2 else None
        if image is None:
            raise DataError(f"an image tensor must be [C, H, W] or [H, W], got shape {tuple(sample.shape)}")
        if not image.is_floating_point():
            image = TF.to_dtype(image, torch.float32, scale=True)  # uint8 0..255 -> 0..1
        return self._match_channels(image)

    def _match_channels(self, image: Tensor) -> Tensor:  # [c, H, W] -> [channels, H, W]
        from torchvision.transforms.v2 import functional as TF  # torchvision: ~1 s to import, only when used

        c = image.shape[0]
        if c == self.channels:
            return image
        if self.channels == 3 and c == 1:
            return image.expand(3, -1, -1)
        if self.channels == 3 and c == 4:
            return image[:3]  # RGBA: drop alpha, as PIL's RGBA -> RGB does
        if self.channels == 1 and c in (3, 4):
            return TF.rgb_to_grayscale(image[:3])
        raise DataError(f"cannot turn a {c}-channel image into {self.channels} channels")

    def read_at_size(self, sample: Any) -> Tensor:
        """One sample (as :meth:`to_tensor` takes it) at the model's size: float ``[C, H', W']`` in [0, 1],
        not yet normalised, which :meth:`batch` then takes as it would the sample itself (the same numbers).

        For a dataset to return: a batch of files read whole holds every image at its full size until the
        batch is resized (32 photos of 5700² pixels held 3 GB), where this holds one at a time."""
        return self._resize(self.to_tensor(sample))

    def preprocess(self, image: Tensor) -> Tensor:
        """``[..., C, H, W]`` in [0, 1] -> resized, normalised, patch-aligned ``[..., C, H', W']``."""
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms.v2 import functional as TF  # torchvision: ~1 s to import, only when used
        image = self._resize(image)
        if self.mean is not None:
            image = TF.normalize(image, list(self.mean), list(self.std))
        return self._align(image, InterpolationMode(self.interpolation))

    def _resize(self, image: Tensor) -> Tensor:
        """``[..., C, H, W]`` -> ``[..., C, *image_size]`` when the tokenizer resizes (else as it is)."""
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms.v2 import functional as TF  # torchvision: ~1 s to import, only when used
        h, w = image.shape[-2:]
        if h == 0 or w == 0:
            raise DataError(f"image of {h}x{w} pixels has no pixels")
        if self.resize and (h, w) != self.image_size:
            mode = InterpolationMode(self.interpolation)
            image = TF.resize(image, list(self.image_size), interpolation=mode, antialias=True)
        return image

    def _align(self, image: Tensor, mode: InterpolationMode) -> Tensor:
        from torchvision.transforms.v2 import functional as TF  # torchvision: ~1 s to import, only when used
        p = self.patch_size
        h, w = image.shape[-2:]
        if h % p == 0 and w % p == 0:
            return image
        if self.size_policy == "error":
            raise DataError(f"image of {h}x{w} pixels is not a multiple of patch_size {p} (size_policy='error')")
        if self.size_policy == "pad":
            return F.pad(image, (0, -w % p, 0, -h % p))  # (left, right, top, bottom)
        size = [max(p, round(h / p) * p), max(p, round(w / p) * p)]
        return TF.resize(image, size, interpolation=mode, antialias=True)

    # -- tokenizing ------------------------------------------------------------------

    def batch(self, samples: Sequence[Any] | Tensor) -> TokenBatch:
        """Images -> TokenBatch: features ``[B, N, C*P*P]``, positions ``[B, N, 2]``,
        ``extras["grid"]`` ``[B, 2]`` (each image's patch grid), class token at 0 if enabled.

        A ``[B, C, H, W]`` tensor is processed in one go (the fast path).
        """
        if isinstance(samples, Tensor) and samples.dim() == 4:
            if samples.shape[0] == 0:
                raise DataError("cannot tokenize an empty batch of images")
            images = self.preprocess(self._match_channels_batch(samples))
            return self._tokens_same_size(images)
        if isinstance(samples, Tensor) and samples.dim() == 0:
            raise DataError("a batch of images is a sequence or a [B, C, H, W] tensor, got a 0-d tensor")
        if len(samples) == 0:
            raise DataError("cannot tokenize an empty batch of images")
        if _stackable(samples):  # a dataset's [C, H, W] tensors: one preprocessing call, not one per image
            return self.batch(torch.stack(list(samples)))
        images = [self.preprocess(self.to_tensor(s)) for s in samples]
        if len({tuple(im.shape) for im in images}) == 1:
            return self._tokens_same_size(torch.stack(images))
        return self._tokens_mixed_sizes(images)

    def _match_channels_batch(self, images: Tensor) -> Tensor:
        from torchvision.transforms.v2 import functional as TF  # torchvision: ~1 s to import, only when used
        if not images.is_floating_point():
            images = TF.to_dtype(images, torch.float32, scale=True)
        if images.shape[1] == self.channels:
            return images
        return torch.stack([self._match_channels(im) for im in images])

    def _tokens_same_size(self, images: Tensor) -> TokenBatch:  # [B, C, H, W]
        b, _, h, w = images.shape
        grid = (h // self.patch_size, w // self.patch_size)
        features = patchify(images, self.patch_size, int(self.class_token))  # [B, N, C*P*P]; class slot: zeros
        positions = grid_positions(*grid).to(images.device)  # [n, 2]
        if self.class_token:
            positions = F.pad(positions, (0, 0, 1, 0))
        positions = positions.expand(b, -1, -1)  # [B, N, 2]
        mask = torch.ones(features.shape[:2], dtype=torch.bool, device=images.device)
        grids = torch.tensor([grid], device=images.device).expand(b, 2)
        return TokenBatch(mask=mask, features=features, positions=positions, extras={"grid": grids})

    def _tokens_mixed_sizes(self, images: list[Tensor]) -> TokenBatch:
        singles = [self._tokens_same_size(im.unsqueeze(0)) for im in images]
        batch = pad_features([s.features[0] for s in singles], [s.positions[0] for s in singles])
        batch.extras["grid"] = torch.cat([s.extras["grid"] for s in singles])
        return batch


def is_one_image(value: Any) -> bool:
    """An image, not a batch of them: a PIL image, or a ``[C, H, W]`` or ``[H, W]`` tensor (as
    :meth:`ImagePatchTokenizer.to_tensor` takes one). A ``[B, C, H, W]`` tensor is a batch."""
    return isinstance(value, Image.Image) or (isinstance(value, Tensor) and value.dim() in (2, 3))


#: The most pixels an image file may decode to (33.5 million: an 8K frame fits; as float RGB about
#: 400 MB): a small compressed file can claim a huge canvas, and the header says so before anything
#: is decoded. PIL's own guard only warns below 179 million pixels.
MAX_IMAGE_PIXELS = 1 << 25


@contextlib.contextmanager
def checked_image(path: str | Path) -> Iterator[Image.Image]:
    """``Image.open(path)`` behind the checks that need no pixel decoded: a regular file (opening a pipe
    blocks forever) whose header claims at most :data:`MAX_IMAGE_PIXELS`. Any failure, of the checks or
    of the caller's block (decoding, verifying), is a DataError naming the file; so is a path the file system
    refuses (a name too long, a file where a folder should be)."""
    try:
        if Path(path).exists() and not Path(path).is_file() and not Path(path).is_dir():
            raise DataError(f"{path} is not a regular file (a pipe, socket or device); give an image file")
        with warnings.catch_warnings(), Image.open(path) as image:
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the size is checked below, in one line
            width, height = image.size
            if width * height > MAX_IMAGE_PIXELS:
                raise DataError(f"image {path} is {width} x {height} pixels, more than the {MAX_IMAGE_PIXELS:,} "
                                "tokformer decodes; resize it first")
            yield image
    except (FileNotFoundError, IsADirectoryError, PermissionError) as err:
        raise file_error(path, err) from None
    except DECODE_ERRORS as err:
        with contextlib.suppress(OSError):  # not a file at all: the error itself says why
            if Path(path).stat().st_size == 0:
                raise DataError(f"image file {path} is empty") from None
        raise DataError(f"cannot read image {path}: {err}") from None


def open_image(path: str | Path) -> Image.Image:
    """Open an image file fully (so a truncated file fails here), or raise DataError naming it
    (:func:`checked_image`: its size is checked from the header before any pixel is decoded)."""
    with checked_image(path) as image:
        image.load()
        return image
