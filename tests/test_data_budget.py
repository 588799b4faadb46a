"""Built-in data are sized before they are made: a few digits of ``--train-size`` (or ``--seq-len``,
``--image-size``, ``--per-class``) must not ask for terabytes and get the run killed, or the machine
thrashing, before it says why (docs/reliability.md H56)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tokformer.cli import main
from tokformer.store import budget

GIB = 2**30


@pytest.mark.parametrize(("task", "flags", "what"), [
    ("sort", ["--train-size", "1000000000000"], "1,000,000,001,000 sequences of 8 digits"),
    ("sort", ["--seq-len", "100000000"], "21,000 sequences of 100,000,000 digits"),
    ("classify", ["--train-size", "1000000000"], "1,000,001,000 built-in 32 x 32 images"),
    ("classify", ["--image-size", "60000", "--patch-size", "60000"], "9,000 built-in 60000 x 60000 images"),
    ("graph", ["--per-class", "1000000000"], "per_class = 1,000,000,000 built-in graphs of each class"),
    ("translate", ["--train-size", "1000000000"], "1,000,001,000 generated sentence pairs"),
])
def test_built_in_data_too_big_for_memory_are_refused_before_they_are_made(
        task: str, flags: list[str], what: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOKFORMER_MEMORY_LIMIT", str(8 * GIB))
    result = CliRunner().invoke(main, ["train", task, *flags, "--steps", "2", "--quiet", "--run-dir",
                                       str(tmp_path / "run")])
    assert result.exit_code == 2, result.output
    assert what in result.output and "GiB, more than the 8.0 GiB of memory available; ask for fewer" in result.output
    assert result.output.count("\n") == 1 and list(tmp_path.iterdir()) == []


def test_a_graph_config_asking_for_more_eigenvectors_than_a_model_may_be_wide_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["train", "graph", "--k", "100000000", "--quiet", "--run-dir",
                                       str(tmp_path / "run")])
    assert result.exit_code == 2 and "k must be in 1..65536, got 100000000" in result.output, result.output


@pytest.mark.parametrize("task", ["sort", "classify", "graph", "translate"])
def test_each_tasks_default_data_fit_in_a_gib(task: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The estimates refuse only what could not fit: every task's defaults pass a 1 GiB limit."""
    from tokformer.runtime.config import resolve_config
    from tokformer.runtime.registry import get_task

    asked: list[int] = []
    monkeypatch.setattr(budget, "memory_limit", lambda: GIB)
    real = budget.check_data_fits

    def recorded(need: int, what: str) -> None:
        asked.append(need)
        real(need, what)

    monkeypatch.setattr("tokformer.engine.check_data_fits", recorded)
    for module in ("sort", "image_data", "graph", "translate"):
        monkeypatch.setattr(f"tokformer.tasks.{module}.check_data_fits", recorded)
    cfg = resolve_config(task)
    instance = get_task(cfg.task)(cfg.task_config)
    if task == "graph":
        instance.data  # noqa: B018 (the graphs are made when first asked for)
    elif task == "translate":
        instance.pairs()
    else:
        instance.train_dataset()
    assert asked and all(0 < need < GIB for need in asked)


def test_running_out_of_memory_anyway_is_one_line_not_an_internal_error(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    def allocate(*args: object, **kwargs: object) -> None:
        raise MemoryError("Unable to allocate 745. GiB for an array with shape (100000000000,)")

    monkeypatch.setattr("tokformer.tasks.lm_shards.prepare_lm", allocate)
    result = CliRunner().invoke(main, ["data", "prepare", "lm", "--data", "stdlib", "--out", str(tmp_path / "s")])
    assert result.exit_code == 1 and result.output == (
        "Error: out of memory: Unable to allocate 745. GiB for an array with shape (100000000000,); ask for less "
        "(data, batch, model)\n"), result.output
