"""Trivial image classifiers that a ViT must beat, scored like it (top-1 ``accuracy``, ``top5``).

- the majority class of the training split, predicted for every image (top-5: its five most
  frequent classes): what a model gets by learning the label frequencies alone;
- multinomial logistic regression on the raw pixels, shrunk to 8x8 RGB and standardised, fit on
  at most 2000 training images with 100 full-batch L-BFGS iterations (float64, from zeros:
  deterministic): what a model gets from colour and coarse layout, without any learned features.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import Dataset

from tokformer.tasks.image_data import to_rgb

SIDE = 8  # pixels per side after shrinking: 192 features
MAX_TRAIN = 2000
ITERATIONS = 100
L2 = 1e-3
LINEAR = (f"logistic regression on {SIDE}x{SIDE} RGB pixels (<= {MAX_TRAIN} training images, "
          f"{ITERATIONS} L-BFGS iterations)")
MAJORITY = "majority class of the training split"


def topk_hits(scores: Tensor, labels: Tensor, k: int) -> float:
    """Share of ``labels`` among the ``k`` highest ``scores`` of their row (``[n, C]``)."""
    top = scores.topk(min(k, scores.shape[1]), dim=1).indices  # [n, k]
    return (top == labels[:, None]).any(dim=1).double().mean().item()


def top1_top5(scores: Tensor, labels: Tensor) -> dict[str, float]:
    """The two scores every baseline reports, as the model's report names them."""
    return {"accuracy": topk_hits(scores, labels, 1), "top5": topk_hits(scores, labels, 5)}


def majority(train_labels: Sequence[int], eval_labels: Sequence[int], n_classes: int) -> dict[str, float]:
    """Top-1 and top-5 of always ranking the classes by their training frequency."""
    counts = Counter(train_labels)
    # ties go to the lower class id
    scores = torch.tensor([counts.get(c, 0) - c * 1e-9 for c in range(n_classes)], dtype=torch.float64)
    labels = torch.tensor(list(eval_labels))
    return top1_top5(scores.expand(len(labels), -1), labels)


def pixels(dataset: Dataset, indices: Sequence[int]) -> tuple[Tensor, Tensor]:
    """``[n, 3*SIDE*SIDE]`` float64 pixels in [0, 1] and ``[n]`` labels of ``dataset[indices]``."""
    images, labels = [], []
    for i in indices:
        image, label = dataset[i]
        images.append(F.interpolate(to_rgb(image)[None].double() / 255, size=(SIDE, SIDE), mode="bilinear",
                                    antialias=True, align_corners=False)[0])
        labels.append(int(label))
    return torch.stack(images).flatten(1), torch.tensor(labels)


def standardiser(x: Tensor) -> tuple[Tensor, Tensor]:
    """Per-feature mean and standard deviation of ``x`` ``[n, F]``: a constant feature gets 1e-6, not 0, so that
    dividing by it leaves zeros instead of NaNs."""
    return x.mean(0), x.std(0).clamp(min=1e-6)


def fit_softmax(x: Tensor, y: Tensor, n_classes: int) -> tuple[Tensor, Tensor]:
    """Weight ``[F, C]`` and bias ``[C]`` minimising the mean cross-entropy of ``x @ weight + bias`` plus
    ``L2 / 2 * ||weight||^2`` (float64, from zeros, ``ITERATIONS`` L-BFGS iterations with a strong-Wolfe line
    search: deterministic; within 1e-8 of SciPy's optimum on the test's small problems, not checked on pixels)."""
    weight = torch.zeros(x.shape[1], n_classes, dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(n_classes, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([weight, bias], max_iter=ITERATIONS, line_search_fn="strong_wolfe")

    def objective() -> Tensor:
        optimizer.zero_grad()
        loss = F.cross_entropy(x @ weight + bias, y) + L2 / 2 * weight.square().sum()
        loss.backward()
        return loss

    optimizer.step(objective)
    return weight.detach(), bias.detach()


def logistic_regression(train: Dataset, eval_set: Dataset, n_classes: int) -> dict[str, float]:
    """Top-1 and top-5 on ``eval_set`` of the pixel logistic regression fit on ``train`` (see the module doc)."""
    picked = torch.randperm(len(train), generator=torch.Generator().manual_seed(0))[:MAX_TRAIN].tolist()
    x, y = pixels(train, sorted(picked))
    mean, std = standardiser(x)
    weight, bias = fit_softmax((x - mean) / std, y, n_classes)
    ex, ey = pixels(eval_set, range(len(eval_set)))
    return top1_top5(((ex - mean) / std) @ weight + bias, ey)  # scores [n, C]
