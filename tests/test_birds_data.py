"""The bird generator: labels follow from the geometry, are balanced, and are deterministic."""

from __future__ import annotations

import numpy as np
import pytest

from tokformer.tasks.birds.data import (
    BOTTOM_LEFT,
    N_SPECIES,
    TOP_RIGHT,
    generate,
    recompute_labels,
    sample_layout,
    slot_of,
)


@pytest.mark.parametrize("task", ["count", "compare"])
def test_labels_match_metadata(task: str) -> None:
    data = generate(task, 200, seed=3)
    assert np.array_equal(recompute_labels(data), data.labels)
    assert np.array_equal(slot_of(data.bird_xy, data.size), data.bird_slot)  # every bird sits in its quadrant


def test_count_labels_are_balanced_and_cover_one_to_four_birds() -> None:
    data = generate("count", 400, seed=0)
    assert np.bincount(data.labels).tolist() == [100, 100, 100, 100]
    assert np.array_equal(np.bincount(data.bird_image, minlength=400), data.labels + 1)


def test_compare_is_balanced_and_single_birds_say_nothing() -> None:
    occupied, species, labels = sample_layout("compare", 20000, np.random.default_rng(1), extra_birds=0.5)
    assert labels.mean() == 0.5
    assert occupied[:, TOP_RIGHT].all() and occupied[:, BOTTOM_LEFT].all()
    assert abs(occupied[:, [0, 3]].mean() - 0.5) < 0.02  # distractor birds in the other two slots
    assert np.array_equal(labels, species[:, TOP_RIGHT] == species[:, BOTTOM_LEFT])
    # P(same | one bird's species) stays at 1/2 for every species: one bird alone is uninformative
    for slot in (TOP_RIGHT, BOTTOM_LEFT):
        for s in range(N_SPECIES):
            assert abs(labels[species[:, slot] == s].mean() - 0.5) < 0.03


def test_deterministic_and_test_split_differs() -> None:
    a, b = generate("compare", 50, seed=7), generate("compare", 50, seed=7)
    assert np.array_equal(a.images, b.images) and np.array_equal(a.bird_xy, b.bird_xy)
    test = generate("compare", 50, seed=7, split="test")
    assert not np.array_equal(a.images, test.images)


def test_images_vary_within_species() -> None:
    """Same species, different pose/scale/colour: no two bird crops are pixel-identical."""
    data = generate("count", 100, seed=2, size=64)
    assert data.images.dtype == np.uint8 and data.images.shape == (100, 64, 64, 3)
    assert len(np.unique(np.round(data.bird_scale, 3))) > 90
    assert set(np.unique(data.bird_facing)) == {-1.0, 1.0}
