"""The images every birds model trains and is scored on: a never-repeating training stream, and
fixed validation and test splits, as tensors.

Every model trains on fresh images at every step (:class:`TrainStream`: no image is seen twice,
so no family wins by memorising a small training set), the same images in the same order for
every model of a (task, seed); validation and test sets are fixed, each its own random stream.
A stream is drawn once and shared (:func:`shared_stream`): the engine builds a new task object
for every run, and drawing costs about as much as training a small model.
"""

from __future__ import annotations

import functools
import os
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from tokformer.tasks.birds.data import N_CLASSES, BirdImages, Scene, generate
from tokformer.tasks.birds.models import prefers_channels_last


class DrawingSettings(Protocol):
    """What decides the images (a sweep's :class:`~tokformer.tasks.birds.experiment.BirdsConfig`
    or the task's config): their side, the comparison layout and its distractors."""

    image_size: int
    scene: Scene
    extra_birds: float


@dataclass(frozen=True)
class Drawing:
    """The :class:`DrawingSettings` as a value: the key of the shared streams and splits."""

    image_size: int
    scene: Scene
    extra_birds: float

    @classmethod
    def of(cls, settings: DrawingSettings) -> Drawing:
        return cls(settings.image_size, settings.scene, settings.extra_birds)


@dataclass
class SplitTensors:
    """A split as tensors: images ``[N, 3, H, W]`` uint8, labels ``[N]``, species present
    ``[N, N_SPECIES]`` (the auxiliary targets), plus its metadata."""

    images: Tensor
    labels: Tensor
    species: Tensor
    meta: BirdImages

    @classmethod
    def from_data(cls, data: BirdImages) -> SplitTensors:
        images = torch.from_numpy(data.images).permute(0, 3, 1, 2).contiguous()  # [N, H, W, 3] -> [N, 3, H, W]
        return cls(images, torch.from_numpy(data.labels), torch.from_numpy(data.species_present()), data)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor, Tensor]:
        """Image ``i``: ``[3, H, W]`` uint8, its label and species present (what the task's batches hold)."""
        return self.images[i], self.labels[i], self.species[i]


def make_split(settings: DrawingSettings, task: str, seed: int, split: str, n: int,
               size: int | None = None) -> SplitTensors:
    """``n`` images of the ``val`` or ``test`` split of ``task`` for ``seed`` (at side ``size``, default
    the settings'), as tensors. Each split is its own random stream: calibration uses ``val``."""
    if split == "train":
        raise ValueError("training images come from a TrainStream (fresh at every step), not a fixed split")
    return SplitTensors.from_data(generate(task, n, seed, size=size or settings.image_size, split=split,
                                           extra_birds=settings.extra_birds, scene=settings.scene))


class SpilledCache:
    """Values computed once per integer key and kept on disk, in a scratch folder of the cache's own
    (under ``$TMPDIR``, removed with it), with the last ``held`` in memory.

    For what a sweep computes once and reads again in order, model after model (training images,
    frozen-encoder tokens): memory stays at ``held`` values whatever the budget, and a value read
    back costs a few ms per 6 MB instead of computing it again. A value is written under a
    temporary name and renamed into place, so a DataLoader worker computing the same key meanwhile
    cannot leave a torn file.
    """

    def __init__(self, prefix: str, held: int = 2) -> None:
        self.held = held
        self._memory: OrderedDict[int, Any] = OrderedDict()
        self._scratch = tempfile.TemporaryDirectory(prefix=prefix)

    @property
    def folder(self) -> Path:
        return Path(self._scratch.name)

    def get(self, key: int, compute: Callable[[], Any]) -> Any:
        """The value of ``key`` (a tensor or a tuple of tensors): from memory, from disk, or ``compute()``-d."""
        if key in self._memory:
            self._memory.move_to_end(key)
            return self._memory[key]
        path = self.folder / f"{key:06d}.pt"
        if path.exists():
            value = torch.load(path, weights_only=True)
        else:
            value = compute()
            partial = path.with_suffix(f".{os.getpid()}.partial")
            torch.save(value, partial)
            os.replace(partial, path)
        self._memory[key] = value
        while len(self._memory) > self.held:
            self._memory.popitem(last=False)
        return value


class TrainStream:
    """Fresh training images: image ``i`` of the split's never-repeating stream (chunks 0, 1, 2, ...
    of :func:`generate`), and batch ``k`` of size ``B`` is images ``k * B .. (k + 1) * B``.

    Every model of a (task, seed) trains on the same images in the same order, and drawing costs
    about 1 ms an image at 64 px, as much as a small model's step: so each chunk is drawn once and
    kept on disk (:class:`SpilledCache`), and memory holds the two chunks being read (a batch
    straddles at most two), whatever the budget: kept in memory, a 10x run's 192,000 images were
    2.3 GB of one process (12 kB each). ``drawing_seconds`` adds up the time spent drawing, so a
    run's training time can leave it out.
    """

    chunk_size = 512

    def __init__(self, settings: DrawingSettings, task: str, seed: int) -> None:
        self.drawing, self.task, self.seed = Drawing.of(settings), task, seed
        self.chunks = SpilledCache(f"tokformer-birds-{task}-{seed}-")
        self.drawing_seconds = 0.0

    def _chunk(self, index: int) -> tuple[Tensor, Tensor, Tensor]:
        return self.chunks.get(index, lambda: self._draw(index))

    def _draw(self, index: int) -> tuple[Tensor, Tensor, Tensor]:
        """Chunk ``index`` from the generator: images ``[chunk_size, 3, H, W]`` uint8, labels, species."""
        start, d = time.perf_counter(), self.drawing
        data = generate(self.task, self.chunk_size, self.seed, size=d.image_size, split="train",
                        extra_birds=d.extra_birds, scene=d.scene, chunk=index)
        split = SplitTensors.from_data(data)
        self.drawing_seconds += time.perf_counter() - start
        return split.images, split.labels, split.species

    def image(self, i: int) -> tuple[Tensor, Tensor, Tensor]:
        """Image ``i`` of the stream: ``[3, H, W]`` uint8, its label and species present."""
        chunk, row = divmod(i, self.chunk_size)
        return tuple(t[row] for t in self._chunk(chunk))

    def batch(self, step: int, batch_size: int) -> tuple[Tensor, Tensor, Tensor]:
        """Images ``[B, 3, H, W]`` uint8, labels ``[B]``, species present ``[B, N_SPECIES]`` of ``step``
        in batches of ``batch_size`` (B)."""
        start, stop = step * batch_size, (step + 1) * batch_size
        parts = []
        for index in range(start // self.chunk_size, (stop - 1) // self.chunk_size + 1):
            lo = max(start - index * self.chunk_size, 0)
            hi = min(stop - index * self.chunk_size, self.chunk_size)
            parts.append([t[lo:hi] for t in self._chunk(index)])
        images, labels, species = (torch.cat(ts) if len(ts) > 1 else ts[0] for ts in zip(*parts, strict=True))
        return images, labels, species

    def inputs(self, step: int, batch_size: int, device: torch.device,
               channels_last: bool) -> tuple[Tensor, Tensor, Tensor]:
        """What a training loop feeds the model at ``step``: the batch's images as floats in [0, 1] on
        ``device``, its labels and species present."""
        images, labels, species = self.batch(step, batch_size)
        return to_float(images, device, channels_last), labels, species


@functools.lru_cache(maxsize=1)
def shared_stream(drawing: Drawing, task: str, seed: int) -> TrainStream:
    """The training stream of (``drawing``, ``task``, ``seed``), drawn once for all the runs that use it
    in a row (a sweep trains every model of a task and seed before the next); the last one is kept."""
    return TrainStream(drawing, task, seed)


@functools.lru_cache(maxsize=2)
def shared_split(drawing: Drawing, task: str, seed: int, split: str, n: int) -> SplitTensors:
    """:func:`make_split`, drawn once for the runs that use it in a row (validation during training)."""
    return make_split(drawing, task, seed, split, n)


def to_float(images: Tensor, device: torch.device, channels_last: bool) -> Tensor:
    """uint8 ``[B, 3, H, W]`` -> float in [0, 1] on ``device`` (channels-last for conv nets)."""
    x = images.to(device).float().div_(255)
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


def accuracy(model: nn.Module, split: SplitTensors, device: torch.device, batch_size: int = 250) -> float:
    """Fraction of ``split`` classified correctly."""
    cl, classes = prefers_channels_last(model), N_CLASSES[split.meta.task]  # the rest are auxiliary species logits
    return batched_accuracy(model, lambda rows: model(to_float(split.images[rows], device, cl))[:, :classes],
                            split.labels, batch_size)


@torch.no_grad()
def batched_accuracy(model: nn.Module, logits: Callable[[slice], Tensor], labels: Tensor, batch_size: int) -> float:
    """Fraction of ``labels`` that the argmax of ``logits(rows)`` gets right, ``batch_size`` rows at a time,
    with ``model`` in eval mode meanwhile (dropout off, norms on their running statistics)."""
    model.eval()
    correct = 0
    for i in range(0, len(labels), batch_size):
        rows = slice(i, i + batch_size)
        correct += int((logits(rows).argmax(dim=-1).cpu() == labels[rows]).sum())
    model.train()
    return correct / len(labels)
