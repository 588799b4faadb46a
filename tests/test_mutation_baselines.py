"""The pixel logistic regression's parts against references (mutation testing, benchmarks/results/mutation.md):
its tests fed it separable data, on which any standardisation, L2 factor or optimiser setting scores the same."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.optimize import minimize

from tokformer.tasks import image_baselines
from tokformer.tasks.image_baselines import ITERATIONS, L2, fit_softmax, standardiser


def overlapping_classes(seed: int, n: int = 120, features: int = 6, classes: int = 4) -> tuple[torch.Tensor, ...]:
    """Gaussian classes whose means differ a little: not separable, so the optimum is finite and unique."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(classes, (n,), generator=g)
    means = torch.randn(classes, features, generator=g, dtype=torch.float64) * 0.7
    return means[y] + torch.randn(n, features, generator=g, dtype=torch.float64), y


def objective(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> float:
    return (F.cross_entropy(x @ weight + bias, y) + L2 / 2 * weight.square().sum()).item()


def scipy_optimum(x: torch.Tensor, y: torch.Tensor, classes: int) -> tuple[np.ndarray, np.ndarray]:
    """The same objective minimised by SciPy's L-BFGS-B to a tight tolerance, from NumPy's own gradient."""
    xs, onehot = x.numpy(), np.eye(classes)[y.numpy()]
    n, f = xs.shape

    def loss_and_grad(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = theta[: f * classes].reshape(f, classes), theta[f * classes :]
        logits = xs @ w + b
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        loss = -(onehot * np.log(p)).sum() / n + L2 / 2 * (w**2).sum()
        dlogits = (p - onehot) / n
        return loss, np.concatenate([(xs.T @ dlogits + L2 * w).ravel(), dlogits.sum(axis=0)])

    theta = minimize(
        loss_and_grad,
        np.zeros(f * classes + classes),
        jac=True,
        method="L-BFGS-B",
        options={"gtol": 1e-12, "ftol": 1e-15, "maxiter": 10_000},
    ).x
    return theta[: f * classes].reshape(f, classes), theta[f * classes :]


@pytest.mark.parametrize("seed", range(3))
def test_fit_softmax_reaches_the_optimum_scipy_finds(seed: int) -> None:
    x, y = overlapping_classes(seed)
    weight, bias = fit_softmax(x, y, 4)
    assert weight.dtype == bias.dtype == torch.float64 and weight.shape == (6, 4) and bias.shape == (4,)
    expected_weight, expected_bias = scipy_optimum(x, y, 4)
    reached, optimum = (
        objective(x, y, weight, bias),
        objective(x, y, *map(torch.tensor, (expected_weight, expected_bias))),
    )
    assert reached - optimum < 1e-8, f"{ITERATIONS} L-BFGS iterations stop {reached - optimum:.2e} above the optimum"
    # L2 = 1e-3 leaves the objective flat: 1e-8 from the optimum, weights agree to about 1e-4 (a mutant's L2
    # factor moves them by 5e-3 or more). Softmax ignores a constant added to every bias: compare them centred.
    np.testing.assert_allclose(weight.numpy(), expected_weight, atol=1e-3)
    np.testing.assert_allclose((bias - bias.mean()).numpy(), expected_bias - expected_bias.mean(), atol=1e-3)


def test_standardiser_is_the_per_feature_mean_and_std_with_constant_features_at_1e6() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.rand(50, 3, generator=g, dtype=torch.float64) * torch.tensor([0.1, 0.5, 2.0], dtype=torch.float64)
    x = torch.cat([x, torch.full((50, 1), 0.25, dtype=torch.float64)], dim=1)  # one constant pixel
    mean, std = standardiser(x)
    np.testing.assert_allclose(mean.numpy(), x.numpy().mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(std[:3].numpy(), x[:, :3].numpy().std(axis=0, ddof=1), rtol=1e-12)
    assert std[3].item() == 1e-6  # the constant pixel standardises to 0, not NaN
    assert torch.isfinite((x - mean) / std).all()


def test_the_training_subsample_is_the_same_on_every_call(monkeypatch) -> None:
    monkeypatch.setattr(image_baselines, "MAX_TRAIN", 12)
    shades = torch.linspace(0, 255, 40).round().to(torch.uint8)
    train = [(torch.full((3, 8, 8), int(v)).to(torch.uint8), int(i % 3)) for i, v in enumerate(shades)]
    first = image_baselines.logistic_regression(train, train, 3)
    assert image_baselines.logistic_regression(train, train, 3) == first


def test_top5_counts_the_five_best_classes_not_six() -> None:
    scores = torch.arange(7, dtype=torch.float64).flip(0).expand(7, -1)  # class 0 best, class 6 worst
    labels = torch.arange(7)
    assert image_baselines.top1_top5(scores, labels) == {"accuracy": 1 / 7, "top5": 5 / 7}
