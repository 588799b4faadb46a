"""End to end on a tiny sweep: the library call and the CLI write the report and every figure."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from tokformer.cli import main
from tokformer.tasks.birds import BirdsConfig, run_experiment
from tokformer.tasks.birds.report import FIGURES

TINY = BirdsConfig(image_size=32, n_train=64, n_test=32, second_size=48, steps=2, batch_size=16,
                   models=("local-d1", "pool-d2", "global", "transformer-l1", "transformer-local-l1", "mixer-l1",
                           "mlp", "global-x2"), seeds=(0, 1))


def test_report_has_table_and_all_figures(tmp_path: Path) -> None:
    report = run_experiment(tmp_path / "out", config=TINY, quiet=True)
    text = report.read_text()
    assert "| model | layers | receptive field (px)" in text
    for figure in FIGURES:
        assert (tmp_path / "out" / figure).stat().st_size > 1000
        assert f"]({figure})" in text
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert len(results["runs"]) == 2 * 2 * len(TINY.models)  # seeds x tasks x models
    assert {row["model"] for row in results["table"]} == set(TINY.models)
    second = {run["model"]: run["accuracy_second"] for run in results["runs"]}
    assert {name for name, acc in second.items() if acc is None} == {"global", "mixer-l1", "mlp", "global-x2"}
    assert "| cannot run (sized for one image) |" in text
    assert "attention on their own bird" in text


def test_cli_rejects_bad_seeds(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["birds", "--out", str(tmp_path), "--seeds", "a,b"])
    assert result.exit_code == 2 and "comma-separated integers" in result.output
