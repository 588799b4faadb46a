"""Task ``birds``: one model of the birds experiment, trained by the engine.

``tokformer train birds --model transformer-l2 --question compare`` trains one model of the
sweep (:mod:`tokformer.tasks.birds.experiment`) with everything the engine gives every task:
checkpoints, exact resume, seeding, early stopping, metrics and progress. The sweep trains each
of its runs this way. The data are the generator's: a training stream that never repeats an
image (:class:`~tokformer.tasks.birds.stream.TrainStream`, in its own order, the same for every
model) and a fixed validation split for the evaluations during training.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import Dataset

from tokformer.engine import StepOutput, Task, help_text, register_task
from tokformer.errors import DataError
from tokformer.tasks.birds.data import N_CLASSES, N_SPECIES, SCENES, TASKS
from tokformer.tasks.birds.models import TOKEN_NORMS, build_model, parse_spec, prefers_channels_last
from tokformer.tasks.birds.stream import Drawing, TrainStream, shared_split, shared_stream, to_float
from tokformer.tokenizers.image import ImagePatchTokenizer

#: What each question's classes mean, in label order.
ANSWERS: dict[str, tuple[str, ...]] = {
    "count": ("1 bird", "2 birds", "3 birds", "4 birds"),
    "compare": ("different", "same"),
}


@dataclass
class BirdsTaskConfig:
    """One birds model on one question. Its image options are the sweep's (``BirdsConfig``)."""

    model: str = field(default="transformer-local-l2", metadata=help_text(
        "model: pool-dN, local-dN, global, mlp, transformer-lN, transformer-local-lN or mixer-lN, the last three "
        "with -lpos for a learned position table (docs/birds.md)",
        architecture=True))
    question: str = field(default="compare", metadata=help_text(
        "count (how many birds, 1-4) or compare (are the top-right and bottom-left birds the same species)",
        architecture=True))
    image_size: int = field(default=64, metadata=help_text("image side in pixels (at least 32)", architecture=True))
    token_norm: str = field(default="standardise", metadata=help_text(
        "token models: what each patch embedding gets before the position code (standardise, affine, none)",
        architecture=True))
    species_aux: float = field(default=1.0, metadata=help_text(
        "weight of the auxiliary loss that also names the species present (0: none, and no species logits)",
        architecture=True))
    scene: str = field(default="twins", metadata=help_text(
        "comparison layout: twins (only the compared pair decides) or pair (the first version's)"))
    extra_birds: float = field(default=0.0, metadata=help_text(
        "scene pair: chance of a distractor bird in each of the other two quadrants"))
    data_seed: int = field(default=0, metadata=help_text(
        "seed of the images (the training stream and the validation split); the weights follow --seed"))
    eval_size: int = field(default=1000, metadata=help_text("validation images scored at every evaluation"))
    train_images: int = field(default=1_000_000, metadata=help_text(
        "length of the training stream; images are drawn when first used, so a run draws steps x batch_size "
        "of them, each once"))

    def __post_init__(self) -> None:
        parse_spec(self.model)  # ValueError naming the accepted forms
        for name, value, allowed in (("question", self.question, TASKS), ("scene", self.scene, SCENES),
                                     ("token_norm", self.token_norm, TOKEN_NORMS)):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")
        if self.image_size < 32:
            raise ValueError(f"image_size must be at least 32, got {self.image_size}")
        if not 0.0 <= self.extra_birds <= 1.0:
            raise ValueError(f"extra_birds must be in [0, 1], got {self.extra_birds}")
        if self.species_aux < 0:
            raise ValueError(f"species_aux must be >= 0, got {self.species_aux}")
        if self.eval_size <= 0 or self.train_images <= 0:
            raise ValueError("eval_size and train_images must be positive")


class StreamImages(Dataset):
    """The first ``n`` images of a :class:`TrainStream`, as ``(image [3, H, W] uint8, label, species)``."""

    def __init__(self, stream: TrainStream, n: int) -> None:
        self.stream, self.n = stream, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor, Tensor]:
        return self.stream.image(i)


@register_task("birds")
class BirdsTask(Task):
    """One model of the birds experiment: count the birds, or compare the top-right and bottom-left ones."""

    Config = BirdsTaskConfig
    best_metric = "accuracy"
    higher_is_better = True
    train_defaults = {"steps": 300, "batch_size": 64, "lr": 3e-3, "warmup_steps": 15, "weight_decay": 0.05,
                      "eval_every": 100}

    def __init__(self, config: BirdsTaskConfig) -> None:
        super().__init__(config)
        self.channels_last = False  # set by build_model: conv nets run faster channels-last on CPU

    @property
    def user_data(self) -> bool:
        return False

    def tokenizer_dirs(self) -> tuple[str, ...]:
        return ()  # pixels in, nothing to tokenize

    @property
    def drawing(self) -> Drawing:
        return Drawing.of(self.config)

    @property
    def n_classes(self) -> int:
        return N_CLASSES[self.config.question]

    def train_stream(self) -> TrainStream:
        """The stream the training set reads: shared with every other run of the same images."""
        return shared_stream(self.drawing, self.config.question, self.config.data_seed)

    def train_dataset(self) -> StreamImages:
        return StreamImages(self.train_stream(), self.config.train_images)

    def epoch_order(self, dataset: Dataset, generator: torch.Generator, global_batch: int) -> Tensor:
        """The stream's own order: batch k is images k*B .. (k+1)*B, for every model alike."""
        return torch.arange(len(dataset))

    def eval_dataset(self) -> Dataset:
        c = self.config
        return shared_split(self.drawing, c.question, c.data_seed, "val", c.eval_size)

    def baselines(self, eval_set: Dataset) -> dict[str, dict[str, float]]:
        labels = torch.stack([eval_set[i][1] for i in range(len(eval_set))])
        majority = torch.bincount(labels, minlength=self.n_classes).max().item() / len(labels)
        return {"the most frequent answer": {"accuracy": majority}}

    def build_model(self) -> nn.Module:
        c = self.config
        model = build_model(c.model, self.n_classes + (N_SPECIES if c.species_aux > 0 else 0), c.image_size,
                            token_norm=c.token_norm)
        self.channels_last = prefers_channels_last(model)
        return model.to(memory_format=torch.channels_last) if self.channels_last else model

    def collate(self, samples: list[tuple[Tensor, Tensor, Tensor]], train: bool) -> tuple[Tensor, Tensor, Tensor]:
        images, labels, species = (torch.stack(parts) for parts in zip(*samples, strict=True))
        return images, labels, species  # [B, 3, H, W] uint8, [B], [B, N_SPECIES]

    def step(self, model: nn.Module, batch: tuple[Tensor, Tensor, Tensor]) -> StepOutput:
        """Cross-entropy on the answer, plus ``species_aux`` x the species-present loss on the logits after it."""
        images, labels, species = batch
        logits = model(to_float(images, images.device, self.channels_last)).float()  # [B, classes (+ N_SPECIES)]
        answer = logits[:, :self.n_classes]
        loss = F.cross_entropy(answer, labels)
        if self.config.species_aux > 0:
            loss = loss + self.config.species_aux * F.binary_cross_entropy_with_logits(
                logits[:, self.n_classes:], species)
        correct = answer.argmax(dim=-1) == labels
        return StepOutput(loss=loss, metrics={"accuracy": (correct.sum(), len(labels))}, count=len(labels))

    def predict(self, model: nn.Module, inputs: Sequence[Any]) -> list[str]:
        """The answer for each image (a file path, PIL image or ``[3, H, W]`` tensor), resized to the
        training side: ``"same"``/``"different"``, or ``"N birds"``."""
        reader, side = ImagePatchTokenizer(channels=3), self.config.image_size
        try:
            images = torch.stack([F.interpolate(reader.to_tensor(x)[None], size=(side, side), mode="bilinear",
                                                antialias=True, align_corners=False)[0] for x in inputs])
        except RuntimeError as error:  # e.g. an empty image
            raise DataError(f"cannot resize an input to {side} x {side}: {error}") from None
        device = next(model.parameters()).device
        x = images.to(device).clamp_(0, 1)  # [B, 3, side, side] in [0, 1]
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.no_grad():
            answers = model(x)[:, :self.n_classes].argmax(dim=-1).tolist()
        return [ANSWERS[self.config.question][a] for a in answers]
