"""The trainer's checkpoint and resume methods: what a resume says, a run that died before its first
checkpoint, RNG states of another world size, the data position and schedule a checkpoint records
(mutation testing, benchmarks/results/mutation.md)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tokformer.engine import train, trainer
from tokformer.errors import CheckpointError
from tokformer.store.steps import CHECKPOINTS, list_checkpoints, step_dir

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = dict(seq_len=6, train_size=64, eval_size=16, d_model=16, n_heads=2, n_layers=1, batch_size=16, grad_accum=2,
            warmup_steps=2, log_every=1, eval_every=3, keep_last=5, device="cpu", deterministic=True)
STEPS = 6


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 6-step sort run in micro-batches of 8 (grad_accum 2), checkpoints at steps 3 and 6, every step logged."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the tests that resume it run: the summation order decides bits
    try:
        return train("sort", quiet=True, steps=STEPS, run_dir=str(tmp_path_factory.mktemp("runs") / "run"),
                     **TINY).run_dir
    finally:
        torch.set_num_threads(threads)


def records(run: Path, split: str) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["split"] == split]


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The tokformer log lines, as a user reads them."""
    return [r.getMessage() for r in caplog.records if r.name.startswith("tokformer")]


def state_of(run: Path, step: int) -> dict:
    return json.loads((step_dir(run, step) / "state.json").read_text())


def test_a_run_that_died_before_its_first_checkpoint_starts_over_and_says_so(finished: Path, tmp_path: Path,
                                                                              caplog: pytest.LogCaptureFixture) -> None:
    run = Path(shutil.copytree(finished, tmp_path / "run"))
    shutil.rmtree(run / CHECKPOINTS)  # the metrics of the lost steps are still logged
    caplog.set_level(logging.INFO, logger="tokformer")
    assert train(resume=run, quiet=True).step == STEPS
    assert f"no checkpoint in {run} yet; starting from step 0" in said(caplog)
    assert [r["step"] for r in records(run, "train")] == list(range(1, STEPS + 1)), "lost steps logged twice"
    for name, value in load_file(step_dir(finished, STEPS) / "model.safetensors").items():  # redone from step 0
        assert torch.equal(load_file(step_dir(run, STEPS) / "model.safetensors")[name], value), name


def test_a_resume_says_where_it_resumed_from(finished: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    run = Path(shutil.copytree(finished, tmp_path / "run"))
    shutil.rmtree(step_dir(run, STEPS))
    caplog.set_level(logging.INFO, logger="tokformer")
    assert train(resume=run, quiet=True).step == STEPS
    assert f"resumed from {step_dir(run, 3)} (step 3)" in said(caplog)
    assert "not bitwise exact" not in caplog.text, "one process resumed a one-process checkpoint"


def test_rng_states_of_another_number_of_processes_are_used_with_a_warning(finished: Path, tmp_path: Path,
                                                                            caplog: pytest.LogCaptureFixture) -> None:
    run = Path(shutil.copytree(finished, tmp_path / "run"))
    shutil.rmtree(step_dir(run, STEPS))
    state_file = step_dir(run, 3) / "state.json"
    state = json.loads(state_file.read_text())
    state["rng"] = state["rng"] * 2  # as a two-process run saves it
    state_file.write_text(json.dumps(state))
    caplog.set_level(logging.INFO, logger="tokformer")
    assert train(resume=run, quiet=True).step == STEPS
    assert "checkpoint has RNG states of 2 processes, this run has 1: not bitwise exact" in said(caplog)


def test_a_checkpoint_records_the_data_position_and_the_schedule_of_its_step(tmp_path: Path) -> None:
    """Its own run, checkpointing every step from step 1 (where the schedule's index is clamped at 0): mutmut
    credits a module fixture's run to the first test that asked for it, not to this one."""
    run = train("sort", quiet=True, steps=4, run_dir=str(tmp_path / "run"), **{**TINY, "eval_every": 1}).run_dir
    micro, per_epoch = TINY["batch_size"] // TINY["grad_accum"], TINY["train_size"] // 8
    lr_by_step = {r["step"]: r["lr"] for r in records(run, "train")}
    assert list_checkpoints(run) == [1, 2, 3, 4]
    assert lr_by_step[1] < lr_by_step[2] > lr_by_step[4], "warmup, then decay: the lr tells the steps apart"
    for step in list_checkpoints(run):
        state = state_of(run, step)
        consumed = step * TINY["grad_accum"]
        assert state["data"] == {"micro_batch": consumed, "epoch": consumed // per_epoch,
                                 "batch_in_epoch": consumed % per_epoch, "micro_batch_size": micro, "world": 1,
                                 "seed": state["data"]["seed"]}
        assert state["schedule"] == {"step": step, "lr": lr_by_step[step]}, "the lr of the checkpoint's last step"


def test_resume_checks_every_tokenizer_directory_of_the_task(tmp_path: Path) -> None:
    """translate with separate vocabularies keeps tokenizer_src/ and tokenizer_tgt/: resume checks both (about
    4 s, the quick tier's one run of a task with two tokenizer directories)."""
    run = train("translate", run_dir=str(tmp_path / "run"), shared_vocab=False, share_embeddings=False,
                vocab_size=270, encoder_layers=1, decoder_layers=1, d_model=16, n_heads=2, train_size=32, eval_size=8,
                beam_size=1, steps=2, batch_size=8, eval_every=2, warmup_steps=1, device="cpu", quiet=True).run_dir
    assert train(resume=run, quiet=True, steps=3).step == 3, "an untouched run must resume"
    target = next(p for p in sorted((run / "tokenizer_tgt").rglob("*")) if p.is_file())
    target.write_bytes(target.read_bytes() + b"\n")  # same tokens, other bytes: another file all the same
    with pytest.raises(CheckpointError, match="another tokenizer"):
        train(resume=run, quiet=True, steps=4)


def test_a_resume_takes_the_newest_of_several_good_checkpoints(finished: Path, tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    run = Path(shutil.copytree(finished, tmp_path / "run"))
    assert len(list_checkpoints(run)) >= 2
    caplog.set_level(logging.INFO, logger="tokformer")
    assert train(resume=run, quiet=True, steps=STEPS + 1).step == STEPS + 1
    assert f"resumed from {step_dir(run, STEPS)} (step {STEPS})" in said(caplog)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], "no checkpoint was skipped"


def test_a_foreign_newest_checkpoint_is_skipped_with_a_warning_naming_it_and_the_mismatch(
        finished: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    run = Path(shutil.copytree(finished, tmp_path / "run"))
    weights_file = step_dir(run, STEPS) / "model.safetensors"
    weights = load_file(weights_file)
    name = sorted(k for k, v in weights.items() if v.dim() == 2)[0]
    weights[name] = torch.zeros(weights[name].shape[0] + 1, weights[name].shape[1])  # another model's shape
    save_file(weights, weights_file)
    assert train(resume=run, quiet=True).step == STEPS  # from step 3, redoing 4-6
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"checkpoint {step_dir(run, STEPS)} does not fit the model built from the run's "
                                  f"config and tokenizer (shape: {name} "), warnings[0]
    assert warnings[0].endswith("; resuming from the checkpoint before it"), warnings[0]


def impossible_best(run: Path, step: int, best_step: int) -> None:
    """Make checkpoint ``step`` (and best.json) say that ``best_step`` scored an accuracy no evaluation can beat."""
    best = {"step": best_step, "metric": "accuracy", "value": 2.0}
    state = state_of(run, step)
    state["best"] = best
    (step_dir(run, step) / "state.json").write_text(json.dumps(state))
    (run / "best.json").write_text(json.dumps(best))


def test_a_resume_keeps_counting_evaluations_without_improvement_towards_early_stopping(tmp_path: Path) -> None:
    run = train("sort", quiet=True, steps=STEPS, early_stop=2, run_dir=str(tmp_path / "run"), **TINY).run_dir
    impossible_best(run, STEPS, best_step=3)
    state = state_of(run, STEPS)
    state["watch"]["stale"] = 1  # one evaluation (step 6) without a better accuracy already
    (step_dir(run, STEPS) / "state.json").write_text(json.dumps(state))
    result = train(resume=run, quiet=True, steps=4 * STEPS)
    assert (result.step, result.stopped_early) == (STEPS + 3, True), (
        "the count of evaluations without improvement did not survive the resume: with patience 2 the first "
        f"evaluation after it (step {STEPS + 3}) must stop the run")
    assert result.best == {"step": 3, "metric": "accuracy", "value": 2.0}


def test_a_resume_with_no_steps_left_returns_the_metrics_of_the_last_evaluation(finished: Path, tmp_path: Path) -> None:
    run = Path(shutil.copytree(finished, tmp_path / "run"))
    last_eval = records(finished, "eval")[-1]
    assert last_eval["step"] == STEPS
    result = train(resume=run, quiet=True)
    assert result.step == STEPS
    assert result.metrics == {k: v for k, v in last_eval.items() if k not in ("step", "split", "time")}
    assert result.metrics, "a resumed run forgot its last evaluation"


def test_best_json_names_the_best_checkpoint_and_pruning_keeps_it(tmp_path: Path) -> None:
    run = train("sort", quiet=True, steps=STEPS, run_dir=str(tmp_path / "run"), **TINY).run_dir
    assert json.loads((run / "best.json").read_text()) == state_of(run, STEPS)["best"] is not None
    impossible_best(run, STEPS, best_step=3)
    result = train(resume=run, quiet=True, steps=STEPS + 3, keep_last=1)
    assert list_checkpoints(run) == [3, STEPS + 3], "keep_last=1 keeps the newest checkpoint and the best one"
    assert json.loads((run / "best.json").read_text()) == result.best == state_of(run, STEPS + 3)["best"]


def test_a_run_with_no_finite_best_metric_checkpoints_without_best_json(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trainer, "evaluate_model", lambda *args, **kwargs: {"loss": 1.0, "accuracy": float("nan")})
    result = train("sort", quiet=True, steps=STEPS, run_dir=str(tmp_path / "run"), **TINY)
    assert result.best is None and result.step == STEPS
    assert list_checkpoints(result.run_dir) == [3, STEPS]
    assert not (result.run_dir / "best.json").exists()


def test_an_overwritten_run_is_deleted_once_the_new_run_has_a_checkpoint(finished: Path, tmp_path: Path) -> None:
    run = Path(shutil.copytree(finished, tmp_path / "run"))
    train("sort", quiet=True, steps=3, run_dir=str(run), overwrite=True, **TINY)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"], "the old run set aside by --overwrite is left"
    assert list_checkpoints(run) == [3]


def test_a_signal_between_evaluations_leaves_early_stopping_as_in_a_run_never_stopped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stop between two scheduled evaluations is checkpointed without an evaluation of its own: one
    would count towards early stopping, so the resumed run would stop three steps sooner (here at 6
    rather than 9) and with another best, than the same run never stopped."""
    monkeypatch.setattr(trainer, "evaluate_model", lambda *args, **kwargs: {"loss": 1.0, "accuracy": 0.5})
    settings = dict(quiet=True, steps=10 * STEPS, early_stop=2, **TINY)
    straight = train("sort", run_dir=str(tmp_path / "straight"), **settings)
    assert (straight.step, straight.stopped_early) == (9, True), "patience 2 after the best at step 3"

    clip, calls = trainer.Trainer._clip, []

    def signalled_in_step_4(self: trainer.Trainer, model: torch.nn.Module) -> float:
        calls.append(1)
        if len(calls) == 4:
            os.kill(os.getpid(), signal.SIGTERM)  # seen at the next step's vote: the run stops after step 5
        return clip(self, model)

    monkeypatch.setattr(trainer.Trainer, "_clip", signalled_in_step_4)
    stopped = train("sort", run_dir=str(tmp_path / "stopped"), **settings)
    assert (stopped.interrupted, stopped.step) == (True, 5)
    assert list_checkpoints(stopped.run_dir) == [3, 5], "the stop's checkpoint"
    monkeypatch.setattr(trainer.Trainer, "_clip", clip)
    resumed = train(resume=stopped.run_dir, quiet=True)
    assert (resumed.step, resumed.stopped_early, resumed.best) == (straight.step, True, straight.best)
    assert [r["step"] for r in records(resumed.run_dir, "eval")] == [r["step"] for r in records(straight.run_dir,
                                                                                                 "eval")] == [3, 6, 9]


def test_a_run_that_stopped_early_stays_stopped_when_resumed_unless_its_patience_is_raised(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Resuming a finished run is safe to repeat (a requeued job, a sweep stopped before it recorded the run):
    one that early stopping ended trains no further. Before, it trained one more step (logged, never
    saved) and returned it as the run's last step."""
    monkeypatch.setattr(trainer, "evaluate_model", lambda *args, **kwargs: {"loss": 1.0, "accuracy": 0.5})
    first = train("sort", quiet=True, steps=10 * STEPS, early_stop=2, run_dir=str(tmp_path / "run"), **TINY)
    assert (first.step, first.stopped_early) == (9, True)
    caplog.set_level(logging.INFO, logger="tokformer")
    again = train(resume=first.run_dir, quiet=True)
    assert (again.step, again.stopped_early, again.best, again.metrics) == (9, True, first.best, first.metrics)
    assert list_checkpoints(first.run_dir) == [3, 6, 9]
    assert [r["step"] for r in records(first.run_dir, "train")] == list(range(1, 10)), "it trained on"
    assert ("the run stopped early at step 9 (no better accuracy for 2 evaluations): nothing to train; a larger "
            "--early-stop, or 0, goes on") in said(caplog)
    more_patient = train(resume=first.run_dir, quiet=True, early_stop=3)
    assert (more_patient.step, more_patient.stopped_early) == (12, True), "patience 3 allows one more evaluation"
