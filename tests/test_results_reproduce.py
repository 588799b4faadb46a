"""A committed report is what its script renders from the committed runs: no cell edited by hand, no
mean that disagrees with the per-run rows it summarises (issue #27: mixing report vs its jsonl)."""

from __future__ import annotations

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import birds_mixing  # noqa: E402
from harness import read_jsonl  # noqa: E402


def test_the_mixing_report_is_rendered_from_its_runs() -> None:
    runs = read_jsonl(birds_mixing.OUT.with_suffix(".jsonl"))
    assert runs, "no runs committed"
    assert birds_mixing.render(runs) == birds_mixing.OUT.with_suffix(".md").read_text(encoding="utf-8")


def fc_line(runs: list[dict]) -> str:
    return next(x for x in birds_mixing.render(runs).splitlines() if x.startswith("| fc |"))


def test_a_mixing_cell_is_the_mean_and_sample_std_of_its_seeds(monkeypatch) -> None:
    monkeypatch.setattr(birds_mixing, "gap_table", lambda sizes: [])  # images, not runs: not this test's subject
    rows = [
        {
            "mixer": "fc",
            "task": "compare",
            "seed": s,
            "image_size": 64,
            "tokens": 16,
            "accuracy": acc,
            "parameters": 1000,
            "train_seconds": 1.0,
            "split": "test",
            "steps": birds_mixing.DEFAULT_RUN[0],
            "lr": birds_mixing.DEFAULT_RUN[1],
            "machine": "m",
        }
        for s, acc in enumerate([0.5, 0.7, 0.9])
    ]
    line = fc_line(rows)
    assert "| 0.700 ± 0.200 (0.500 / 0.700 / 0.900) |" in line, line  # mean, ddof-1 std, each seed
    other_budget = [r | {"steps": 1, "accuracy": 0.0} for r in rows]
    other_split = [r | {"split": "val", "accuracy": 0.0} for r in rows]
    assert fc_line(rows + other_budget + other_split) == line  # the main table holds the test runs at its budget
