"""Where a new run goes, unit by unit: tokformer/engine/api.py's run-directory planning (which directory,
start, resume, set an old run aside, or refuse) and tokformer/store/run_dir.py's cleanup after a failed
start. These decide what is deleted, so each branch and each message is pinned here, without training
(the end-to-end tests in test_engine_train.py and test_hostile_inputs.py train; mutation testing needs
fast ones: benchmarks/results/mutation.md)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from pathlib import Path

import pytest

from tokformer.engine import LOGGER, api
from tokformer.engine.api import RunDirPlan
from tokformer.errors import ConfigError
from tokformer.runtime.config import RunConfig, resolve_config
from tokformer.runtime.distributed import local
from tokformer.store import lock
from tokformer.store import run_dir as runs
from tokformer.store.steps import step_dir


def sort_config(run: Path, **overrides) -> RunConfig:
    return resolve_config("sort", **{"run_dir": str(run), "steps": 2, **overrides})


def a_run(run: Path, **overrides) -> RunConfig:
    """A run directory as ``tokformer train`` leaves it before its first checkpoint: its config.json."""
    cfg = sort_config(run, **overrides)
    run.mkdir(parents=True, exist_ok=True)
    runs.save_config(run, cfg.to_dict())
    return cfg


def of_a_removed_task(run: Path, cfg: RunConfig) -> None:
    """Record ``cfg`` as the run's config.json, naming a task tokformer no longer has."""
    saved = cfg.to_dict()
    saved["task"]["name"] = "a-task-since-removed"
    runs.save_config(run, saved)


def with_checkpoint(run: Path) -> None:
    step_dir(run, 2).mkdir(parents=True)


# -- the default directory ---------------------------------------------------------------------------


def test_the_default_run_directory_is_made_empty_and_never_shared_by_two_runs_of_one_second(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(time, "strftime", lambda pattern: {"%Y%m%d-%H%M%S": "20261205-120000"}[pattern])
    made = [api._new_default_run_dir("sort") for _ in range(3)]
    assert made == [Path("runs/sort-20261205-120000"), Path("runs/sort-20261205-120000-2"),
                    Path("runs/sort-20261205-120000-3")]
    assert all(p.is_dir() and not any(p.iterdir()) for p in made)


# -- _plan: a new run's directory ----------------------------------------------------------------------


def test_a_missing_directory_is_planned_as_new_and_an_empty_one_as_the_users(tmp_path):
    run = tmp_path / "run"
    assert api._plan(run, sort_config(run), False, False) == RunDirPlan(str(run))
    run.mkdir()
    assert api._plan(run, sort_config(run), False, False) == RunDirPlan(str(run), existed=True)
    assert api._plan(run, sort_config(run), False, True) == RunDirPlan(str(run), existed=True), "nothing to replace"


def test_resume_is_planned_as_given(tmp_path):
    run = tmp_path / "run"
    cfg = a_run(run)
    assert api._plan(run, cfg, True, False) == RunDirPlan(str(run), resume=True), "no checkpoint yet: it starts over"
    with_checkpoint(run)
    (run / "notes.txt").write_text("mine")  # resuming deletes nothing
    assert api._plan(run, cfg, True, False) == RunDirPlan(str(run), resume=True)


def test_resume_without_a_checkpoint_refuses_a_config_file_of_the_users(tmp_path):
    """It would be rewritten with every option, and the run written into the user's folder."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text('{"task": {"name": "sort"}, "train": {"steps": 2}}')
    assert api._plan(run, sort_config(run), True, False) == RunDirPlan(refusal=(
        f"--resume {run}: it has no checkpoint, and its config.json is no run's (tokformer train writes every option "
        f"there); to train with that config: tokformer train {run / 'config.json'} --run-dir ANOTHER_DIR"))


@pytest.mark.parametrize(("mine", "named"), [(["plots/notes.txt"], "plots/notes.txt"),
                                             (["a", "b/", "c", "d"], "a, b/, c ...")])
def test_resume_without_a_checkpoint_refuses_a_run_holding_the_users_files(tmp_path, mine, named):
    run = tmp_path / "run"
    cfg = a_run(run)
    for name in mine:
        (run / name).parent.mkdir(exist_ok=True)
        (run / name.rstrip("/")).mkdir() if name.endswith("/") else (run / name).write_text("mine")
    assert api._plan(run, cfg, True, False) == RunDirPlan(refusal=(
        f"--resume {run}: it has no checkpoint, so the run would start again there, and it holds {named}, which "
        "tokformer did not write; move them out first, or choose another --run-dir"))


def test_a_file_is_refused_as_a_run_directory(tmp_path):
    run = tmp_path / "run"
    run.write_text("x")
    plan = api._plan(run, sort_config(run), False, True)
    assert plan == RunDirPlan(refusal=f"--run-dir {run} is a file; give a directory")


def test_overwrite_refuses_a_folder_that_is_no_run_naming_what_it_holds(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for name in ("a.txt", "b.txt", "c.txt", "d.txt"):
        (run / name).write_text("mine")
    plan = api._plan(run, sort_config(run), False, True)
    assert plan.refusal == (f"--overwrite replaces only a tokformer run, and {run} is none (it holds a.txt, b.txt, "
                            "c.txt (4 entries)); choose another --run-dir")
    assert sorted(p.name for p in run.iterdir()) == ["a.txt", "b.txt", "c.txt", "d.txt"]


@pytest.mark.parametrize(("mine", "named"), [(["x.txt"], "x.txt"), (["w.txt", "x.txt", "y/"], "w.txt, x.txt, y/"),
                                             (["w.txt", "x.txt", "y/", "z.txt"], "w.txt, x.txt, y/ ...")])
def test_overwrite_refuses_a_run_holding_files_tokformer_did_not_write(tmp_path, mine, named):
    run = tmp_path / "run"
    a_run(run)
    for name in mine:
        (run / name.rstrip("/")).mkdir() if name.endswith("/") else (run / name).write_text("mine")
    plan = api._plan(run, sort_config(run, steps=3), False, True)
    assert plan.refusal == (f"--overwrite would delete {named} in {run}, which tokformer did not write; move them "
                            "out of the run directory first, or choose another --run-dir")
    assert (run / runs.CONFIG_FILE).is_file()


def test_overwrite_sets_the_old_run_aside_until_the_new_one_stands(tmp_path):
    run = tmp_path / "run"
    a_run(run)
    (run / "metrics.jsonl").write_text("{}\n")
    plan = api._plan(run, sort_config(run, steps=3), False, True)
    [aside] = runs.asides_of(run)
    assert plan == RunDirPlan(str(run), aside=str(aside))
    assert not run.exists() and sorted(p.name for p in aside.iterdir()) == ["config.json", "metrics.jsonl"]


def test_overwrite_judges_a_run_of_a_task_no_longer_known_by_the_new_tasks_files(tmp_path):
    run = tmp_path / "run"
    cfg = a_run(run)
    of_a_removed_task(run, cfg)
    (run / "tokenizer").mkdir()  # what the sort task writes: tokformer's
    plan = api._plan(run, cfg, False, True)
    assert plan.aside is not None and not plan.refusal


def test_an_existing_run_without_overwrite_goes_to_the_requeue_rules(tmp_path):
    run = tmp_path / "run"
    a_run(run)
    plan = api._plan(run, sort_config(run, steps=3), False, False)
    assert plan.refusal.startswith(f"run directory {run} already exists with another config: train.steps=3")


# -- _requeue: the same command again ------------------------------------------------------------------


REFUSED = ("run directory {run} already exists; pass --resume to continue it, --overwrite to replace it, or another "
           "--run-dir")


@pytest.mark.parametrize("config", [None, "a folder", "not json {", "[1, 2]", '{"task": {}}', '{"train": {}}',
                                    '{"task": {"name": "nope"}, "train": {}}', '{"task": {"name": "sort"}}'])
def test_a_folder_without_a_readable_run_config_is_refused(tmp_path, config):
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("mine")
    if config == "a folder":
        (run / runs.CONFIG_FILE).mkdir()
    elif config is not None:
        (run / runs.CONFIG_FILE).write_text(config)
    assert api._requeue(run, sort_config(run)) == RunDirPlan(refusal=REFUSED.format(run=run))
    assert (run / "notes.txt").read_text() == "mine"


def test_a_config_file_of_the_users_in_the_folder_is_no_run_even_when_it_asks_for_the_same(tmp_path):
    """A config.json without a train section is a config someone wrote, not a run's record: the same command
    run there must not take it for its own run, start again and delete the folder."""
    run = tmp_path / "run"
    run.mkdir()
    (run / runs.CONFIG_FILE).write_text('{"task": {"name": "sort"}}')
    assert api._requeue(run, resolve_config("sort", run_dir=str(run))) == RunDirPlan(refusal=REFUSED.format(run=run))
    assert (run / runs.CONFIG_FILE).read_text() == '{"task": {"name": "sort"}}'


def test_a_run_of_another_config_is_refused_naming_every_difference(tmp_path):
    run = tmp_path / "run"
    a_run(run, lr=1e-3)
    plan = api._requeue(run, sort_config(run, steps=3, lr=2e-3, seq_len=5))
    assert plan.refusal == (f"run directory {run} already exists with another config: task.seq_len=5 (the run has "
                            "8); train.steps=3 (the run has 2); train.lr=0.002 (the run has 0.001); rerun its command "
                            "to continue it, pass --overwrite to replace it, or another --run-dir")


def test_the_same_run_elsewhere_is_the_same_run(tmp_path):
    """config.json records run_dir; a run directory moved (or named another way) is still that run."""
    run = tmp_path / "run"
    cfg = sort_config(tmp_path / "elsewhere")
    run.mkdir()
    runs.save_config(run, cfg.to_dict())
    with_checkpoint(run)
    assert api._requeue(run, sort_config(run)) == RunDirPlan(str(run), resume=True)


def test_a_saved_config_missing_options_added_since_counts_them_at_their_defaults(tmp_path):
    run = tmp_path / "run"
    cfg = a_run(run)
    saved = cfg.to_dict()
    del saved["train"]["keep_last"], saved["task"]["seq_len"]
    runs.save_config(run, saved)
    with_checkpoint(run)
    assert api._requeue(run, cfg) == RunDirPlan(str(run), resume=True)


def test_a_fine_tuned_run_is_not_compared_on_the_shape_it_took_from_its_source(tmp_path):
    run = tmp_path / "run"
    a_run(run, d_model=32, n_heads=2, init_from="source")
    with_checkpoint(run)
    asked = sort_config(run, d_model=64, n_heads=4, init_from="source")
    assert api._requeue(run, asked) == RunDirPlan(str(run), resume=True)
    plan = api._requeue(run, sort_config(run, d_model=64, n_heads=4))  # not fine-tuning: the shape counts
    assert "task.d_model=64 (the run has 32); task.n_heads=4 (the run has 2)" in plan.refusal


def test_the_same_run_with_a_checkpoint_resumes_and_says_so(tmp_path, caplog):
    run = tmp_path / "run"
    cfg = a_run(run)
    with_checkpoint(run)
    with caplog.at_level("INFO", logger=LOGGER):
        assert api._requeue(run, cfg) == RunDirPlan(str(run), resume=True)
    assert (run / runs.CONFIG_FILE).is_file()
    assert caplog.messages == [f"{run} holds this run (same config): resuming it from its latest checkpoint"]


def test_the_same_run_without_a_checkpoint_starts_again_in_a_fresh_directory_and_says_so(tmp_path, caplog):
    run = tmp_path / "run"
    cfg = a_run(run)
    (run / "metrics.jsonl").write_text("{}\n")
    (run / "tokenizer").mkdir()  # the sort task's tokenizer directory
    (run / "checkpoints").mkdir()  # no complete checkpoint in it
    with caplog.at_level("INFO", logger=LOGGER):
        assert api._requeue(run, cfg) == RunDirPlan(str(run))
    assert not run.exists(), "what the failed start wrote is gone; the plan makes the directory again"
    assert caplog.messages == [f"{run} holds this run (same config) without a checkpoint: starting it again"]


@pytest.mark.parametrize(("mine", "named"), [(["notes.txt"], "notes.txt"), (["a", "b/", "c"], "a, b/, c"),
                                             (["a", "b/", "c", "d"], "a, b/, c ...")])
def test_the_same_run_without_a_checkpoint_is_refused_if_it_holds_the_users_files(tmp_path, mine, named):
    run = tmp_path / "run"
    cfg = a_run(run)
    for name in mine:
        (run / name.rstrip("/")).mkdir() if name.endswith("/") else (run / name).write_text("mine")
    plan = api._requeue(run, cfg)
    assert plan.refusal == (f"run directory {run} holds this run's config.json but no checkpoint, and {named}, which "
                            "tokformer did not write; starting the run again there would delete them: move them out "
                            "first, or choose another --run-dir")
    assert all((run / name.rstrip("/")).exists() for name in mine)


def tokenizers_in(*folders: str) -> set[str]:
    return {f"{folder}/{name}" for folder in folders for name in runs.TOKENIZER_FILES}


def tasks_part(owned: tuple[str, ...]) -> set[str]:
    """What of ``owned`` the task adds, after checking the engine's files lead it."""
    assert owned[: len(runs.ENGINE_FILES)] == runs.ENGINE_FILES
    return set(owned[len(runs.ENGINE_FILES):])


def test_a_run_of_a_task_no_longer_known_is_judged_by_the_new_tasks_files(tmp_path):
    run = tmp_path / "run"
    cfg = a_run(run)
    of_a_removed_task(run, cfg)
    assert tasks_part(api._owned(run, cfg)) == tokenizers_in("tokenizer"), "the sort task writes its vocabulary there"
    assert tasks_part(api._owned(run, resolve_config("lm", run_dir=str(run)))) == {
        *tokenizers_in("tokenizer"), "corpus/corpus.bin", "corpus/corpus.json", "shards.json"}


def test_the_task_files_of_a_run_come_from_its_own_config(tmp_path):
    run = tmp_path / "run"
    a_run(run)
    assert tasks_part(api._owned(run, resolve_config("lm", run_dir=str(run)))) == tokenizers_in("tokenizer")
    two = resolve_config("translate", run_dir=str(run), shared_vocab=False, share_embeddings=False)  # two vocabularies
    runs.save_config(run, two.to_dict())
    assert tasks_part(api._owned(run, sort_config(run))) == tokenizers_in("tokenizer_src", "tokenizer_tgt")
    of_a_removed_task(run, two)
    assert tasks_part(api._owned(run, two)) == tokenizers_in("tokenizer_src", "tokenizer_tgt")


# -- _prepare_run_dir: lock, recover, plan, make --------------------------------------------------------


def prepare(cfg: RunConfig, resume: bool = False, overwrite: bool = False) -> RunDirPlan:
    with contextlib.ExitStack() as held:
        return api._prepare_run_dir(cfg, local("cpu"), resume, overwrite, held)


def test_the_planned_directory_is_made_under_its_lock_and_a_refusal_raised(tmp_path):
    run = tmp_path / "a" / "run"
    with contextlib.ExitStack() as held:
        plan = api._prepare_run_dir(sort_config(run), local("cpu"), False, False, held)
        assert plan == RunDirPlan(str(run)) and run.is_dir()
        assert json.loads((tmp_path / "a" / ".run.lock").read_text())["command"] == "tokformer train"
    assert not (tmp_path / "a" / ".run.lock").exists(), "released with the stack"
    assert prepare(sort_config(run)).existed
    run.rmdir()
    run.write_text("x")
    with pytest.raises(ConfigError, match=re.escape(f"--run-dir {run} is a file")):
        prepare(sort_config(run))


def test_the_plan_is_made_of_the_config_and_the_flags_given(tmp_path):
    run = tmp_path / "run"
    a_run(run)
    assert prepare(sort_config(run, steps=3), resume=True) == RunDirPlan(str(run), resume=True)
    with pytest.raises(ConfigError, match="already exists with another config"):
        prepare(sort_config(run, steps=3))
    with_checkpoint(run)
    assert prepare(sort_config(run)) == RunDirPlan(str(run), resume=True), "the same run, requeued"
    plan = prepare(sort_config(run, steps=3), overwrite=True)
    assert plan.aside is not None and Path(plan.aside).is_dir() and run.is_dir() and not any(run.iterdir())


def test_a_directory_another_command_holds_is_refused_naming_it(tmp_path):
    run = tmp_path / "run"
    with lock.hold(run, "tokformer export"), pytest.raises(ConfigError, match=rf"^{re.escape(str(run))} is in use by "
                                                                              r"tokformer export \(pid \d+"):
        prepare(sort_config(run))
    assert not run.exists()


def test_the_default_directory_is_not_taken_for_the_users(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan = prepare(resolve_config("sort"))
    assert plan.path.startswith("runs/sort-") and Path(plan.path).is_dir() and plan.existed is False


# -- run_dir.remove: after a failed start ---------------------------------------------------------------


def test_a_failed_start_removes_the_run_directory_it_made(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    runs.remove(run, keep_folder=False)
    assert not run.exists()
    runs.remove(run, keep_folder=False)  # already gone: nothing to do


def test_a_failed_start_empties_the_users_folder_and_keeps_it(tmp_path):
    run, outside = tmp_path / "run", tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    (run / "checkpoints" / "deep").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    (run / "link").symlink_to(outside, target_is_directory=True)
    runs.remove(run, keep_folder=True)
    assert run.is_dir() and not any(run.iterdir())
    assert (outside / "keep.txt").read_text() == "mine", "a link is removed, never followed"
    runs.remove(tmp_path / "gone", keep_folder=True)  # a folder deleted meanwhile: nothing to do


def test_cleaning_up_after_a_failed_start_never_raises_over_the_failure(tmp_path, monkeypatch):
    """It runs while the run's own error propagates: an entry it cannot remove, or one gone meanwhile, must
    not replace that error with its own."""
    run = tmp_path / "run"
    (run / "checkpoints" / "deep").mkdir(parents=True)
    real_iterdir = Path.iterdir
    monkeypatch.setattr(Path, "iterdir", lambda self: [*real_iterdir(self), self / "gone.txt"])  # removed meanwhile

    def refused(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(os, "rmdir", refused)
    runs.remove(run, keep_folder=True)
    assert (run / "checkpoints").is_dir(), "what could not be removed stays; nothing was raised"
