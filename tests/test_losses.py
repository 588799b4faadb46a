"""Label-smoothing cross-entropy: the formula, soft targets, and plain cross-entropy at zero smoothing."""

import math

import pytest
import torch

from tokformer.losses import label_smoothing_cross_entropy


def test_label_smoothing_matches_the_formula():
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 3.0]])
    target = torch.tensor([0, 1])
    s, c = 0.1, 3
    logp = torch.log_softmax(logits, dim=-1)
    nll = -logp[torch.arange(2), target]
    uniform = -logp.mean(dim=-1)
    expected = ((1 - s) * nll + s * uniform).mean()  # target distribution (1-s) one-hot + s/C
    torch.testing.assert_close(label_smoothing_cross_entropy(logits, target, s), expected)
    soft = torch.full((2, c), s / c) + (1 - s) * torch.nn.functional.one_hot(target, c)
    torch.testing.assert_close(label_smoothing_cross_entropy(logits, soft), expected)


def test_label_smoothing_zero_is_plain_cross_entropy():
    logits = torch.tensor([[0.0, math.log(3.0)]])
    # p(class 1) = 3/4
    assert label_smoothing_cross_entropy(logits, torch.tensor([1])).item() == pytest.approx(-math.log(0.75))
