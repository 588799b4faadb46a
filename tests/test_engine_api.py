"""The Python API says what the CLI says, and reports the same results resumed or not."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from tiny import TINY, TRAIN

from tokformer.engine import LOGGER, train
from tokformer.engine.api import speak

pytestmark = pytest.mark.usefixtures("one_thread")


def test_resuming_a_finished_run_reports_its_last_evaluation(tmp_path: Path) -> None:
    first = train("sort", run_dir=str(tmp_path / "run"), **TINY["sort"], **TRAIN)
    again = train("sort", run_dir=str(tmp_path / "run"), **TINY["sort"], **TRAIN)  # the same command: resumes
    assert first.metrics and again.metrics == first.metrics and again.step == first.step


def test_python_callers_see_the_info_lines_unless_they_set_up_logging(monkeypatch: pytest.MonkeyPatch) -> None:
    logger, root = logging.getLogger(LOGGER), logging.getLogger()
    monkeypatch.setattr(logger, "handlers", [])
    monkeypatch.setattr(root, "handlers", [])
    speak(quiet=False)
    assert logger.handlers and logger.level == logging.INFO  # a script without logging hears the run
    mine = logging.StreamHandler()
    monkeypatch.setattr(logger, "handlers", [])
    monkeypatch.setattr(root, "handlers", [mine])
    speak(quiet=False)
    assert logger.handlers == [] and root.handlers == [mine]  # a program with its own logging keeps it


def test_runs_started_in_the_same_second_get_their_own_default_directories(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("tokformer.engine.api.time.strftime", lambda fmt: "20261201-120000")
    first = train("sort", **TINY["sort"], **TRAIN)
    second = train("sort", **{**TINY["sort"], "seed": 1}, **TRAIN)  # another run, the same second
    assert (str(first.run_dir), str(second.run_dir)) == ("runs/sort-20261201-120000", "runs/sort-20261201-120000-2")
    assert (tmp_path / second.run_dir / "config.json").is_file()
