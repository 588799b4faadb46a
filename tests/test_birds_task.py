"""Task ``birds``: one birds model trained by the engine. The sweep's runs go through it, so these
check that the engine trains exactly what the plain loop trains, that an interrupted run resumes
from its checkpoint to the same weights, and that the task works from the command line."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from unittest.mock import ANY

import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from tokformer.cli import main
from tokformer.engine import load_run, seed_everything
from tokformer.tasks.birds import experiment
from tokformer.tasks.birds.data import N_CLASSES, TASKS
from tokformer.tasks.birds.experiment import BirdsConfig, SweepInterrupted, run_settings, train_model
from tokformer.tasks.birds.mixing import fit
from tokformer.tasks.birds.models import build_model, prefers_channels_last
from tokformer.tasks.birds.stream import TrainStream, accuracy, make_split
from tokformer.tasks.birds.task import ANSWERS, BirdsTask, BirdsTaskConfig

pytestmark = pytest.mark.usefixtures("one_thread")
SMALL = BirdsConfig(image_size=32, steps=8, batch_size=8, n_test=16, second_size=0, per_family={})


def _equal_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(x, y), name


@pytest.mark.parametrize("name", ["pool-d1", "transformer-l1"])
def test_the_engine_trains_the_weights_the_plain_loop_trains(name: str) -> None:
    """Same seed, images, order, optimiser and schedule: the engine's run and a plain AdamW loop over the
    stream (the mixing track's) end in the same weights, to the bit (a channels-last CNN and a Transformer)."""
    run = train_model(name, "compare", SMALL, seed=3)
    seed_everything(3)
    plain = build_model(name, N_CLASSES["compare"] + 6, SMALL.image_size, token_norm=SMALL.token_norm)
    if prefers_channels_last(plain):
        plain = plain.to(memory_format=torch.channels_last)
    fit(plain, "compare", TrainStream(SMALL, "compare", 3), SMALL, steps=SMALL.steps, lr=SMALL.lr,
        warmup=SMALL.warmup, seed=3, species_aux=SMALL.species_aux)
    _equal_weights(run.model, plain)


def test_a_runs_curve_is_its_validation_accuracy_at_each_evaluation() -> None:
    run = train_model("mlp", "count", SMALL, seed=0)
    steps = [step for step, _ in run.curve]
    assert steps == [2, 4, 6, 8], "four evaluations, the last at the end of the run"
    val = make_split(SMALL, "count", 0, "val", SMALL.n_test)
    assert run.curve[-1][1] == accuracy(run.model, val, torch.device("cpu")), "the last point is the final model's"


def _interrupt_at_training_step(monkeypatch, at: int, slow: float = 0.0) -> list[int]:
    """SIGINT from inside training step ``at`` (1-based), once, each step before it taking ``slow``
    seconds longer; returns the list of training steps taken."""
    taken: list[int] = []
    step, fired = BirdsTask.step, []

    def counting_step(self, model, batch):
        if torch.is_grad_enabled():  # training, not an evaluation
            taken.append(1)
            if not fired:
                time.sleep(slow)
            if len(taken) == at and not fired:
                fired.append(1)
                signal.raise_signal(signal.SIGINT)
        return step(self, model, batch)

    monkeypatch.setattr(BirdsTask, "step", counting_step)
    return taken


def test_an_interrupted_sweep_resumes_its_run_in_progress_from_the_checkpoint(tmp_path: Path, monkeypatch) -> None:
    """Ctrl-C in the middle of a run: the engine saves a checkpoint and the sweep stops; run again, it
    trains only the steps left and ends with the weights and validation curve of a run never
    interrupted, timed over both processes."""
    config = BirdsConfig(**{**SMALL.__dict__, "models": ("pool-d1",), "tasks": ("count",), "seeds": (0,)})
    straight = experiment.run_sweep(config, out=tmp_path / "straight").models[("pool-d1", "count")]
    taken = _interrupt_at_training_step(monkeypatch, at=3, slow=0.5)
    with pytest.raises(SweepInterrupted, match="stopped at step 3 of pool-d1 on count"):
        experiment.run_sweep(config, out=tmp_path / "cut")
    assert (tmp_path / "cut" / experiment.TRAINING_DIR / "pool-d1-count-seed0").is_dir(), "its checkpoint is kept"
    taken.clear()
    resumed = experiment.run_sweep(config, out=tmp_path / "cut").models[("pool-d1", "count")]
    assert len(taken) == config.steps - 3, "only the steps after the checkpoint are trained again"
    _equal_weights(straight, resumed)
    assert not (tmp_path / "cut" / experiment.TRAINING_DIR).exists(), "recorded runs leave no checkpoints"
    (record,), (expected,) = (
        [json.loads(line) for line in (tmp_path / sweep / "runs.jsonl").read_text().splitlines()]
        for sweep in ("cut", "straight"))
    assert record["curve"] == expected["curve"] == [[2, ANY], [4, ANY], [6, ANY], [8, ANY]], (
        "the stop evaluated off the schedule, or the curve lost the steps before it")
    assert record["train_seconds"] >= 3 * 0.5, "the seconds of the interrupted process (3 slowed steps) are lost"


@pytest.mark.parametrize("text", ["-1", "NaN", "true", '"12"', "[3]", "{", '{"seconds": 3}',
                                  '{"seconds": 3, "ticks": [5, 2]}', '{"seconds": -3, "ticks": [0, 2]}',
                                  '{"seconds": 3, "ticks": [0.5, 2]}'])
def test_a_run_whose_record_of_earlier_seconds_is_damaged_is_trained_again_from_its_start(
        tmp_path: Path, monkeypatch, caplog, text: str) -> None:
    """How long a stopped run took before is unknown: resumed, its time would be wrong, so it starts over
    (a warning names the file), as a damaged line of runs.jsonl does (docs/reliability.md, H67)."""
    config = BirdsConfig(**{**SMALL.__dict__, "models": ("pool-d1",), "tasks": ("count",), "seeds": (0,)})
    _interrupt_at_training_step(monkeypatch, at=3)
    with pytest.raises(SweepInterrupted):
        experiment.run_sweep(config, out=tmp_path / "cut")
    record = tmp_path / "cut" / experiment.TRAINING_DIR / "pool-d1-count-seed0" / experiment.SECONDS_FILE
    record.write_text(text)
    taken = _interrupt_at_training_step(monkeypatch, at=10 ** 6)
    experiment.run_sweep(config, out=tmp_path / "cut")
    assert len(taken) == config.steps, "it resumed from the checkpoint"
    warning = next(r.getMessage() for r in caplog.records if r.name == "tokformer.birds")
    assert warning.startswith(f"{record} is ") and warning.endswith("; training that run again from its start")


def test_a_resumed_runs_cpu_steal_is_over_every_process_that_trained_it(tmp_path: Path, monkeypatch) -> None:
    """The host's steal is kept beside the seconds, so a run stopped and resumed reports the share over both
    processes, not the last one's alone: 30 of 100 ticks stolen, then 10 of 300, is 0.1 (the last: 0.033)."""
    config = BirdsConfig(**{**SMALL.__dict__, "models": ("pool-d1",), "tasks": ("count",), "seeds": (0,)})
    readings = [(10, 100), (40, 200), (40, 1000), (50, 1300)]  # (stolen, total) at each process's start and end
    monkeypatch.setattr(experiment, "cpu_ticks", lambda: readings.pop(0))
    _interrupt_at_training_step(monkeypatch, at=3)
    with pytest.raises(SweepInterrupted):
        experiment.run_sweep(config, out=tmp_path / "cut")
    record = tmp_path / "cut" / experiment.TRAINING_DIR / "pool-d1-count-seed0" / experiment.SECONDS_FILE
    assert json.loads(record.read_text())["ticks"] == [30, 100]
    _interrupt_at_training_step(monkeypatch, at=10 ** 6)
    experiment.run_sweep(config, out=tmp_path / "cut")
    assert not readings, "each process read the ticks as it started and as it stopped training"
    (run,) = [json.loads(line) for line in (tmp_path / "cut" / "runs.jsonl").read_text().splitlines()]
    assert run["machine"]["stolen"] == 0.1


def test_a_record_of_seconds_alone_counts_its_seconds_and_no_steal(tmp_path: Path) -> None:
    """A run stopped before the ticks were kept resumes with its seconds; its steal is measured from then on."""
    (tmp_path / experiment.SECONDS_FILE).write_text("12.5")
    assert experiment._time_before(tmp_path) == experiment.TrainingTime(12.5, (0, 0))
    assert experiment._time_before(tmp_path).plus(1.0, (5, 10), (9, 30)).stolen == pytest.approx(4 / 20)
    assert experiment.TrainingTime(3.0).plus(1.0, None, (9, 30)).stolen is None, "never measured: no share"


def test_cpu_counters_that_step_back_give_a_share_between_0_and_1() -> None:
    """proc(5): iowait can decrease, and a steal counter has gone back on some hypervisors: the record kept
    a negative or oversized count, which the next resume refused as damaged, training the run again."""
    assert experiment.TrainingTime().plus(1.0, (50, 100), (40, 200)).ticks == (0, 100)
    assert experiment.TrainingTime().plus(1.0, (0, 100), (500, 200)).ticks == (100, 100)
    assert experiment.TrainingTime().plus(1.0, (0, 100), (5, 90)).ticks == (0, 0), "no time passed: none counted"


def test_a_run_in_progress_resumes_on_the_device_asked_for_now(tmp_path: Path, monkeypatch) -> None:
    """A sweep stopped while it trained on a GPU, resumed with ``--device cpu`` on a machine without one,
    failed with "CUDA is not available": the run kept its first process's device."""
    config = BirdsConfig(**{**SMALL.__dict__, "models": ("pool-d1",), "tasks": ("count",), "seeds": (0,)})
    _interrupt_at_training_step(monkeypatch, at=3)
    with pytest.raises(SweepInterrupted):
        experiment.run_sweep(config, out=tmp_path / "cut")
    saved = tmp_path / "cut" / experiment.TRAINING_DIR / "pool-d1-count-seed0" / "config.json"
    record = json.loads(saved.read_text())
    saved.write_text(json.dumps({**record, "train": {**record["train"], "device": "cuda:7"}}))  # none here has 8
    experiment.run_sweep(config, out=tmp_path / "cut")
    assert (tmp_path / "cut" / "runs.jsonl").is_file(), "the run finished on the cpu asked for"


def test_a_killed_process_after_a_report_loses_no_minutes(tmp_path: Path) -> None:
    """Both records are running totals: a process stopped by a signal wrote elapsed.json, the next one a
    report (results.json) before it was killed outright; the third counted only the older elapsed.json."""
    (tmp_path / experiment.ELAPSED_FILE).write_text("100.0")
    (tmp_path / "results.json").write_text(json.dumps({"elapsed_seconds": 300.0}))
    assert experiment._elapsed_before(tmp_path) == 300.0
    (tmp_path / "results.json").write_text(json.dumps({"elapsed_seconds": 10 ** 400}))
    assert experiment._elapsed_before(tmp_path) == 100.0, "a number no float holds is no record"


def test_the_birds_command_exits_as_a_signal_stop_and_says_how_to_resume(tmp_path: Path, monkeypatch) -> None:
    _interrupt_at_training_step(monkeypatch, at=2)
    monkeypatch.setattr(experiment, "quick_config", lambda **kw: BirdsConfig(
        **{**SMALL.__dict__, "models": ("mlp",), "tasks": ("compare",), "seeds": (0,), **kw}))
    result = CliRunner().invoke(main, ["birds", "--quick", "--quiet", "--out", str(tmp_path / "r")])
    assert result.exit_code == 128 + signal.SIGINT, result.output
    assert "the same command resumes there" in result.output and "Traceback" not in result.output


def test_every_answer_names_one_class() -> None:
    assert set(ANSWERS) == set(TASKS)
    for task in TASKS:
        assert len(ANSWERS[task]) == N_CLASSES[task] == len(set(ANSWERS[task])), task


def test_train_evaluate_and_predict_from_the_command_line(tmp_path: Path) -> None:
    run = tmp_path / "run"
    options = ["--model", "pool-d1", "--question", "compare", "--image-size", "32", "--eval-size", "16",
               "--steps", "4", "--warmup-steps", "1", "--batch-size", "8", "--eval-every", "2", "--device", "cpu",
               "--run-dir", str(run)]
    trained = CliRunner().invoke(main, ["train", "birds", *options, "--quiet"])
    assert trained.exit_code == 0, trained.output
    evaluated = CliRunner().invoke(main, ["evaluate", str(run), "--quiet"])
    assert evaluated.exit_code == 0 and "accuracy" in evaluated.output, evaluated.output
    images = make_split(BirdsTaskConfig(image_size=32), "compare", 0, "test", 6)
    paths = []
    for i, image in enumerate(images.images):
        paths.append(tmp_path / f"{i}.png")
        Image.fromarray(image.permute(1, 2, 0).numpy()).save(paths[-1])
    predicted = CliRunner().invoke(main, ["predict", str(run), *map(str, paths)])
    assert predicted.exit_code == 0, predicted.output
    task, model = load_run(run)
    with torch.no_grad():
        expected = model(images.images.float().div(255))[:, :2].argmax(-1)  # [6]: the answers, not the species
    answers = [ANSWERS["compare"][int(a)] for a in expected]
    assert task.predict(model, [str(p) for p in paths]) == answers, "a saved PNG is read back as drawn"
    assert [line.split()[-1] for line in predicted.output.strip().splitlines()] == answers


def test_a_bad_option_is_one_line_naming_it() -> None:
    result = CliRunner().invoke(main, ["train", "birds", "--question", "colour", "--steps", "1"])
    assert result.exit_code == 2 and "question must be one of count, compare" in result.output
    assert "Traceback" not in result.output
    with pytest.raises(ValueError, match="unknown model 'cnn'"):
        BirdsTaskConfig(model="cnn")


def test_run_settings_carry_the_sweeps_choices() -> None:
    cfg = BirdsConfig(steps=100, per_family={"mlp": (2e-3, 0.1)})
    settings = run_settings("mlp-x3", "compare", cfg, seed=4)
    assert settings["train"] | {"device": None} == {
        "steps": 300, "batch_size": cfg.batch_size, "lr": 2e-3, "warmup_steps": 30, "weight_decay": cfg.weight_decay,
        "seed": 4, "device": None, "keep_last": 1, "eval_every": 75, "log_every": 75}
    assert run_settings("mlp", "count", BirdsConfig(steps=250), seed=0)["train"]["eval_every"] == 63, "4, not 5"
    assert settings["task"]["data_seed"] == 4 and settings["task"]["eval_size"] == cfg.n_test
    assert run_settings("transformer-l1", "count", cfg, seed=0)["train"]["lr"] == cfg.lr, "no entry: the common lr"



def test_a_resumed_sweeps_report_counts_the_minutes_spent_before_it_and_a_redrawn_one_adds_none(
        tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    config = BirdsConfig(**{**SMALL.__dict__, "models": ("mlp",), "seeds": (0,)})
    experiment.run_experiment(out, config=config, quiet=True)
    results = json.loads((out / "results.json").read_text())
    (out / "results.json").write_text(json.dumps(results | {"elapsed_seconds": 6000.0}))  # as if it took 100 minutes
    (out / experiment.ELAPSED_FILE).unlink()  # a folder from before processes recorded their time: its report's
    extended = BirdsConfig(**{**config.__dict__, "models": ("mlp", "pool-d1")})  # pool-d1's runs are still to do
    report = experiment.run_experiment(out, config=extended, quiet=True)
    elapsed = json.loads((out / "results.json").read_text())["elapsed_seconds"]
    assert 6000 < elapsed < 6000 + 300
    assert "(100." in report.read_text(), "the report says the minutes of every process that built it"
    experiment.run_experiment(out, config=extended, quiet=True)  # every run done: only the report is drawn again
    assert json.loads((out / "results.json").read_text())["elapsed_seconds"] == elapsed


def test_a_sweep_stopped_before_its_first_report_keeps_its_minutes_for_the_resumed_one(
        tmp_path: Path, monkeypatch) -> None:
    """The first process trains mlp, then is stopped (Ctrl-C / SIGTERM) 1.5 s into pool-d1, before any report:
    it records its seconds, and the resumed sweep's report counts them beside its own. Before, a sweep's time
    was carried only by its last report, so they were lost."""
    out = tmp_path / "sweep"
    config = BirdsConfig(**{**SMALL.__dict__, "models": ("mlp", "pool-d1"), "seeds": (0,), "tasks": ("compare",)})
    real_train = experiment.train_model

    def stopped_in_pool(name, task, cfg, seed, **options):
        if name == "pool-d1":
            time.sleep(1.5)
            raise SweepInterrupted("stopped", signal.SIGTERM)
        return real_train(name, task, cfg, seed, **options)

    monkeypatch.setattr(experiment, "train_model", stopped_in_pool)
    with pytest.raises(SweepInterrupted):
        experiment.run_experiment(out, config=config, quiet=True)
    assert not (out / "results.json").exists(), "stopped before its first report"
    first = json.loads((out / experiment.ELAPSED_FILE).read_text())
    assert first >= 1.5, "the stopped process recorded its time"
    monkeypatch.setattr(experiment, "train_model", real_train)
    experiment.run_experiment(out, config=config, quiet=True)
    assert json.loads((out / "results.json").read_text())["elapsed_seconds"] > first, "and the resumed one adds to it"
