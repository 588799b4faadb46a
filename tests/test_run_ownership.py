"""What tokformer owns in a run directory: everything a run of any task writes, nothing the user put there.

``--overwrite``, and a requeued run that died before its first checkpoint, delete a whole run
directory; what they may delete is listed (``tokformer.store.run_dir.ENGINE_FILES``, each task's
``run_files`` and tokenizer folders), and everything else, at any depth, is the user's
(docs/reliability.md H33, H52).
"""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_vqa_task import TINY as TINY_VQA
from tiny import TINY, TRAIN

from tokformer import files
from tokformer.cli import main
from tokformer.engine import api, train
from tokformer.runtime.config import resolve_config
from tokformer.store import run_dir as runs
from tokformer.store import steps

SORT = [f"--{k.replace('_', '-')}={v}" for k, v in TINY["sort"].items()] + [
    "--steps", "2", "--eval-every", "2", "--warmup-steps", "1", "--quiet"]
MINE = ("plots/my_analysis/notes.md", "tokenizer/my_notes.txt", "checkpoints/README")


@pytest.mark.parametrize("task", [*sorted(TINY), "vqa"])
def test_every_file_a_run_of_each_task_writes_is_tokformers(task: str, tmp_path: Path) -> None:
    """Else ``--overwrite`` would refuse every run of that task, naming a file tokformer wrote."""
    run = Path(train(task, run_dir=str(tmp_path / "run"), **(TINY_VQA if task == "vqa" else TINY[task]),
                     **TRAIN).run_dir)
    assert steps.list_checkpoints(run) and (run / "plots").is_dir()
    owned = api._owned(run, resolve_config(runs.saved_config(run)))
    assert files.foreign_entries(run, owned) == []


def put_mine(run: Path) -> None:
    for name in MINE:
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text("mine")


def test_overwrite_refuses_a_run_holding_the_users_files_inside_its_own_folders(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert CliRunner().invoke(main, ["train", "sort", "--run-dir", str(run), *SORT]).exit_code == 0
    put_mine(run)
    result = CliRunner().invoke(main, ["train", "sort", "--run-dir", str(run), "--overwrite", *SORT])
    assert result.exit_code == 2 and "--overwrite would delete checkpoints/README, plots/my_analysis/, " \
        "tokenizer/my_notes.txt in" in result.output, result.output
    assert all((run / name).read_text() == "mine" for name in MINE) and steps.list_checkpoints(run) == [2]


def test_rerunning_a_run_that_died_before_its_checkpoint_keeps_the_users_files_inside_it(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert CliRunner().invoke(main, ["train", "sort", "--run-dir", str(run), *SORT]).exit_code == 0
    shutil.rmtree(run / "checkpoints")  # as if killed before its first checkpoint
    (run / "best.json").unlink()
    put_mine(run)
    result = CliRunner().invoke(main, ["train", "sort", "--run-dir", str(run), *SORT])
    assert result.exit_code == 2 and "holds this run's config.json but no checkpoint, and checkpoints/README, " \
        "plots/my_analysis/, tokenizer/my_notes.txt, which tokformer did not write" in result.output, result.output
    assert all((run / name).read_text() == "mine" for name in MINE)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_before_the_first_checkpoint_gives_the_replaced_run_back_and_the_lock_free(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signum: int) -> None:
    """Ctrl-C or a scheduler's SIGTERM while a new run sets up (a tokenizer to train, a corpus to pack)."""
    from tokformer.tasks.sort import SortTask

    run = Path(train("sort", run_dir=str(tmp_path / "run"), **TINY["sort"], **TRAIN).run_dir)
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    monkeypatch.setattr(SortTask, "setup", lambda self, run_dir, dist: signal.raise_signal(signum))
    handler = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt) as stopped:
        train("sort", run_dir=str(run), overwrite=True, **TINY["sort"], **TRAIN)
    assert getattr(stopped.value, "signum", signal.SIGINT) == signum  # the CLI exits 128 + it
    assert {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no set-aside copy, no lock file
    assert signal.getsignal(signal.SIGTERM) is handler  # the setup's handler is gone with it


def test_a_signal_before_the_first_checkpoint_of_a_new_run_leaves_no_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tokformer.tasks.sort import SortTask

    monkeypatch.setattr(SortTask, "setup", lambda self, run_dir, dist: signal.raise_signal(signal.SIGTERM))
    with pytest.raises(KeyboardInterrupt):
        train("sort", run_dir=str(tmp_path / "run"), **TINY["sort"], **TRAIN)
    assert list(tmp_path.iterdir()) == []


def test_resume_of_a_folder_holding_a_config_file_of_the_users_writes_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "config.json").write_text('{"task": {"name": "sort"}, "train": {"steps": 2}}')
    (folder / "mydata.txt").write_text("mine")
    result = CliRunner().invoke(main, ["train", "--resume", str(folder), "--quiet"])
    assert result.exit_code == 2 and "it has no checkpoint, and its config.json is no run's" in result.output
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "mydata.txt"]
    assert (folder / "config.json").read_text() == '{"task": {"name": "sort"}, "train": {"steps": 2}}'
