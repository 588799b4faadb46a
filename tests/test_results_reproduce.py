"""A committed report is what its script renders from the committed runs: no cell edited by hand, no
mean that disagrees with the per-run rows it summarises (issue #27: mixing report vs its jsonl)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import audio_results  # noqa: E402
import birds_calibration  # noqa: E402
import birds_mixing  # noqa: E402
from harness import read_jsonl  # noqa: E402

from tokformer.tasks.birds.experiment import CALIBRATED  # noqa: E402
from tokformer.tasks.birds.models import parse_spec  # noqa: E402


def test_the_mixing_report_is_rendered_from_its_runs() -> None:
    runs = birds_mixing.latest(read_jsonl(birds_mixing.OUT.with_suffix(".jsonl")))
    assert runs, "no runs committed"
    assert birds_mixing.render(runs) == birds_mixing.OUT.with_suffix(".md").read_text(encoding="utf-8")


def test_the_audio_report_is_rendered_from_its_runs() -> None:
    rows = read_jsonl(audio_results.ROWS)
    assert {(r["part"], r["seed"]) for r in rows} == {(p, s) for p in audio_results.PARTS for s in audio_results.SEEDS}
    assert audio_results.render(rows) == (audio_results.RESULTS / "audio.md").read_text(encoding="utf-8")


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


def _mixing_row(mixer: str, seed: int, accuracy: float, steps: int, size: int = 64, **extra) -> dict:
    return {"mixer": mixer, "task": "compare", "seed": seed, "image_size": size, "tokens": (size // 16) ** 2,
            "accuracy": accuracy, "parameters": 1000, "train_seconds": float(seed + 1), "split": "test",
            "steps": steps, "lr": birds_mixing.DEFAULT_RUN[1], "machine": "m"} | extra


def test_a_learning_curve_cell_is_its_budgets_seeds_and_the_targets_read_the_largest_budget(monkeypatch) -> None:
    monkeypatch.setattr(birds_mixing, "gap_table", lambda sizes: [])
    base = birds_mixing.DEFAULT_RUN[0]
    curve = {"attention-1": ([0.5, 0.5, 0.5], [0.9, 0.95, 1.0]), "matrix-1": ([0.8, 0.8, 0.8], [0.6, 0.7, 0.8]),
             "fc": ([0.9, 0.9, 0.9], [0.5, 0.6, 0.7])}
    attention = [[[0.4, 0.1], [0.1, 0.1]]]  # [layer][head] = [mass, share]: the best head 4x, the other 1x
    rows = [_mixing_row(m, seed, acc, steps, size=96, **({"corner_attention": attention} if "attention" in m else {}))
            for m, (short, long) in curve.items() for steps, accs in ((base, short), (10 * base, long))
            for seed, acc in enumerate(accs)]
    text = birds_mixing.render(rows)
    line = next(x for x in text.split("## Learning curves")[1].splitlines() if x.startswith("| attention-1 |"))
    assert line == ("| attention-1 | 1,000 | 0.500 ± 0.000 (0.500 / 0.500 / 0.500) | "
                    "0.950 ± 0.050 (0.900 / 0.950 / 1.000) | 2 |"), line  # median seconds of 1, 2, 3
    targets = text.split("## Targets")[1]
    assert "**met** (best attention mixer attention-1 0.950, best matrix matrix-1 0.700, fc 0.600" in targets
    assert "(attention-1, 96 px, 3,000 steps): **met** (4.0x" in targets
    worse = [r | {"accuracy": 0.5} if r["mixer"] == "attention-1" else r for r in rows]
    assert "on comparison at 96 px, 3,000 steps: **missed**" in birds_mixing.render(worse)


def test_a_tie_for_the_best_mixer_names_the_first_whatever_the_hash_seed(monkeypatch) -> None:
    """The committed report must render the same in every process: a tie is not left to set order."""
    monkeypatch.setattr(birds_mixing, "gap_table", lambda sizes: [])
    rows = [_mixing_row(m, 0, acc, 300) for m, acc in
            (("attention-2", 0.5), ("attention-1", 0.5), ("matrix-2", 0.9), ("matrix-1", 0.9), ("fc", 0.8))]
    targets = birds_mixing.render(rows).split("## Targets")[1]
    assert "(best attention mixer attention-1 0.500, best matrix matrix-1 0.900, fc 0.800;" in targets


def test_attention_heads_are_ranked_within_each_seed_before_averaging(monkeypatch) -> None:
    """Head 0 of one seed is not head 0 of another: a head that attends 4x in seed 0 and one that does in
    seed 1 make a 4.0x first-ranked head, not two 2.5x heads."""
    monkeypatch.setattr(birds_mixing, "gap_table", lambda sizes: [])
    focused, other = [0.4, 0.1], [0.1, 0.1]  # [mass, share]: 4x and 1x
    rows = [_mixing_row("attention-1", 0, 0.9, 300, corner_attention=[[focused, other]]),
            _mixing_row("attention-1", 1, 0.9, 300, corner_attention=[[other, focused]])]
    line = next(x for x in birds_mixing.render(rows).split("## Where the attention")[1].splitlines()
                if x.startswith("| attention-1 |"))
    assert "| 4.0x ± 0.0x (4.0x / 4.0x) | 4.0x / 1.0x |" in line, line


def test_the_route_table_takes_each_routes_best_head_of_any_layer(monkeypatch) -> None:
    monkeypatch.setattr(birds_mixing, "gap_table", lambda sizes: [])
    uniform, focused = [0.1, 0.1], [0.3, 0.1]  # [mass, share]: 1x and 3x
    routes = {name: [[uniform, uniform], [uniform, focused if "top-left ->" in name else uniform]]
              for name in birds_mixing.DIAGONALS}  # [layer][head]: 3x in layer 2's second head on one route
    rows = [_mixing_row("attention-2", seed, 0.9, 300, split="val", diagonal_attention=routes) for seed in (0, 1)]
    line = next(x for x in birds_mixing.render(rows).split("## Which diagonal")[1].splitlines()
                if x.startswith("| attention-2 |"))
    assert line == ("| attention-2 | 64 | val | 0.004 | 300 | 1.0x ± 0.0x (1.0x / 1.0x) | 1.0x ± 0.0x (1.0x / 1.0x) | "
                    "3.0x ± 0.0x (3.0x / 3.0x) | 1.0x ± 0.0x (1.0x / 1.0x) | 0.900 ± 0.000 (0.900 / 0.900) |"), line


def test_the_label_table_gives_each_labels_routes_and_a_rerun_supersedes_the_run_it_completes(monkeypatch) -> None:
    monkeypatch.setattr(birds_mixing, "gap_table", lambda sizes: [])
    uniform, focused = [0.1, 0.1], [0.3, 0.1]  # [mass, share]: 1x and 3x

    def routes(toward: str) -> dict:
        return {name: [[focused if name.startswith(toward) else uniform]] for name in birds_mixing.DIAGONALS}

    by_label = {"same": routes("top-right ->"), "different": routes("top-left ->")}
    old = _mixing_row("attention-1", 0, 0.6, 300, diagonal_attention=routes(""))
    new = old | {"accuracy": 0.9, "diagonal_attention_by_label": by_label}
    assert not birds_mixing.complete(old) and birds_mixing.complete(new)
    assert birds_mixing.complete(_mixing_row("conv-1", 0, 0.6, 300)), "only attention runs carry the routes"
    assert birds_mixing.latest([old, new]) == [new]
    table = birds_mixing.render(birds_mixing.latest([old, new])).split("## The routes where the twins sit")[1]
    lines = [x for x in table.splitlines() if x.startswith("| attention-1 |")]
    assert lines == ["| attention-1 | 64 | test | 0.004 | 300 | same | 3.0x | 1.0x | 1.0x | 1.0x | 0.900 |",
                     "| attention-1 | 64 | test | 0.004 | 300 | different | 1.0x | 1.0x | 3.0x | 1.0x | 0.900 |"], lines


def test_the_birds_calibration_report_and_choice_are_rendered_from_its_runs() -> None:
    runs = read_jsonl(birds_calibration.OUT.with_suffix(".jsonl"))
    assert runs, "no runs committed"
    assert birds_calibration.render(runs) == birds_calibration.OUT.with_suffix(".md").read_text(encoding="utf-8")
    chosen = birds_calibration.chosen_json([r for r in runs if birds_calibration.current(r)])
    assert json.loads(birds_calibration.OUT.with_suffix(".json").read_text()) == chosen
    assert {family: (c["lr"], c["warmup"]) for family, c in chosen.items()} == CALIBRATED, "the sweep takes the choice"


def _calibration_row(model: str, seed: int, lr: float, accuracy: float, **extra) -> dict:
    return {"family": model.split("-l")[0], "model": model, "task": "compare", "seed": seed, "lr": lr, "warmup": 0.05,
            "steps": birds_calibration.BASE_STEPS, "val_accuracy": accuracy, "machine": "m"} | extra


def test_the_calibration_chooses_among_runs_made_as_the_sweep_runs_now() -> None:
    """A token model's runs with other tokens than the sweep's (rows from before the option, and those of
    the flag it was first, read by what the flag meant), and runs at other budgets, are shown but never
    chosen from; models without tokens are unaffected by the option."""
    rows = [_calibration_row("transformer-l2", s, 1e-2, 0.9) for s in (0, 1)]  # before the option: the best, but stale
    rows += [_calibration_row("transformer-l2", s, 1e-2, 0.8, token_norm=True) for s in (0, 1)]  # the flag's "affine"
    rows += [_calibration_row("transformer-l2", s, lr, acc, token_norm="standardise") for s in (0, 1)
             for lr, acc in ((1e-3, 0.6), (3e-3, 0.7))]
    rows += [_calibration_row("transformer-l2", s, 1e-3, 0.95, token_norm="standardise", steps=3000) for s in (0, 1)]
    rows += [_calibration_row("mlp", s, 1e-3, 0.8) for s in (0, 1)]
    assert birds_calibration.chosen_json([r for r in rows if birds_calibration.current(r)]) == {
        "transformer": {"lr": 3e-3, "warmup": 0.05}, "mlp": {"lr": 1e-3, "warmup": 0.05}}
    other = birds_calibration.render(rows).split("## Other budgets")[1]
    label = "| Transformer, linear patches, 2 layers |"
    assert f"{label} none | 0.01 | 0.05 | compare | 0.900 ± 0.000 (0.900 / 0.900) | — |" in other, other
    assert f"{label} affine | 0.01 | 0.05 | compare | 0.800 ± 0.000 (0.800 / 0.800) | — |" in other, other
    assert f"{label} standardise | 0.001 | 0.05 | compare | 0.600 ± 0.000 (0.600 / 0.600) | " \
           "0.950 ± 0.000 (0.950 / 0.950) |" in other, other


def test_a_family_at_chance_at_every_learning_rate_takes_the_middle_one() -> None:
    """Two seeds of 1,000 comparison images: a guesser's mean has standard error 0.011, so a best of 0.515
    is noise (the middle lr is taken, not 1e-2) and 0.53 is not (it is chosen)."""
    def rows(best: float) -> list[dict]:
        grid = ((1e-3, 0.51), (3e-3, 0.49), (1e-2, best))
        return [_calibration_row("transformer-l2", s, lr, acc, token_norm="standardise") for s in (0, 1)
                for lr, acc in grid]

    assert birds_calibration.chosen_json(rows(0.515)) == {"transformer": {"lr": 3e-3, "warmup": 0.05}}
    assert "**yes** (all at chance: the middle lr)" in birds_calibration.render(rows(0.515))
    assert birds_calibration.chosen_json(rows(0.53)) == {"transformer": {"lr": 1e-2, "warmup": 0.05}}


def test_the_vqa_results_and_their_docs_are_rendered_from_the_runs() -> None:
    """The defaults' results and targets are quoted whole in the docs."""
    import vqa_results

    runs = read_jsonl(vqa_results.RESULTS / "vqa.jsonl")
    assert runs, "no runs committed"
    rendered = vqa_results.render(runs)
    assert rendered == (vqa_results.RESULTS / "vqa.md").read_text(encoding="utf-8")
    docs = (BENCHMARKS.parent / "docs" / "vqa.md").read_text(encoding="utf-8")
    tables = [block for block in rendered.split("\n\n") if block.startswith("|")]
    assert len(tables) == 2 and all(table in docs for table in tables)


def _vqa_row(seed: int = 0, exact: float = 0.5, **changes) -> dict:
    """One seed's row of ``vqa.jsonl``, every score ``exact``, with ``changes`` on top."""
    import vqa_results

    names = (*vqa_results.TYPES, *(f"seen_{k}" for k in vqa_results.TYPES), "seen", "held_phrasing", "held_combo")
    return {"seed": seed, "options": {}, "steps": 10, "batch_size": 4, "train_seconds": 1.0, "peak_rss_mb": 1,
            "examples_per_s": 1.0, "tokens_per_s": 1,
            "metrics": {"exact": exact, **{f"exact_{name}": exact for name in names}},
            "baselines": {vqa_results.BLIND: {"exact": 0.3}, "most frequent answer": {"exact": 0.2}},
            "attention_share_best_head": [1.0], "attention_share_mean_head": [1.0], "probe_content": 1.0,
            "probe_majority": 0.5, "probe_facing": 0.6, "facing_control": 0.99, "machine": "Machine: x; run y",
            "attention_share_by_type": {k: [1.0, 1.0] for k in ("presence", "species", "same", "facing")},
            "attention_pair_weaker_bird": [1.0, 1.0],
            "paired": {"asked": 10, "as_asked": exact, "reworded": exact, "new_tokens": 0,
                       **{f"{way}_{k}": exact for way in ("as_asked", "reworded") for k in vqa_results.TYPES}}
            } | changes


def test_the_reworded_target_compares_the_same_questions_as_asked_and_reworded() -> None:
    """The paired target reads the paired scores (not the held-out phrasings' or the seen split's), and a
    gap over 0.05 misses it."""
    import vqa_results

    paired = _vqa_row()["paired"]
    target = "| the same, phrasings of trained words only (same pictures, reworded) |"
    near = vqa_results.render([_vqa_row(paired=paired | {"as_asked": 0.9, "reworded": 0.86})]).splitlines()
    assert f"{target} met | 0.860 vs 0.900 |" in near
    far = vqa_results.render([_vqa_row(paired=paired | {"as_asked": 0.9, "reworded": 0.8})]).splitlines()
    assert f"{target} **missed** | 0.800 vs 0.900 |" in far


def test_a_question_types_attention_is_its_best_layer_per_seed_and_the_facing_rows_read_their_fields() -> None:
    """Per type, each seed's share is its best layer's (best head), then averaged: a type routed in
    layer 0 by one seed and in layer 1 by another is not averaged down; the facing probe and its
    control are their own rows."""
    import vqa_results

    shares = {"presence": [1.0, 1.0], "species": [1.0, 1.0], "same": [1.0, 1.0], "facing": [1.0, 1.0]}
    rows = [_vqa_row(0, attention_share_by_type=shares | {"same": [3.0, 1.0]}, probe_facing=0.6),
            _vqa_row(1, attention_share_by_type=shares | {"same": [1.0, 5.0]}, probe_facing=0.7, facing_control=0.97)]
    lines = vqa_results.render(rows).splitlines()
    assert "| the same, same questions only (best head of the best layer) | 4.00 ± 1.41 (3.00 / 5.00) |" in lines
    assert any(x.startswith("| linear probe: the same tokens name their bird's facing") and
               x.endswith("| 0.650 ± 0.071 (0.600 / 0.700) |") for x in lines)
    assert any(x.startswith("| control: the same tokenizer, freshly initialised, trained on facing alone") and
               x.endswith("| 0.980 ± 0.014 (0.990 / 0.970) |") for x in lines)


def test_a_vqa_cell_is_the_mean_and_sample_std_of_its_seeds() -> None:
    import vqa_results

    line = next(x for x in vqa_results.render([_vqa_row(0, 0.5), _vqa_row(1, 0.7), _vqa_row(2, 0.9)]).splitlines()
                if x.startswith("| exact match, all held-out questions"))
    assert "0.700 ± 0.200 (0.500 / 0.700 / 0.900)" in line  # sample std (ddof 1) of 0.5, 0.7, 0.9 is 0.2


def test_the_vqa_table_names_the_image_only_seeds_and_the_steps_each_seed_trained() -> None:
    """The image-only baseline is a row only over the seeds that trained it (named), and the steps
    trained are a row of their own: a run stopped early shows, rather than the configured budget."""
    import vqa_results

    rows = [_vqa_row(0, steps=3000), _vqa_row(1, steps=1800)]
    lines = vqa_results.render([rows[0] | {"image_only": {"exact": 0.25}}, rows[1]]).splitlines()
    assert "| baseline: the picture alone (the same model and budget trained without the questions; seed 0) " \
           "| 0.250 |" in lines
    assert "| steps trained | 2400 ± 849 (3000 / 1800) |" in lines
    assert not any("picture alone" in x for x in vqa_results.render(rows).splitlines())


def test_the_ten_minute_target_is_judged_on_the_default_budget_only() -> None:
    """A longer budget (``--options '{"steps": 12000}'``) reports its wall time but is not marked as
    missing the target about the defaults."""
    import vqa_results

    row = _vqa_row(train_seconds=900.0)
    defaults = vqa_results.render([row])
    assert "| `tokformer train vqa` under 10 minutes on 2 cores | **missed** | 900 s (slowest seed) |" in defaults
    assert "1 seed (0)" in defaults
    longer = vqa_results.render([row | {"options": {"steps": 12000}}])
    assert "under 10 minutes" not in longer and "| train wall time (s) | 900 |" in longer


def _seeds_cell(values: list[float]) -> str:
    """A cell written out here by hand (not with the report's own helper): mean ± sample std, each seed."""
    if len(values) == 1:
        return f"{values[0]:.3f}"
    mean = sum(values) / len(values)
    std = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
    return f"{mean:.3f} ± {std:.3f} ({' / '.join(f'{v:.3f}' for v in values)})"


SWEEP_FOLDERS = sorted(str(p.parent.relative_to(ROOT)) for p in (ROOT / "docs/birds").glob("**/sweep.json"))


def test_every_committed_birds_sweep_is_checked() -> None:
    """The folders below are found, not listed: a new sweep folder is checked the day it is committed."""
    assert {"docs/birds", "docs/birds/quick", "docs/birds/budgets"} <= set(SWEEP_FOLDERS)


@pytest.mark.parametrize("folder", SWEEP_FOLDERS)
def test_the_committed_birds_report_is_the_mean_of_its_runs(folder: str) -> None:
    """Every accuracy cell of a committed birds report (results table and results.json) is the mean,
    sample std and per-seed values of that model's runs in its runs.jsonl, every seed the sweep names; a sweep
    still under way (resumed session by session) has a report of the seeds it finished that says it is partial."""
    root = ROOT / folder
    sweep = json.loads((root / "sweep.json").read_text(encoding="utf-8"))
    runs = read_jsonl(root / "runs.jsonl")
    report = (root / "report.md").read_text(encoding="utf-8")
    table = report.split("## Results")[1].split("\n\n")[1]
    results = json.loads((root / "results.json").read_text(encoding="utf-8"))
    summary = {row["model"]: row for row in results["table"]}
    seeds = sorted({run["seed"] for run in results["runs"]})
    if seeds != sorted(sweep["seeds"]):
        assert f"partial report: {len(seeds)} of {len(sweep['seeds'])} seeds" in report, f"{folder}: seeds {seeds}"
    for name in sweep["models"]:
        row = next(line for line in table.splitlines() if line.startswith(f"| {parse_spec(name).label} |"))
        cells = [cell.strip() for cell in row.split("|")]
        for task in sweep["tasks"]:
            by_seed = {r["seed"]: r["accuracy"] for r in runs
                       if r["model"] == name and r["task"] == task and r["seed"] in seeds}
            assert sorted(by_seed) == seeds, f"{folder}: {name} {task} lacks a seed's run"
            values = [by_seed[seed] for seed in sorted(by_seed)]
            assert _seeds_cell(values) in cells, f"{folder}: {name} {task}: {row}"
            assert summary[name][f"{task}_mean"] == pytest.approx(sum(values) / len(values), abs=1e-12)


def test_every_mean_and_std_docs_birds_quotes_is_in_a_results_file_it_links() -> None:
    """docs/birds.md quotes its cells by hand from the reports; each "mean ± std" must be one of theirs."""
    sources = [f"{folder}/report.md" for folder in SWEEP_FOLDERS] + [
               "docs/birds/calibration.md", "benchmarks/results/birds_calibration.md",
               "benchmarks/results/birds_mixing.md", "benchmarks/results/birds_probe.md",
               "benchmarks/results/birds_quadrant_tokens.md", "benchmarks/results/birds_positions.md"]
    text = "\n".join((ROOT / source).read_text(encoding="utf-8") for source in sources)
    quoted = set(re.findall(r"\d\.\d{3} ± \d\.\d{3}", (ROOT / "docs/birds.md").read_text(encoding="utf-8")))
    assert len(quoted) >= 10, "the guide quotes the full sweep's cells"
    missing = sorted(q for q in quoted if q not in text)
    assert not missing, f"quoted in docs/birds.md but in no results file: {missing}"


@pytest.mark.parametrize("script", ["vqa_calibration", "birds_quadrant_tokens", "birds_positions",
                                    "vqa_answer_tally"])
def test_a_probe_table_is_rendered_from_its_runs(script: str) -> None:
    """The calibration and probe tables the guides cite are what their scripts render from the committed runs."""
    module = __import__(script)
    runs = read_jsonl(module.JSONL)
    assert runs, "no runs committed"
    assert module.render(runs) == module.JSONL.with_suffix(".md").read_text(encoding="utf-8")


def test_a_vqa_calibration_cell_is_the_mean_and_sample_std_of_its_seeds() -> None:
    import vqa_calibration

    row = lambda seed, exact: {"name": "c", "options": {}, "seed": seed, "steps_trained": 1, "seconds": 10.0 * exact,
                               "machine": "m", "val": {"exact": exact, **dict.fromkeys(vqa_calibration.QUESTION_TYPES,
                                                                                      exact)}}
    line = next(x for x in vqa_calibration.render([row(0, 0.5), row(1, 0.7), row(2, 0.9)]).splitlines()
                if x.startswith("| c |"))
    assert "| 0, 1, 2 |" in line and "0.700 ± 0.200 (0.500 / 0.700 / 0.900)" in line


def test_a_vqa_calibration_candidate_run_on_two_cpu_models_is_two_rows() -> None:
    """Each CPU rounds differently and runs at its own speed: its seeds are never pooled with another's."""
    import vqa_calibration

    row = lambda seed, exact, cpu: {"name": "c", "options": {}, "seed": seed, "steps_trained": 1, "seconds": 1.0,
                                    "machine": f"Machine: {cpu}, 2 cores, 2 torch threads; load ...",
                                    "val": {"exact": exact, **dict.fromkeys(vqa_calibration.QUESTION_TYPES, exact)}}
    lines = [x for x in vqa_calibration.render([row(0, 0.5, "AMD EPYC"), row(0, 0.9, "Intel Xeon"),
                                                row(1, 0.7, "AMD EPYC")]).splitlines() if x.startswith("| c |")]
    assert len(lines) == 2
    assert lines[0].startswith("| c | AMD EPYC |") and "0.600 ± 0.141 (0.500 / 0.700)" in lines[0]
    assert lines[1].startswith("| c | Intel Xeon |") and "| 0 | 1 | 0.900 |" in lines[1]


def test_a_function_scoped_mutation_module_goes_stale_only_when_its_functions_change(tmp_path, monkeypatch) -> None:
    """A module scoped to some functions hashes their code alone: an edit elsewhere in the file makes no
    mutant of it new, so its result stays current; an edit inside one of them marks it, as any edit of code
    marks a whole-file module. Docstrings and comments are no code: mutmut makes no mutant of them."""
    import ast

    import mutation

    source = tmp_path / "pkg.py"
    write = lambda helper, step, note="": source.write_text(
        f'"""A module{note}."""\n\n\ndef helper():\n    return {helper}\n\n\nclass Task:\n    def step(self):\n'
        f'        """One step{note}."""\n        return {step}  # the step{note}\n\n    def other(self):\n'
        "        return 0\n", encoding="utf-8")
    monkeypatch.setattr(mutation, "REPO", tmp_path)
    scoped, whole = mutation.Module(("pkg.py",), (), ("xǁTaskǁst*",)), mutation.Module(("pkg.py",), ())
    write(1, 2)
    found = mutation.scoped_definitions(ast.parse(source.read_text(encoding="utf-8")), scoped.functions)
    assert [key for key, _ in found] == ["xǁTaskǁstep"]
    first = (mutation.source_hash(scoped), mutation.source_hash(whole))
    write(1, 2, note=", reworded")
    assert (mutation.source_hash(scoped), mutation.source_hash(whole)) == first, "docstrings and comments"
    write(5, 2)
    second = (mutation.source_hash(scoped), mutation.source_hash(whole))
    assert second[0] == first[0] and second[1] != first[1]
    write(5, 3)
    assert mutation.source_hash(scoped) != second[0]


def test_the_mutation_report_is_rendered_from_its_committed_summaries() -> None:
    """mutation.md is what ``mutation.py --report`` renders from benchmarks/results/mutation/, not from
    the git-ignored work folder: a fresh clone regenerates it."""
    import mutation

    assert sorted(p.stem for p in mutation.SUMMARIES.glob("*.json")) == sorted(mutation.read_summaries())
    assert mutation.report() == mutation.REPORT.read_text(encoding="utf-8")


def _mutation_run(statuses: dict[str, str], *, source: str, retested: list[str]) -> dict:
    """A module's ``result.json`` as ``run_module`` writes it: one full run, then one retest."""
    load = "0.10, 0.20, 0.30"
    return {"status": statuses, "killed_by_new_tests": retested, "source": source, "wall_s": 60,
            "retests": [{"mutants": 3, "wall_s": 30, "load_before": load, "load_after": "2.00, 1.00, 0.50",
                         "date": "2026-01-02 00:00 UTC"}],
            "load_before": load, "load_after": load, "date": "2026-01-01 00:00 UTC", "tests": ["tests/test_masks.py"],
            "earlier": [], "diffs": {k: f"@@ -1 +1 @@\n-    x = 1\n+    x = {i}\n     y = 2"
                                     for i, k in enumerate(statuses) if statuses[k] != "killed"}}


def test_a_mutation_summary_keeps_the_counts_and_the_mutated_lines_the_report_needs(monkeypatch) -> None:
    """Timeouts count as killed, equivalents (matched on their changed line) apart from real survivors,
    the first run's survivors are the retest's kills plus what is left, and a summary whose source is
    not the module's any more is marked."""
    import mutation

    key = "tokformer.masks.x_causal_mask__mutmut_{}".format
    statuses = {key(1): "killed", key(2): "killed", key(3): "timeout", key(4): "survived", key(5): "survived"}
    result = _mutation_run(statuses, source=mutation.source_hash(mutation.MODULES["masks"]), retested=[key(2)])
    summary = mutation.summarise("masks", result)
    assert (summary["mutants"], summary["killed"], summary["first_survivors"], summary["wall_s"]) == (5, 2, 4, 90)
    assert summary["killed_by_new_tests"] == {"causal_mask": 1}
    assert summary["survivors"][key(4)] == {"status": "survived", "diff": ["-    x = 1", "+    x = 3"]}
    assert summary["machine"]["dates"] == ["2026-01-01 00:00 UTC", "2026-01-02 00:00 UTC"]
    monkeypatch.setattr(mutation, "read_summaries", lambda: {"masks": summary})
    monkeypatch.setattr(mutation, "EQUIVALENT", {key(5): ("x = 4", "the same")})
    lines = mutation.report().splitlines()
    row = "| `masks` | 5 | 4 | 3 | 1 | 1 | 1 | 75.0% | 1.5 min |"
    assert row in lines and "load average 0.10, 0.20, 0.30 to 2.00, 1.00, 0.50" in "\n".join(lines)
    assert "- `causal_mask__mutmut_4` (**survived**, not classified yet)" in lines
    assert "- `causal_mask__mutmut_5` (equivalent: the same)" in lines
    stale = mutation.summarise("masks", result | {"source": "0" * 16})
    monkeypatch.setattr(mutation, "read_summaries", lambda: {"masks": stale})
    assert "| `masks` (source edited since) | 5 |" in mutation.report()
