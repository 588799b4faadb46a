"""`classify` with every default on a small real image data set reaches the raw-pixel linear baseline.

The data: the UCI "Optical Recognition of Handwritten Digits" set as scikit-learn ships it
(1,797 8x8 grayscale digits, 10 classes; CC BY 4.0, Alpaydin & Kaynak 1998), stored in
``tests/data/digits.npz``. Logistic regression on raw pixels is strong here (about 0.98), which
makes it the bar a small ViT trained from scratch on 1,600 images used to miss (horizontal
flips, class-token pooling and linear patches each cost accuracy; see docs/vision.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tokformer.cli import main
from tokformer.tasks.image_data import save_class_folders

DIGITS = Path(__file__).parent / "data" / "digits.npz"


def write_digits(root: Path) -> Path:
    """The digits as a class-folder tree ``root/<digit>/<i>.png``."""
    data = np.load(DIGITS)
    return save_class_folders(data["images"], data["labels"].astype(int), root)


@pytest.mark.slow
def test_defaults_reach_the_pixel_logistic_regression_on_real_digits(tmp_path: Path) -> None:
    data = write_digits(tmp_path / "digits")
    run = tmp_path / "run"
    trained = CliRunner().invoke(main, ["train", "classify", "--data", str(data), "--run-dir", str(run), "-q"])
    assert trained.exit_code == 0, trained.output
    result = CliRunner().invoke(main, ["evaluate", str(run), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output[result.output.index("{"):])
    model = report["metrics"]["accuracy"]
    linear = next(v["accuracy"] for k, v in report["baselines"].items() if k.startswith("logistic regression"))
    assert linear > 0.9  # the bar is high on these data: a weak baseline would make the test meaningless
    assert model >= linear, f"classify defaults {model:.3f} vs pixel logistic regression {linear:.3f}"
