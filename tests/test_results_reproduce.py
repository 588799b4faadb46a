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


def test_the_vqa_results_and_their_docs_are_rendered_from_the_runs() -> None:
    import vqa_results

    runs = read_jsonl(vqa_results.RESULTS / "vqa.jsonl")
    assert runs, "no runs committed"
    rendered = vqa_results.render(runs)
    assert rendered == (vqa_results.RESULTS / "vqa.md").read_text(encoding="utf-8")
    docs = (BENCHMARKS.parent / "docs" / "vqa.md").read_text(encoding="utf-8")
    tables = [block for block in rendered.split("\n\n") if block.startswith("|")]
    assert len(tables) == 2 and all(table in docs for table in tables)  # results and targets, quoted whole


def test_a_vqa_cell_is_the_mean_and_sample_std_of_its_seeds() -> None:
    import vqa_results

    def run(seed: int, exact: float) -> dict:
        metrics = {"exact": exact, **{f"exact_{k}": 1.0 for k in vqa_results.TYPES},
                   "exact_seen": 1.0, "exact_held_phrasing": 1.0, "exact_held_combo": 1.0}
        baselines = {vqa_results.BLIND: {"exact": 0.3}, "most frequent answer": {"exact": 0.2}}
        return {"seed": seed, "options": {}, "steps": 10, "batch_size": 4, "train_seconds": 1.0, "peak_rss_mb": 1,
                "examples_per_s": 1.0, "tokens_per_s": 1, "metrics": metrics, "baselines": baselines,
                "attention_share_best_head": [1.0], "attention_share_mean_head": [1.0], "machine": "Machine: x; run y"}

    line = next(x for x in vqa_results.render([run(0, 0.5), run(1, 0.7), run(2, 0.9)]).splitlines()
                if x.startswith("| exact match, all held-out questions"))
    assert "0.700 ± 0.200 (0.500 / 0.700 / 0.900)" in line  # sample std (ddof 1) of 0.5, 0.7, 0.9 is 0.2


def test_the_vqa_table_names_the_image_only_seeds_and_the_steps_each_seed_trained() -> None:
    """The image-only baseline is a row only over the seeds that trained it (named), and the steps
    trained are a row of their own: a run stopped early shows, rather than the configured budget."""
    import vqa_results

    rows = [{"seed": s, "options": {}, "steps": steps, "batch_size": 4, "train_seconds": 1.0, "peak_rss_mb": 1,
             "examples_per_s": 1.0, "tokens_per_s": 1, "metrics": {"exact": 0.5, **{f"exact_{k}": 0.5 for k in
             (*vqa_results.TYPES, "seen", "held_phrasing", "held_combo")}},
             "baselines": {vqa_results.BLIND: {"exact": 0.3}, "most frequent answer": {"exact": 0.2}},
             "attention_share_best_head": [1.0], "attention_share_mean_head": [1.0], "machine": "Machine: x; run y"}
            for s, steps in ((0, 3000), (1, 1800))]
    lines = vqa_results.render([rows[0] | {"image_only": {"exact": 0.25}}, rows[1]]).splitlines()
    assert "| baseline: the picture alone (the same model and budget trained without the questions; seed 0) " \
           "| 0.250 |" in lines
    assert "| steps trained | 2400 ± 849 (3000 / 1800) |" in lines
    assert not any("picture alone" in x for x in vqa_results.render(rows).splitlines())
