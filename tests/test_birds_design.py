"""The comparison scenes' exact analysis: it describes the sampler, and the twins scene leaves
every view short of the compared pair at chance while the old pair-only scene does not."""

from __future__ import annotations

import math
from collections import defaultdict
from fractions import Fraction

import numpy as np
import pytest

from tokformer.tasks.birds.data import BOTTOM_LEFT, TOP_RIGHT, generate, recompute_labels, sample_layout
from tokformer.tasks.birds.design import EMPTY, VIEWS, bayes_accuracy, layouts

SCENES = [("pair", 0.0), ("pair", 0.5), ("twins", 0.0)]


@pytest.mark.parametrize(("scene", "extra"), SCENES)
def test_the_enumeration_is_a_distribution_with_balanced_labels(scene: str, extra: float) -> None:
    total, same = Fraction(0), Fraction(0)
    for _, label, p in layouts(scene, extra):
        total += p
        same += p * label
    assert total == 1 and same == Fraction(1, 2)


@pytest.mark.parametrize(("scene", "extra"), SCENES)
def test_the_enumeration_describes_what_the_sampler_draws(scene: str, extra: float) -> None:
    """Each view's best accuracy, estimated from 30,000 sampled layouts, matches the exact one within
    the plug-in estimate's own optimism (about sqrt(values / (2 pi n)) for a view of that many values)."""
    n = 30_000
    occupied, species, labels = sample_layout("compare", n, np.random.default_rng(0), extra, scene)
    drawn = [tuple(row) for row in np.where(occupied, species, EMPTY).tolist()]
    for name, view in VIEWS.items():
        joint: dict = defaultdict(lambda: [0, 0])
        for layout, label in zip(drawn, labels.tolist(), strict=True):
            joint[view(layout)][label] += 1
        sampled = sum(max(pair) for pair in joint.values()) / n
        values = len({view(layout) for layout, _, _ in layouts(scene, extra)})
        tolerance = 0.004 + 1.5 * math.sqrt(values / (2 * math.pi * n))
        assert sampled == pytest.approx(float(bayes_accuracy(scene, view, extra)), abs=tolerance), name


def test_in_the_twins_scene_only_the_compared_pair_answers() -> None:
    for name, view in VIEWS.items():
        expected = 1 if name.startswith("the compared pair") else Fraction(1, 2)
        assert bayes_accuracy("twins", view) == expected, name


def test_the_pair_only_scene_is_answered_by_the_species_present() -> None:
    """The confound of the experiment so far: with no distractors, one species present means "same"."""
    assert bayes_accuracy("pair", VIEWS["species present (which of the 6 appear)"], 0.0) == 1


def test_twins_images_hold_four_birds_of_three_species_with_twins_on_one_diagonal() -> None:
    data = generate("compare", 300, seed=5, scene="twins")
    assert np.array_equal(recompute_labels(data), data.labels) and data.labels.mean() == 0.5
    per_image = np.full((300, 4), -1)
    per_image[data.bird_image, data.bird_slot] = data.bird_species
    assert (per_image >= 0).all()
    assert all(len(set(row)) == 3 for row in per_image.tolist())
    same = per_image[:, TOP_RIGHT] == per_image[:, BOTTOM_LEFT]
    other_diagonal = per_image[:, 0] == per_image[:, 3]
    assert np.array_equal(same, data.labels == 1) and np.array_equal(other_diagonal, ~same)
