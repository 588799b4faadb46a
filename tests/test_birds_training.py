"""A short training run: the Transformer learns the long-range comparison above chance.

These run the first version's ``pair`` scene (the compared birds only), the one the budget and
learning rate were calibrated on: they check that training works, not the twins experiment."""

from __future__ import annotations

import pytest
import torch

from tokformer.tasks.birds.experiment import BirdsConfig, train_model
from tokformer.tasks.birds.stream import accuracy, make_split


@pytest.mark.slow
def test_transformer_beats_chance_on_comparison() -> None:
    cfg = BirdsConfig(scene="pair", n_test=1000, steps=600, lr=3e-3)
    test = make_split(cfg, "compare", 0, "test", cfg.n_test)
    model = train_model("transformer-l2", "compare", cfg, seed=0).model
    # chance is 0.5; with 1000 test images one standard error is 0.016
    assert accuracy(model, test, torch.device("cpu")) > 0.55


@pytest.mark.slow
def test_local_tokenizer_transformer_learns_the_comparison_at_the_common_budget() -> None:
    """At the common budget (300 steps, lr 4e-3) the local-tokenizer Transformer (its 2-stage,
    width-32 patch CNN) compares far-apart birds well above chance (0.742 on seed 0's validation
    split with a fixed training set, docs/birds/calibration.md)."""
    cfg = BirdsConfig(scene="pair", n_test=1000)
    test = make_split(cfg, "compare", 0, "test", cfg.n_test)
    model = train_model("transformer-local-l2", "compare", cfg, seed=0).model
    assert accuracy(model, test, torch.device("cpu")) > 0.65
