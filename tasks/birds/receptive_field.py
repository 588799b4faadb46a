"""Receptive fields: analytic (from the layer list) and effective (from gradients).

The analytic receptive field of a unit in a conv stack is the box of input pixels it
can depend on at all; it follows from kernel sizes, strides and paddings alone
(Araujo et al., "Computing receptive fields of CNNs", Distill 2019). The effective
receptive field (Luo et al., NeurIPS 2016) is the gradient of one output unit with
respect to the input: where, inside that box, the unit actually looks. A local-readout
CNN can compare two birds only if some unit's box holds both.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from tokformer.tasks.birds.models import LocalCNN


@dataclass(frozen=True)
class ReceptiveField:
    """Geometry of the final feature map's units, in input pixel indices.

    Attributes:
        size: side of each unit's (square) receptive field, in pixels.
        jump: distance in pixels between neighbouring units' centres (total stride).
        start: input coordinate of unit 0's centre (may be fractional).
        grid: side of the final feature map, in units.
    """

    size: int
    jump: int
    start: float
    grid: int

    def box(self, i: int, j: int, image_size: int) -> tuple[int, int, int, int]:
        """Pixels (row0, col0, row1, col1), inclusive and clipped, that unit (i, j) depends on."""
        half = (self.size - 1) / 2
        rc, cc = self.start + i * self.jump, self.start + j * self.jump
        clip = lambda a: int(min(max(a, 0), image_size - 1))
        return clip(np.ceil(rc - half)), clip(np.ceil(cc - half)), clip(np.floor(rc + half)), clip(np.floor(cc + half))


def analytic_receptive_field(model: LocalCNN, image_size: int) -> ReceptiveField:
    """Walk the conv stack: each layer adds ``(k - 1) * dilation * jump`` pixels, then multiplies
    the jump by its stride."""
    size, jump, start, side = 1, 1, 0.0, image_size
    for layer in model.features:
        if isinstance(layer, (nn.Conv2d, nn.MaxPool2d)):
            k, s, p, d = (_int(getattr(layer, a)) for a in ("kernel_size", "stride", "padding", "dilation"))
            size += (k - 1) * d * jump
            start += ((k - 1) / 2 * d - p) * jump
            jump *= s
            side = (side + 2 * p - d * (k - 1) - 1) // s + 1
    return ReceptiveField(size=size, jump=jump, start=start, grid=side)


def _int(value: int | tuple[int, ...]) -> int:
    return value[0] if isinstance(value, tuple) else int(value)


def covers_both(rf: ReceptiveField, image_size: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """For point pairs ``a``, ``b`` ``[n, 2]`` (x, y): does some unit's receptive field hold both? ``[n]`` bool."""
    centres = rf.start + rf.jump * np.arange(rf.grid)  # [g]
    half = (rf.size - 1) / 2

    def units_seeing(coord: np.ndarray) -> np.ndarray:  # [n] -> [n, g]: unit centres within reach along one axis
        return np.abs(centres[None, :] - np.floor(coord)[:, None]) <= half

    rows = units_seeing(a[:, 1]) & units_seeing(b[:, 1])  # [n, g]
    cols = units_seeing(a[:, 0]) & units_seeing(b[:, 0])
    return rows.any(axis=1) & cols.any(axis=1)


def _unit_gradient(model: LocalCNN, images: Tensor, unit: tuple[int, int], classes: Tensor | None) -> Tensor:
    """Mean over the batch of |d score / d input| for unit ``unit`` of the score map: ``[H, W]``.

    ``classes`` ``[B]`` picks one class score per image; None sums every class's score.
    """
    was_training = model.training
    model.eval()
    x = images.detach().clone().requires_grad_(True)
    scores = model.score_map(x)[:, :, unit[0], unit[1]]  # [B, C]
    picked = scores.sum() if classes is None else scores[torch.arange(len(x)), classes].sum()
    (grad,) = torch.autograd.grad(picked, x)
    model.train(was_training)
    return grad.abs().sum(dim=1).mean(dim=0)  # [H, W]


def centre_unit(model: LocalCNN, image_size: int) -> tuple[int, int]:
    """The score map's central unit: the one best placed to see two opposite corners."""
    grid = analytic_receptive_field(model, image_size).grid
    return grid // 2, grid // 2


def effective_receptive_field(model: LocalCNN, images: Tensor, n_classes: int,
                              unit: tuple[int, int] | None = None) -> Tensor:
    """Luo et al.'s effective receptive field of the decision unit, ``[H, W]``, averaged over ``images``.

    The decision unit is one location's score for the class the whole model predicts
    (among the first ``n_classes`` outputs: the task's; any after are auxiliary);
    ``unit`` defaults to the central location.
    """
    unit = unit if unit is not None else centre_unit(model, images.shape[-1])
    with torch.no_grad():
        decision = model(images)[:, :n_classes].argmax(dim=1)  # [B]
    return _unit_gradient(model, images, unit, decision)


def gradient_support(model: LocalCNN, image_size: int, unit: tuple[int, int], n: int = 16, seed: int = 0) -> Tensor:
    """Pixels ``[H, W]`` (bool) on which ``unit``'s scores have any gradient, over ``n`` random inputs.

    With random weights and inputs every pixel inside the analytic box gets some gradient
    (ReLUs and max-pools switch differently per input), and none outside can.
    """
    generator = torch.Generator().manual_seed(seed)
    images = torch.rand(n, 3, image_size, image_size, generator=generator)
    return _unit_gradient(model, images, unit, None) > 0
