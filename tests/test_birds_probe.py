"""The linear probes of ``benchmarks/birds_probe.py``: they read the tokens they say they read, and a
probe finds a planted signal and nothing in noise (so a probe at chance means the tokens lack it)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tokformer.tasks.birds.data import BOTTOM_LEFT, N_CLASSES, N_SPECIES, TOP_LEFT, TOP_RIGHT
from tokformer.tasks.birds.experiment import BirdsConfig
from tokformer.tasks.birds.models import build_model
from tokformer.tasks.birds.stream import make_split

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import birds_probe  # noqa: E402


@pytest.mark.parametrize("slot", [TOP_LEFT, TOP_RIGHT, BOTTOM_LEFT])
def test_a_quadrants_tokens_are_those_whose_positions_lie_in_it(slot: int) -> None:
    model = build_model(birds_probe.MODEL, 2, 64)
    batch = model.tokenizer.batch(torch.zeros(1, 3, 64, 64))
    grid = model.grid_size[0]
    rows, cols = batch.positions[0, :, 0], batch.positions[0, :, 1]  # [1 + N]: (row, col), class token first
    inside = (rows >= 0) & ((rows >= grid / 2) == bool(slot // 2)) & ((cols >= grid / 2) == bool(slot % 2))
    inside[0] = False  # the class token
    assert birds_probe.quadrant_tokens(grid, slot) == inside.nonzero().flatten().tolist()


def test_the_species_in_each_slot_give_the_comparison_label() -> None:
    split = make_split(BirdsConfig(image_size=32), "compare", 0, "val", 64)
    at = birds_probe.species_at(split)
    assert ((at >= 0) & (at < N_SPECIES)).all(), "the twins scene has a bird in every quadrant"
    assert np.array_equal(at[:, TOP_RIGHT] == at[:, BOTTOM_LEFT], split.labels.numpy().astype(bool))


def test_a_probe_finds_a_planted_class_and_nothing_in_noise() -> None:
    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 6, (1200,), generator=generator)
    noise = torch.randn(1200, 32, generator=generator)
    planted = noise.clone()
    planted[:, :6] += 5 * torch.nn.functional.one_hot(labels, 6)  # class k raises feature k: Bayes error ~0.1%
    train, test = slice(0, 800), slice(800, None)
    assert birds_probe.probe_accuracy((planted[train], labels[train]), (planted[test], labels[test])) > 0.97
    assert birds_probe.probe_accuracy((noise[train], labels[train]), (noise[test], labels[test])) < 0.3


def test_the_stages_are_the_encoders_input_and_each_blocks_output() -> None:
    model = build_model(birds_probe.MODEL, N_CLASSES["compare"] + N_SPECIES, 64)
    images = torch.randint(0, 256, (3, 3, 64, 64), dtype=torch.uint8)
    stages = birds_probe.stage_outputs(model, images)
    x = images.float() / 255
    tokens = model.embedder(model.tokenizer.batch(x))
    torch.testing.assert_close(stages["tokens"], tokens)
    after_one = model.encoder.blocks[0](tokens)
    torch.testing.assert_close(stages["block 1"], after_one)
    torch.testing.assert_close(stages["block 2"], model.encoder.blocks[1](after_one))
