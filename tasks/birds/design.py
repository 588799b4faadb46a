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
check the enumeration against the sampler.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Iterator
from fractions import Fraction

from tokformer.tasks.birds.data import BOTTOM_LEFT, BOTTOM_RIGHT, N_SPECIES, TOP_LEFT, TOP_RIGHT, Scene

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
