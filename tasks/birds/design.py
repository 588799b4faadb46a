"""What a partial view of a comparison scene can know, computed exactly.

The comparison must need the two compared birds. Whether a scene layout does is a property of
its probability distribution, not of any model: for a feature of the layout (the set of species
present, one bird's species, which neighbouring quadrants hold the same species), the best any
classifier can do from that feature alone is its Bayes accuracy,
``sum over feature values f of max over labels y of P(f, y)``. This module enumerates every
layout :func:`tokformer.tasks.birds.data.sample_layout` can draw, with its exact probability, and
computes that number for each view. A view at 0.5 carries no information about the label; the
full pair relation is at 1.

``benchmarks/birds_design.py`` prints the table for the scenes the experiment can use; the tests
check the enumeration against the sampler. :func:`oracle_accuracies` is the empirical side the
birds report prints: a logistic regression on the exact feature (the species present, one bird's
species), fitted on sampled layouts, tested on the test images' layouts.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Iterator
from fractions import Fraction

import numpy as np
import torch
import torch.nn.functional as F

from tokformer.tasks.birds.data import (
    BOTTOM_LEFT,
    BOTTOM_RIGHT,
    N_SPECIES,
    TOP_LEFT,
    TOP_RIGHT,
    Scene,
    layout_rng,
    sample_layout,
)

EMPTY = -1
Layout = tuple[int, int, int, int]  # species per slot (top-left, top-right, bottom-left, bottom-right); EMPTY
NEIGHBOURS = ((TOP_LEFT, TOP_RIGHT), (TOP_LEFT, BOTTOM_LEFT), (TOP_RIGHT, BOTTOM_RIGHT), (BOTTOM_LEFT, BOTTOM_RIGHT))


def layouts(scene: Scene, extra_birds: float = 0.0,
            n_species: int = N_SPECIES) -> Iterator[tuple[Layout, int, Fraction]]:
    """Every comparison layout with its label (1 = same) and exact probability, as ``sample_layout`` draws them."""
    species = range(n_species)
    if scene == "twins":
        p = Fraction(1, 2 * n_species * (n_species - 1) * (n_species - 2))
        for twin, first, second in itertools.permutations(species, 3):
            yield _layout(first, twin, twin, second), 1, p  # the twins on the top-right/bottom-left diagonal
            yield _layout(twin, first, second, twin), 0, p  # on the other one
        return
    extra = Fraction(extra_birds).limit_denominator(1000)
    distractor = [(EMPTY, 1 - extra)] + [(s, extra / n_species) for s in species]
    for top_right, bottom_left in itertools.product(species, species):
        same = top_right == bottom_left
        pair = Fraction(1, n_species) * (Fraction(1, 2) if same else Fraction(1, 2 * (n_species - 1)))
        for (top_left, p_tl), (bottom_right, p_br) in itertools.product(distractor, distractor):
            if p_tl and p_br:
                yield _layout(top_left, top_right, bottom_left, bottom_right), int(same), pair * p_tl * p_br


def _layout(top_left: int, top_right: int, bottom_left: int, bottom_right: int) -> Layout:
    slots = [EMPTY] * 4
    slots[TOP_LEFT], slots[TOP_RIGHT], slots[BOTTOM_LEFT], slots[BOTTOM_RIGHT] = (
        top_left, top_right, bottom_left, bottom_right)
    return tuple(slots)  # type: ignore[return-value]


def presence(layout: Layout) -> Hashable:
    return frozenset(s for s in layout if s != EMPTY)


def counts(layout: Layout) -> Hashable:
    return frozenset(Counter(s for s in layout if s != EMPTY).items())


def neighbours(layout: Layout) -> Hashable:
    """What units seeing two neighbouring quadrants (half the image, never a diagonal) can compute:
    which quadrants hold a bird, and for each neighbouring pair whether its birds are one species."""
    occupied = tuple(s != EMPTY for s in layout)
    return occupied, tuple(layout[a] == layout[b] != EMPTY for a, b in NEIGHBOURS)


#: The views of a layout reported beside the models: name -> feature.
VIEWS: dict[str, Callable[[Layout], Hashable]] = {
    "species present (which of the 6 appear)": presence,
    "species counts (how many birds of each)": counts,
    "the top-right bird's species alone": lambda layout: layout[TOP_RIGHT],
    "the bottom-left bird's species alone": lambda layout: layout[BOTTOM_LEFT],
    "neighbouring quadrants compared": neighbours,
    "species counts and neighbouring quadrants compared": lambda layout: (counts(layout), neighbours(layout)),
    "the compared pair (top-right vs bottom-left)": lambda layout: layout[TOP_RIGHT] == layout[BOTTOM_LEFT],
}


def bayes_accuracy(scene: Scene, view: Callable[[Layout], Hashable], extra_birds: float = 0.0) -> Fraction:
    """The best accuracy any classifier reaches on the comparison label from ``view(layout)`` alone."""
    joint: dict[Hashable, list[Fraction]] = defaultdict(lambda: [Fraction(0), Fraction(0)])
    for layout, label, p in layouts(scene, extra_birds):
        joint[view(layout)][label] += p
    return sum((max(pair) for pair in joint.values()), Fraction(0))


# -- the oracle rows: what a model that read a view perfectly could learn from it -------------------------


def _one_hot(species: np.ndarray) -> np.ndarray:  # [n] -> [n, N_SPECIES]
    return np.eye(N_SPECIES, dtype=np.float32)[species]


def _present(occupied: np.ndarray, species: np.ndarray) -> np.ndarray:
    """Which species appear ``[n, N_SPECIES]`` 0/1, from the slots' occupancy and species ``[n, 4]``."""
    return np.stack([((species == s) & occupied).any(axis=1) for s in range(N_SPECIES)], axis=1).astype(np.float32)


def _pair_product(occupied: np.ndarray, species: np.ndarray) -> np.ndarray:
    """The compared pair's species as one of N_SPECIES² combinations ``[n, N_SPECIES²]`` (a positive
    control: equality is linear in it)."""
    return (_one_hot(species[:, TOP_RIGHT])[:, :, None] * _one_hot(species[:, BOTTOM_LEFT])[:, None, :]).reshape(
        len(species), -1)


#: Features a logistic regression reads in the report's oracle rows: name -> (occupancy, species) -> [n, F].
ORACLE_FEATURES: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "species present (6 bits)": _present,
    "the top-right bird's species (one-hot)": lambda occupied, species: _one_hot(species[:, TOP_RIGHT]),
    "the bottom-left bird's species (one-hot)": lambda occupied, species: _one_hot(species[:, BOTTOM_LEFT]),
    "the compared pair's species combination (positive control)": _pair_product,
}


def logistic_accuracy(train: tuple[np.ndarray, np.ndarray], test: tuple[np.ndarray, np.ndarray],
                      iterations: int = 100) -> float:
    """Test accuracy of an L2-regularised logistic regression fitted on ``train`` = (features ``[n, F]``,
    labels ``[n]``) with L-BFGS (deterministic: full batch, zero start)."""
    x, y = (torch.from_numpy(a) for a in train)
    weight = torch.zeros(x.shape[1] + 1, requires_grad=True)
    optimizer = torch.optim.LBFGS([weight], max_iter=iterations, line_search_fn="strong_wolfe")

    def loss() -> torch.Tensor:
        optimizer.zero_grad()
        logits = x @ weight[:-1] + weight[-1]
        value = F.binary_cross_entropy_with_logits(logits, y.float()) + 1e-4 * weight[:-1].square().sum()
        value.backward()
        return value

    optimizer.step(loss)
    x_test, y_test = (torch.from_numpy(a) for a in test)
    with torch.no_grad():
        return float(((x_test @ weight[:-1] + weight[-1] > 0).long() == y_test).float().mean())


def oracle_accuracies(scene: Scene, extra_birds: float, seed: int, n_test: int,
                      n_train: int = 20000) -> dict[str, float]:
    """Feature name -> test accuracy of a logistic regression on the exact feature of the layout.

    Trained on ``n_train`` layouts of the training stream, tested on the layouts of the ``n_test``
    comparison test images of ``seed`` (the same images the models are tested on; layouts only,
    no pixels drawn). A feature at chance (0.5) cannot answer the comparison however well a
    model extracts it.
    """
    train_layout = sample_layout("compare", n_train, layout_rng("compare", seed, "train", chunk=2**20),
                                 extra_birds, scene)
    test_layout = sample_layout("compare", n_test, layout_rng("compare", seed, "test"), extra_birds, scene)
    return {name: logistic_accuracy((feature(*train_layout[:2]), train_layout[2]),
                                    (feature(*test_layout[:2]), test_layout[2]))
            for name, feature in ORACLE_FEATURES.items()}
