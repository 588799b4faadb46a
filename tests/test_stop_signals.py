"""SIGTERM (what ``timeout``, ``kill`` and schedulers send, often to the whole process group) stops every
command as Ctrl-C does: its cleanup runs, one line says so, and it exits 143.

Before, only ``train`` took SIGTERM that way. ``evaluate``, ``tokenizer train``, ``birds`` and the others
were killed where they stood, leaving their scratch folders and staging folders behind (193 MB per task
of ``birds``); and a training run whose DataLoader workers got the signal too ended in an internal error
before its stop checkpoint (docs/reliability.md, P2 and H87)."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_engine_resume import ENV, cli_args, wait_until_step
from tiny import TINY, TRAIN

import tokformer
from tokformer import atomic
from tokformer.cli import main
from tokformer.signals import held_back
from tokformer.store.steps import list_checkpoints

pytestmark = pytest.mark.usefixtures("one_thread")


class Unhandled(Exception):
    """What SIGTERM raises in this test process when no command has taken it over (the default action
    would end the test run itself)."""


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This process's temporary directory, empty, and a SIGTERM that no command took over raising
    :class:`Unhandled` rather than ending the test run."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))

    def unhandled(signum: int, frame: object) -> None:
        raise Unhandled

    previous = signal.signal(signal.SIGTERM, unhandled)
    yield folder
    signal.signal(signal.SIGTERM, previous)


def terminate_at(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> None:
    """``owner.name`` sends this process SIGTERM, then does its work: a stop landing there."""
    real = getattr(owner, name)

    def stopped_here(*args: object, **kwargs: object) -> object:
        os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, stopped_here)


def terminate_after(monkeypatch: pytest.MonkeyPatch, owner: object, name: str, call: int = 1) -> None:
    """The ``call``-th call of ``owner.name`` does its work, then sends this process SIGTERM: a stop landing
    just after it, before its caller has kept what it returned."""
    real, calls = getattr(owner, name), []

    def stopped_after(*args: object, **kwargs: object) -> object:
        made = real(*args, **kwargs)
        calls.append(made)
        if len(calls) == call:
            os.kill(os.getpid(), signal.SIGTERM)
        return made

    monkeypatch.setattr(owner, name, stopped_after)


def assert_stopped(result, line: str = "stopped by SIGTERM") -> None:
    assert result.exit_code == 143, result.output
    assert result.output.strip().splitlines()[-1].startswith(line)
    assert "Traceback" not in result.output and "internal error" not in result.output


def ours(folder: Path) -> list[Path]:
    """What is in ``folder``, torch's own compile cache aside (``torchinductor_USER``, kept by design)."""
    return [p for p in folder.iterdir() if not p.name.startswith("torchinductor_")]


def test_sigterm_stops_evaluate_and_removes_its_scratch_folder(tmp_path, scratch, monkeypatch) -> None:
    run = tokformer.train("sort", run_dir=str(tmp_path / "run"), **TINY["sort"], **TRAIN).run_dir
    handler = signal.getsignal(signal.SIGTERM)
    terminate_at(monkeypatch, tokformer.engine.api, "load_model")
    assert_stopped(CliRunner().invoke(main, ["evaluate", str(run), "-q"]))
    assert ours(scratch) == []  # tokformer-eval-* was left behind
    assert signal.getsignal(signal.SIGTERM) is handler  # the command gives the signal back


def test_sigterm_stops_tokenizer_training_and_removes_its_staging_folder_and_lock(tmp_path, scratch,
                                                                                 monkeypatch) -> None:
    from tokformer.tokenizers import commands

    (tmp_path / "a.txt").write_text("hello world, hello tokens " * 50, encoding="utf-8")
    terminate_at(monkeypatch, commands, "read_text_file")
    out = tmp_path / "out" / "tok"
    out.parent.mkdir()
    assert_stopped(CliRunner().invoke(main, ["tokenizer", "train", "--data", str(tmp_path / "a.txt"),
                                             "--vocab-size", "300", "-o", str(out), "-q"]))
    assert list(out.parent.iterdir()) == []  # .tok.tmp-*/ and .tok.lock were left behind


def test_sigterm_stops_an_export_removes_its_staging_folder_and_gives_the_handler_back(tmp_path, scratch,
                                                                                     monkeypatch) -> None:
    """``export`` set a SIGTERM handler of its own that it never put back: called in-process (the library's
    CLI runner, a notebook), every later SIGTERM in that process exited it."""
    from tokformer.interop import export

    run = tokformer.train("sort", run_dir=str(tmp_path / "run"), **TINY["sort"], **TRAIN).run_dir
    handler = signal.getsignal(signal.SIGTERM)
    terminate_at(monkeypatch, export, "write_model_folder")
    out = tmp_path / "out" / "model"
    assert_stopped(CliRunner().invoke(main, ["export", str(run), "-o", str(out), "-q"]))
    assert list(out.parent.iterdir()) == []  # .model.tmp-*/ and .model.lock
    assert signal.getsignal(signal.SIGTERM) is handler


def test_sigterm_stops_the_birds_sweep_between_runs_and_removes_its_image_caches(tmp_path, scratch,
                                                                                  monkeypatch) -> None:
    """A stop inside a training run saves it (the sweep's own message); one while a trained model is
    being saved went unhandled: the process died, its image caches and the model's temporary file stayed."""
    from tokformer.tasks.birds import experiment

    terminate_at(monkeypatch, experiment, "save_file")
    report = tmp_path / "report"
    assert_stopped(CliRunner().invoke(main, ["birds", "--quick", "--models", "pool-d1", "--seeds", "0", "-o",
                                             str(report), "-q"]))
    assert not [p for p in report.rglob(".*") if p.is_file()]  # models/.pool-d1-count.safetensors.*
    gc.collect()  # the caches are removed with their last reference
    assert ours(scratch) == []  # tokformer-birds-* of image chunks, 193 MB a task, were left behind


def test_a_run_that_does_not_ask_for_determinism_never_touches_torchs_setting(tmp_path, monkeypatch) -> None:
    """A stop that landed while torch imported sympy for the first time left a half-imported module, and
    restoring the setting after the stop then failed in it: ``internal error: AttributeError: module
    'sympy' has no attribute 'logic'`` instead of the stop (exit 1, not 130 or 143)."""
    import torch

    def touched(on: bool) -> None:
        raise AssertionError("torch.use_deterministic_algorithms called")

    monkeypatch.setattr(torch, "use_deterministic_algorithms", touched)
    run = tokformer.train("sort", run_dir=str(tmp_path / "run"), **TINY["sort"], **TRAIN)
    assert run.step == TRAIN["steps"]


@pytest.mark.slow  # a training process of its own, stopped mid-run (about 15 s)
def test_sigterm_to_the_process_group_of_a_run_with_data_workers_saves_and_exits_143(tmp_path) -> None:
    """``timeout`` and schedulers signal every process of the group: the DataLoader workers died of it and
    the run ended in ``internal error: RuntimeError: DataLoader worker (pid N) is killed by signal:
    Terminated`` (exit 1), losing the steps since its last checkpoint. Workers now leave stopping to the
    training process, which saves where it stopped."""
    run, log = tmp_path / "run", tmp_path / "run.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tokformer.cli", *cli_args(400, run), "--num-workers", "1"],
                                stdout=out, stderr=subprocess.STDOUT, env=ENV, start_new_session=True)
    try:
        wait_until_step(proc, run, 12)
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=120) == 143, log.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    output = log.read_text()
    assert "internal error" not in output and "Traceback" not in output
    stopped = int(output.split("interrupted at step ")[1].split(";")[0])
    assert stopped in list_checkpoints(run) and stopped > 10  # past the periodic checkpoint of step 10


@pytest.mark.parametrize(("call", "after"), [(1, None), (2, "old"), (3, "new")],
                         ids=["the staging folder", "the older's new name", "the folder the older is deleted from"])
def test_a_stop_the_moment_a_staged_folder_makes_a_folder_leaves_only_the_old_or_the_new_one(
        tmp_path, scratch, monkeypatch, call: int, after: str | None) -> None:
    """A handler runs between any two bytecodes: one landing between ``mkdtemp``'s ``mkdir`` and the
    assignment of its name left that folder behind (CI once found ``.shards.tmp-*`` after stopping
    ``data prepare lm``). ``after``: the folder ``out`` is left as (None: no folder), its siblings gone."""
    place = tmp_path / "place"
    out = place / "out"
    if call > 1:  # a replacement: mkdtemp makes the staging folder, the older's new name, the trash
        out.mkdir(parents=True)
        (out / "v").write_text("old")
    terminate_after(monkeypatch, atomic.tempfile, "mkdtemp", call)
    handler = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Unhandled), atomic.staged_folder(out, replace=True) as folder:
        (folder / "v").write_text("new")
    assert [p.name for p in place.iterdir()] == ([] if after is None else ["out"])
    assert after is None or (out / "v").read_text() == after
    assert signal.getsignal(signal.SIGTERM) is handler


def test_a_stop_the_moment_an_atomic_write_makes_its_temporary_leaves_no_file(tmp_path, scratch,
                                                                            monkeypatch) -> None:
    terminate_after(monkeypatch, atomic.tempfile, "mkstemp")
    with pytest.raises(Unhandled):
        atomic.write_text_atomic(tmp_path / "out.txt", "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmp"]  # .out.txt.*.txt was left behind


def test_a_stop_while_holding_back_installs_its_recorders_gives_every_handler_back(scratch, monkeypatch) -> None:
    """SIGTERM landing after SIGINT's recorder is installed and before SIGTERM's: the SIGTERM handler in
    place acts, and SIGINT's recorder must not outlive the block (it would swallow every later Ctrl-C)."""
    interrupt = signal.getsignal(signal.SIGINT)
    terminate_after(monkeypatch, signal, "signal")  # the first install: SIGINT's recorder
    with pytest.raises(Unhandled), held_back():
        pass
    assert signal.getsignal(signal.SIGINT) is interrupt
