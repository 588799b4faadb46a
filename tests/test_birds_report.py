"""End to end on a tiny sweep: the library call and the CLI write the report and every figure."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from tokformer.cli import main
from tokformer.engine import hold_lock
from tokformer.errors import ConfigError, UsageError
from tokformer.machine import cpu_model
from tokformer.tasks.birds import BirdsConfig, experiment, figures, run_experiment
from tokformer.tasks.birds.data import N_CLASSES
from tokformer.tasks.birds.experiment import RunResult, Sweep
from tokformer.tasks.birds.figures import FIGURES, budget_style, plot_curves
from tokformer.tasks.birds.models import build_model, parse_spec
from tokformer.tasks.birds.report import budget_table, curve_table, findings, machine_note, results_table, write_report
from tokformer.tasks.birds.stream import make_split
from tokformer.tasks.birds.summary import analysed_transformer, budget_groups, mean_curve, table_rows

TINY = BirdsConfig(image_size=32, n_test=32, second_size=48, steps=2, batch_size=16,
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
    assert "transformer-local-l1 trained to count, layer 1: its patch tokens put " in text
    assert "standardise each patch embedding" in text  # the report says how the token models were built
    machines = [run["machine"] for run in results["runs"]]
    assert all(m["cpu"] == cpu_model() and m["threads"] == torch.get_num_threads() and "torch " in m["versions"]
               for m in machines), machines[0]
    assert f"Where it trained: {len(machines)} runs on {cpu_model()}, " in text
    assert all(0 <= m["stolen"] <= 1 for m in machines), "each run keeps the host's steal while it trained (Linux)"
    assert f"CPU time stolen by the host during training ({len(machines)} runs measured): median " in text


def test_a_sweep_of_the_first_versions_tokens_trains_them_and_its_report_says_so(tmp_path: Path) -> None:
    cfg = BirdsConfig(**{**TINY.__dict__, "models": ("transformer-l1",), "seeds": (0,), "second_size": 0,
                         "token_norm": "none"})
    text = run_experiment(tmp_path / "out", config=cfg, quiet=True).read_text()
    assert "as the projection scales them (the first version's tokens)" in text
    saved = (tmp_path / "out" / "models" / "transformer-l1-compare.safetensors")
    assert not any(".proj.1." in key for key in load_file(saved)), "no norm was built into the trained model"
    runs = json.loads((tmp_path / "out" / "results.json").read_text())["runs"]
    run_experiment(tmp_path / "out", config=cfg, quiet=True)  # resumed: the saved models rebuilt as they were trained
    assert json.loads((tmp_path / "out" / "results.json").read_text())["runs"] == runs


def test_cli_rejects_bad_seeds(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["birds", "--out", str(tmp_path), "--seeds", "a,b"])
    assert result.exit_code == 2 and "comma-separated integers" in result.output


def test_cli_rejects_bad_models_in_one_line(tmp_path: Path) -> None:
    for value, message in (("resnet50", "unknown model 'resnet50'"), ("pool-d3-lpos", "only the token models"),
                           (",", "comma-separated model names")):
        result = CliRunner().invoke(main, ["birds", "--out", str(tmp_path / "out"), "--models", value])
        assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output, value
        assert not (tmp_path / "out").exists()


def test_a_sweep_of_chosen_models_runs_those_and_its_report_says_how_to_rerun_it(tmp_path: Path,
                                                                                 monkeypatch) -> None:
    """``--models`` replaces the preset's models (in the order given, once each) and keeps the rest of it; the
    report's "Reproduce" line is the command that gives that sweep again."""
    seen = {}

    def sweep(cfg, **options):
        seen["config"] = cfg
        return Sweep(cfg)

    def report(swept, out, *, elapsed, command):
        seen["command"] = command
        return Path(out) / "report.md"

    monkeypatch.setattr(experiment, "run_sweep", sweep)
    monkeypatch.setattr(experiment, "write_report", report)
    result = CliRunner().invoke(main, ["birds", "--out", str(tmp_path / "out"), "--quiet", "--models",
                                       "transformer-local-l2-lpos, pool-d5,transformer-local-l2-lpos"])
    assert result.exit_code == 0, result.output
    assert seen["config"].models == ("transformer-local-l2-lpos", "pool-d5")
    assert (seen["config"].seeds, seen["config"].steps) == (BirdsConfig().seeds, BirdsConfig().steps)
    assert seen["command"] == "tokformer birds --models transformer-local-l2-lpos,pool-d5"
    run_experiment(tmp_path / "quick", quick=True, models=["mlp"], quiet=True)
    assert (seen["config"].models, seen["config"].steps) == (("mlp",), 250)
    assert seen["command"] == "tokformer birds --quick --models mlp"
    with pytest.raises(UsageError, match="unknown model 'resnet50'"):
        run_experiment(tmp_path / "other", models=["resnet50"], quiet=True)


# runs.jsonl lines (one finished run each, as `run_sweep` logs them) with known per-seed accuracies
SEED_ACCURACY = {"count": [0.5, 0.7, 0.9], "compare": [0.55, 0.6, 0.8]}
RUNS_JSONL = "".join(
    json.dumps({"model": "mlp", "task": task, "seed": seed, "accuracy": acc, "train_seconds": 2.0,
                "parameters": 123, "accuracy_second": None}) + "\n"
    for task, accs in SEED_ACCURACY.items() for seed, acc in enumerate(accs))


def _cell(text: str) -> tuple[float, float, list[float]]:
    """``"0.700 ± 0.200 (0.500 / 0.700 / 0.900)"`` -> (mean, std, per-seed values)."""
    mean, rest = text.split("±")
    std, seeds = rest.split("(")
    return float(mean), float(std), [float(a) for a in seeds.rstrip(")").split("/")]


def _table_cells(tmp_path: Path) -> dict[str, str]:
    """The "counting acc" and "comparison acc" cells of the table built from :data:`RUNS_JSONL`."""
    (tmp_path / "runs.jsonl").write_text(RUNS_JSONL)
    results = [RunResult(**json.loads(line)) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    cfg = BirdsConfig(image_size=32, n_test=8, second_size=0, models=("mlp",), seeds=(0, 1, 2))
    models = {("mlp", task): build_model("mlp", N_CLASSES[task], 32) for task in cfg.tasks}
    table = results_table(table_rows(Sweep(cfg, results, models)), second_size=0)
    header, _, row = table.splitlines()
    assert row.startswith(f"| {parse_spec('mlp').label} |"), table
    cells = dict(zip([c.strip() for c in header.split("|")], [c.strip() for c in row.split("|")], strict=True))
    return {"count": cells["counting acc"], "compare": cells["comparison acc"]}


def test_table_shows_the_mean_over_seeds_not_the_best_seed(tmp_path: Path) -> None:
    cells = _table_cells(tmp_path)
    for task, accs in SEED_ACCURACY.items():
        shown = _cell(cells[task])[0]
        mean = sum(accs) / len(accs)
        assert shown == pytest.approx(mean, abs=5e-4), (
            f"{task}: table shows {cells[task]!r}, but the seeds {accs} have mean {mean:.3f} (best {max(accs)})")


def test_table_shows_the_sample_std_over_seeds(tmp_path: Path) -> None:
    cells = _table_cells(tmp_path)
    for task, accs in SEED_ACCURACY.items():
        shown = _cell(cells[task])[1]
        mean = sum(accs) / len(accs)
        std = (sum((a - mean) ** 2 for a in accs) / (len(accs) - 1)) ** 0.5  # ddof=1
        assert shown == pytest.approx(std, abs=5e-4), (
            f"{task}: table shows {cells[task]!r}, but the seeds {accs} have sample std {std:.3f} (ddof=1)")


def test_table_shows_every_seed_in_seed_order(tmp_path: Path) -> None:
    cells = _table_cells(tmp_path)
    for task, accs in SEED_ACCURACY.items():
        assert _cell(cells[task])[2] == pytest.approx(accs, abs=5e-4), f"{task}: {cells[task]!r}"


def _run(model: str, task: str, seed: int, accuracy: float, curve: list[tuple[int, float]] = ()) -> RunResult:
    return RunResult(model, task, seed, accuracy, 1.0 + parse_spec(model).budget, 123, None, list(curve))


def test_a_mean_curve_averages_the_evaluations_every_seed_has() -> None:
    """A point some run lacks (a run resumed before 9a10e92 has one where its stop saved) is left out, not
    averaged with nothing."""
    results = [_run("mlp", "compare", 0, 0.7, [(2, 0.5), (4, 0.7)]),
               _run("mlp", "compare", 1, 0.9, [(2, 0.6), (3, 0.65), (4, 0.9)]),
               _run("mlp", "count", 0, 0.1, [(2, 0.1), (4, 0.1)])]
    assert mean_curve(results, "mlp", "compare") == [(2, pytest.approx(0.55)), (4, pytest.approx(0.8))]
    assert mean_curve(results, "global", "compare") == []


def test_a_run_to_convergence_that_stopped_sooner_holds_its_kept_accuracy_in_the_mean_curve() -> None:
    """Seed 0 stopped at step 4 and kept its step-2 model (0.6); seed 1 went on to step 8. The mean goes to
    step 8, seed 0 counting with 0.6 after it stopped, not with its last evaluation (0.5), and not cut at 4."""
    results = [_run("mlp-es", "count", 0, 0.6, [(2, 0.6), (4, 0.5)]),
               _run("mlp-es", "count", 1, 0.9, [(2, 0.4), (4, 0.7), (6, 0.8), (8, 0.9)])]
    assert mean_curve(results, "mlp-es", "count") == [(2, pytest.approx(0.5)), (4, pytest.approx(0.6)),
                                                      (6, pytest.approx(0.7)), (8, pytest.approx(0.75))]
    fixed = [dataclasses.replace(r, model="mlp-x3") for r in results]  # a fixed budget: only the shared points
    assert mean_curve(fixed, "mlp-x3", "count") == [(2, pytest.approx(0.5)), (4, pytest.approx(0.6))]


def _sweep(results: list[RunResult], models: tuple[str, ...]) -> Sweep:
    cfg = BirdsConfig(image_size=32, n_test=8, second_size=0, steps=100, models=models, seeds=(0, 1))
    built = {(m, task): build_model(m, N_CLASSES[task], 32) for m in models for task in cfg.tasks}
    return Sweep(cfg, results, built)


def test_the_attention_analysis_takes_the_transformer_that_compares_best_on_validation() -> None:
    """Item 5: the analysed model is one that learned. The choice reads the first seed's validation curve (the
    model analysed is that seed's), never the test accuracy, at any budget; the common budget breaks ties."""
    def _validated(results: list[RunResult], names: tuple[str, ...]) -> Sweep:  # 1,000 validation images
        sweep = _sweep(results, names)
        return Sweep(dataclasses.replace(sweep.config, n_test=1000), sweep.results, sweep.models)

    models = ("transformer-l2", "transformer-local-l2", "transformer-local-l1-lpos", "transformer-local-l2-x3", "mlp")
    curves = {"transformer-l2": 0.52, "transformer-local-l2": 0.50, "transformer-local-l1-lpos": 0.81,
              "transformer-local-l2-x3": 0.99, "mlp": 0.95}
    results = [_run(m, "compare", 0, 0.5, [(50, 0.5), (100, v)]) for m, v in curves.items()]
    results += [_run("transformer-local-l2", "compare", 1, 0.5, [(100, 0.99)]),  # not the analysed seed
                _run("transformer-l2", "compare", 0, 0.99, [(100, 0.52)])]  # a test accuracy: not read
    results += [_run("transformer-local-l2", "count", 0, 0.5, [(100, 0.99)])]  # another task
    assert analysed_transformer(_validated(results, models)) == "transformer-local-l2-x3", "the best, at 3x"
    assert analysed_transformer(_validated(results, models[:3])) == "transformer-local-l1-lpos"
    tied = [_run(m, "compare", 0, 0.5, [(100, 0.5)]) for m in models]
    assert analysed_transformer(_validated(tied, models)) == "transformer-local-l2", "a tie: 1x, local, deepest"
    noise = [_run(m, "compare", 0, 0.5, [(100, 0.5 + 0.01 * (m == "transformer-l2"))]) for m in models]
    assert analysed_transformer(_validated(noise, models)) == "transformer-local-l2", "within chance's noise: a tie"
    assert analysed_transformer(_validated(tied, ("mlp", "global"))) is None
    stopped = results + [_run("transformer-l2-es", "compare", 0, 0.5, [(100, 0.995), (200, 0.9), (300, 0.9)])]
    assert analysed_transformer(_validated(stopped, (*models, "transformer-l2-es"))) == "transformer-l2-es", (
        "a run to convergence is judged by the model it keeps, its best, not by its last evaluation")


def test_the_budget_table_puts_each_budgets_runs_in_its_own_column() -> None:
    seeds = {("mlp", "count"): (0.4, 0.5), ("mlp", "compare"): (0.6, 0.7),
             ("mlp-x3", "count"): (0.8, 0.9), ("mlp-x3", "compare"): (0.91, 0.93)}
    results = [_run(m, t, s, a) for (m, t), accs in seeds.items() for s, a in enumerate(accs)]
    sweep = _sweep(results, ("mlp", "mlp-x3"))
    rows = table_rows(sweep)
    assert list(budget_groups(rows)) == ["mlp"]
    header, _, line = budget_table(rows, steps=100).splitlines()
    cells = dict(zip([c.strip() for c in header.split("|")], [c.strip() for c in line.split("|")], strict=True))
    assert cells["model"] == parse_spec("mlp").label
    for (model, task), accs in seeds.items():
        budget = parse_spec(model).budget
        column = f"{'counting' if task == 'count' else 'comparison'} {budget}x ({budget * 100:,} steps)"
        assert _cell(cells[column])[2] == pytest.approx(list(accs)), column
    assert cells["seconds / run at 1x, 3x"] == "2 / 4"


def test_the_budget_table_shows_a_run_to_convergence_last_with_where_each_seed_kept_its_model() -> None:
    curves = {("mlp-es", "count", 0): [(100, 0.5), (200, 0.7), (300, 0.6)],
              ("mlp-es", "count", 1): [(100, 0.8), (200, 0.8)],  # a tie: the first best is kept
              ("mlp-es", "compare", 0): [(100, 0.5), (200, 0.6), (300, 0.9)],
              ("mlp-es", "compare", 1): [(100, 0.55), (200, 0.5)]}
    results = [_run(m, t, s, 0.5 + 0.1 * s, c) for (m, t, s), c in curves.items()]
    results += [_run(m, t, s, 0.3) for m in ("mlp", "mlp-x3") for t in ("count", "compare") for s in (0, 1)]
    rows = table_rows(_sweep(results, ("mlp-es", "mlp", "mlp-x3")))
    assert list(budget_groups(rows)["mlp"]) == ["1x", "3x", "early stop"]
    header, _, line = budget_table(rows, 100, results).splitlines()
    cells = dict(zip([c.strip() for c in header.split("|")], [c.strip() for c in line.split("|")], strict=True))
    up_to = f"up to {parse_spec('mlp-es').budget * 100:,} steps"
    assert _cell(cells[f"counting early stop ({up_to})"])[2] == pytest.approx([0.5, 0.6])
    assert _cell(cells["comparison 3x (300 steps)"])[2] == pytest.approx([0.3, 0.3])
    assert cells["early stop: step of the kept model, counting; comparison"] == "200 / 100; 300 / 100"
    assert cells["seconds / run at 1x, 3x, early stop"] == "2 / 4 / 31"


def test_a_sweep_of_runs_to_convergence_alone_tables_where_each_seed_kept_its_model() -> None:
    """A folder of ``-es`` models only (each family at one budget) still gets the budget table: the step each
    seed kept is the budget the run found; a fixed-budget model run at one budget stays out of it."""
    results = [_run("mlp-es", t, s, 0.5, [(100, 0.5), (200, 0.6 + 0.1 * s), (300, 0.55)])
               for t in ("count", "compare") for s in (0, 1)]
    results += [_run("global", t, s, 0.5) for t in ("count", "compare") for s in (0, 1)]
    rows = table_rows(_sweep(results, ("mlp-es", "global")))
    assert list(budget_groups(rows)) == ["mlp"]
    header, _, line = budget_table(rows, 100, results).splitlines()
    cells = dict(zip([c.strip() for c in header.split("|")], [c.strip() for c in line.split("|")], strict=True))
    assert cells["early stop: step of the kept model, counting; comparison"] == "200 / 200; 200 / 200"


def test_the_curve_table_says_whether_a_run_was_still_learning() -> None:
    results = [_run("mlp", "compare", s, 0.7, [(25, 0.5), (50, 0.6), (75, 0.65), (100, 0.7)]) for s in (0, 1)]
    results += [_run("mlp", "count", s, 0.9, [(25, 0.5), (50, 0.9), (75, 0.905), (100, 0.9)]) for s in (0, 1)]
    lines = curve_table(_sweep(results, ("mlp",))).splitlines()[2:]
    assert lines == [f"| {parse_spec('mlp').label} | count | 25: 0.500, 50: 0.900, 75: 0.905, 100: 0.900 | no |",
                     f"| {parse_spec('mlp').label} | compare | 25: 0.500, 50: 0.600, 75: 0.650, 100: 0.700 | yes |"]


def test_a_run_to_convergence_is_still_learning_by_its_last_quarter_not_its_last_evaluation() -> None:
    """Evaluated every 100 steps up to 1,200: the gain counted is from step 900 (0.68) to the end (0.74), not
    over the last 100 steps alone (0.735 to 0.74, which would read "no")."""
    curve = [(100 * k, 0.5 + 0.02 * k) for k in range(1, 10)] + [(1000, 0.73), (1100, 0.735), (1200, 0.74)]
    results = [_run("mlp-es", task, s, 0.7, curve) for task in ("count", "compare") for s in (0, 1)]
    lines = curve_table(_sweep(results, ("mlp-es",))).splitlines()[2:]
    assert [line.rsplit("|", 2)[1].strip() for line in lines] == ["yes", "yes"]
    flat = curve[:9] + [(1000, 0.681), (1100, 0.682), (1200, 0.689)]  # 0.68 at step 900: within noise of it
    lines = curve_table(_sweep([dataclasses.replace(r, curve=flat) for r in results], ("mlp-es",))).splitlines()[2:]
    assert [line.rsplit("|", 2)[1].strip() for line in lines] == ["no", "no"]


def test_a_models_time_is_the_median_of_its_runs_so_one_slowed_run_does_not_move_it() -> None:
    seconds = {("mlp", "count", 0): 205.0, ("mlp", "count", 1): 12.0, ("mlp", "compare", 0): 13.0,
               ("mlp", "compare", 1): 14.0}
    results = [RunResult(m, t, s, 0.5, sec, 123, None, []) for (m, t, s), sec in seconds.items()]
    (row,) = table_rows(_sweep(results, ("mlp",)))
    assert row.seconds == pytest.approx(13.5)


def test_the_report_says_where_each_group_of_runs_trained_how_loaded_the_machine_was_and_what_the_host_stole() -> None:
    def run(seed: int, machine: object) -> RunResult:
        return RunResult("mlp", "count", seed, 0.5, 10.0, 123, None, [], machine)

    here = {"cpu": "AMD EPYC", "cores": 2, "threads": 2, "versions": "python 3.12.3, torch 2.14.0"}
    there = {**here, "cpu": "Intel Xeon", "threads": 1}
    results = [run(0, {**here, "load": 2.0, "stolen": 0.1}), run(1, {**here, "load": 4.5, "stolen": 0.77}),
               run(2, {**here, "load": 2.5, "stolen": 0.05}), run(3, {**there, "load": 0.5}), run(4, None),
               run(5, "garbled"), run(6, {**here, "load": "high"}), run(7, {**here, "load": 1.0, "stolen": "?"})]
    assert machine_note(results) == (
        "\nWhere it trained: 4 runs on AMD EPYC, 2 cores, 2 torch threads (python 3.12.3, torch 2.14.0); 1-minute "
        "load average as a run started: median 2.25, 1.00-4.50; CPU time stolen by the host during training "
        "(3 runs measured): median 10%, 5-77%; 1 run on Intel Xeon, 2 cores, 1 torch threads "
        "(python 3.12.3, torch 2.14.0); 1-minute load average as a run started: median 0.50, 0.50-0.50; 3 runs "
        "kept no record of their machine (trained before runs did).\n")
    assert machine_note([run(0, None)]) == "", "runs recorded before machines were: the report is drawn as it was"


def test_a_full_disk_while_the_report_is_rewritten_keeps_the_previous_one(tmp_path: Path, fill_disk) -> None:
    """A sweep rewrites its report after every seed: a rewrite that fails half-way must leave the last
    report, its results.json (a resumed sweep reads its elapsed time there) and its figures whole."""
    models = ("mlp", "transformer-l1")  # a Transformer, for the attention figure
    runs = [_run(model, task, seed, 0.5 + 0.1 * seed, [(50, 0.5), (100, 0.6)]) for model in models
            for task in ("count", "compare") for seed in (0, 1)]
    out, sweep = tmp_path / "out", _sweep(runs, models)
    sweep.test_sets.update({task: make_split(sweep.config, task, 0, "test", 8) for task in sweep.config.tasks})
    write_report(sweep, out, elapsed=1.0, command="tokformer birds")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert {"report.md", "results.json", *FIGURES} <= set(before)
    fill_disk()
    with pytest.raises(OSError, match="No space left"):
        write_report(sweep, out, elapsed=2.0, command="tokformer birds")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before, "every file as it was, and no other"


def test_a_partial_reports_minutes_say_they_include_the_seeds_still_under_way(tmp_path: Path) -> None:
    """A resumed sweep rewrites the report of the seeds it finished with the minutes of every process so far,
    the runs of the next seeds among them: they are not what those seeds took."""
    runs = [_run("mlp", task, seed, 0.5) for task in ("count", "compare") for seed in (0, 1)]
    for seeds, said in [((0,), True), ((0, 1), False)]:
        sweep = _sweep([r for r in runs if r.seed in seeds], ("mlp",))
        sweep.test_sets.update({task: make_split(sweep.config, task, 0, "test", 8) for task in sweep.config.tasks})
        text = write_report(sweep, tmp_path / str(len(seeds)), elapsed=600.0, command="tokformer birds").read_text()
        line = next(x for x in text.splitlines() if x.startswith("Reproduce:"))
        assert ("(10.0 minutes on this machine so far, the runs of the seeds still under way included;" in line) == said
        assert "(10.0 minutes on this machine" in line, line


def test_a_sweep_refuses_a_report_folder_another_sweep_is_writing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with hold_lock(out, "tokformer birds --quick"), pytest.raises(ConfigError, match=r"in use by tokformer birds"):
        run_experiment(out, config=TINY, quiet=True)
    assert not out.exists(), "nothing was written"


def test_the_curve_figure_draws_each_budget_of_a_model_in_its_own_line_style(tmp_path: Path, monkeypatch) -> None:
    models = ("mlp", "mlp-x3", "mlp-x10", "mlp-es")
    results = [_run(m, t, s, 0.6, [(100, 0.5), (200, 0.6)]) for m in models for t in ("count", "compare")
               for s in (0, 1)]
    drawn = []
    monkeypatch.setattr(figures, "save_figure", lambda fig, path, dpi: drawn.append(fig))
    sweep = _sweep(results, models)
    plot_curves(tmp_path / "curves.png", sweep, table_rows(sweep))
    for ax in drawn[0].axes:
        styles = {line.get_label(): line.get_linestyle() for line in ax.get_lines()}
        lines = [styles[f"mlp, {parse_spec(m).budget_name}"] for m in models]
        assert len(set(lines)) == len(models), f"budgets share a line style: {dict(zip(models, lines, strict=True))}"
    budgets = [1, 3, 10, 30, 100]
    assert budget_style("mlp-x100", budgets) == budget_style("mlp-x30", budgets), "past the styles: the last"


def test_the_findings_name_one_blind_cnn_and_its_accuracy_once() -> None:
    results = [_run("pool-d1", t, s, a) for t, a in (("count", 0.8), ("compare", 0.49)) for s in (0, 1)]
    said = findings(table_rows(_sweep(results, ("pool-d1",))), None)
    assert "Counting, local-readout CNNs: accuracy 0.80 (chance 0.25)." in said
    assert ("Comparison, local-readout CNNs in which no output unit can see both birds (1 model): accuracy 0.49 "
            "(chance 0.50).") in said
    results += [_run("pool-d2", t, s, a) for t, a in (("count", 0.9), ("compare", 0.52)) for s in (0, 1)]
    said = findings(table_rows(_sweep(results, ("pool-d1", "pool-d2"))), None)
    assert "Counting, local-readout CNNs: accuracy 0.80–0.90 (chance 0.25)." in said
    assert ("Comparison, local-readout CNNs in which no output unit can see both birds (2 models): accuracy "
            "0.49–0.52 (chance 0.50).") in said


def test_the_findings_of_a_sweep_of_runs_to_convergence_alone_read_those_runs() -> None:
    """With no 1x row, the common budget is the runs to convergence: the blind CNN and the ranking are read
    there; beside 1x rows, a run to convergence is not mixed into the 1x findings."""
    accs = {"pool-d1-es": (0.9, 0.51), "transformer-local-l2-es": (0.95, 0.99), "pool-d1": (0.6, 0.49)}
    results = [_run(m, t, s, a) for m, pair in accs.items() for t, a in zip(("count", "compare"), pair, strict=True)
               for s in (0, 1)]
    said = findings(table_rows(_sweep(results, ("pool-d1-es", "transformer-local-l2-es"))), None)
    assert "Counting, local-readout CNNs: accuracy 0.90 (chance 0.25)." in said
    assert ("Comparison, local-readout CNNs in which no output unit can see both birds (1 model): accuracy 0.51 "
            "(chance 0.50).") in said
    label = parse_spec("transformer-local-l2-es").label
    assert any(line.startswith(f"At the common budget, comparison: the best Transformer ({label}, 0.990) is above")
               for line in said), said
    said = findings(table_rows(_sweep(results, ("pool-d1", "pool-d1-es", "transformer-local-l2-es"))), None)
    assert "Counting, local-readout CNNs: accuracy 0.60 (chance 0.25)." in said, "1x rows only"
