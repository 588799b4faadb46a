"""Analytic receptive fields agree with gradients, and the corner-coverage test is geometry."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tokformer.tasks.birds.models import LocalCNN
from tokformer.tasks.birds.receptive_field import analytic_receptive_field, covers_both, gradient_support


@pytest.mark.parametrize(("depth", "pool", "size"), [(1, False, 3), (3, False, 7), (1, True, 4), (2, True, 10),
                                                     (3, True, 22)])
def test_analytic_receptive_field_matches_gradient_support(depth: int, pool: bool, size: int) -> None:
    torch.manual_seed(0)
    model = LocalCNN(2, depth, width=8, pool=pool, image_size=32)
    rf = analytic_receptive_field(model, 32)
    assert rf.size == size
    for unit in [(0, 0), (rf.grid // 2, rf.grid // 2), (rf.grid - 1, rf.grid // 3)]:
        support = gradient_support(model, 32, unit)  # [H, W] bool
        r0, c0, r1, c1 = rf.box(*unit, 32)
        expected = torch.zeros_like(support)
        expected[r0 : r1 + 1, c0 : c1 + 1] = True
        assert torch.equal(support, expected), (unit, rf)


def test_receptive_field_arithmetic() -> None:
    assert analytic_receptive_field(LocalCNN(2, 8, pool=False, image_size=64), 64).size == 17
    pooled = [analytic_receptive_field(LocalCNN(2, d, pool=True, image_size=64), 64) for d in range(1, 7)]
    assert [rf.size for rf in pooled] == [4, 10, 22, 46, 94, 190]
    assert [rf.grid for rf in pooled] == [32, 16, 8, 4, 2, 1]


def test_covers_both() -> None:
    size = 64
    a, b = np.array([[48.0, 16.0]]), np.array([[16.0, 48.0]])  # top-right, bottom-left centres (x, y)
    small = analytic_receptive_field(LocalCNN(2, 4, pool=True, image_size=size), size)  # 46 px
    big = analytic_receptive_field(LocalCNN(2, 5, pool=True, image_size=size), size)  # 94 px
    assert not covers_both(small, size, a, b)[0]
    assert covers_both(big, size, a, b)[0]
    assert covers_both(small, size, a, a + 3)[0]  # neighbours always fit in one field
