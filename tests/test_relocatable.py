"""Runs travel: a run records its data paths as absolute paths, so it evaluates, resumes and
exports from any working directory; built-in dataset names stay names; a path that cannot be
found is named with the directory it was looked for in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokformer.engine import evaluate, train
from tokformer.errors import DataError
from tokformer.runtime.config import absolute_paths, resolve_config
from tokformer.tasks.numbers_de import english, german

TINY = {"vocab_size": 280, "d_model": 32, "n_heads": 2, "encoder_layers": 1, "decoder_layers": 1,
        "eval_fraction": 0.25, "steps": 2, "eval_every": 2, "batch_size": 8, "warmup_steps": 0}


def write_pairs(path: Path, n: int = 40) -> Path:
    path.write_text("".join(f"{english(i)}\t{german(i)}\n" for i in range(1, n + 1)), encoding="utf-8")
    return path


def test_existing_relative_paths_become_absolute_and_the_given_value_is_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "digits").mkdir()
    cfg = resolve_config("classify", data="digits", init_from="~/model")
    given = absolute_paths(cfg)
    assert cfg.task_config.data == str(tmp_path / "digits"), "an existing relative folder is not made absolute"
    assert cfg.task_config.data_root == str(tmp_path / "data"), "a path-only option is not made absolute"
    assert cfg.train.init_from == str(Path("~/model").expanduser()), "~ is not expanded"
    assert given == {"task.data": "digits", "task.data_root": "data", "train.init_from": "~/model"}
    again = resolve_config(json.loads(json.dumps(cfg.to_dict())))  # config.json, read back
    assert again.given == given and again.task_config.data == cfg.task_config.data


def test_builtin_names_and_missing_paths_stay_as_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "shapes").mkdir()  # a folder that happens to share the built-in's name: the task reads the built-in
    cfg = resolve_config("classify", data="shapes")
    assert absolute_paths(cfg) == {"task.data_root": "data"} and cfg.task_config.data == "shapes"
    graph = resolve_config("graph", data="nowhere")
    assert absolute_paths(graph) == {} and graph.task_config.data == "nowhere"


def test_a_comma_list_resolves_each_part_globs_included(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "books").mkdir()
    (tmp_path / "a.txt").write_text("x")
    cfg = resolve_config("lm", data="books, *.txt,stdlib")
    absolute_paths(cfg)
    assert cfg.task_config.data == f"{tmp_path / 'books'},{tmp_path / '*.txt'},stdlib"


def test_a_run_made_with_relative_data_evaluates_from_another_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "elsewhere").mkdir()
    write_pairs(tmp_path / "work" / "pairs.tsv")
    monkeypatch.chdir(tmp_path / "work")
    result = train("translate", data="pairs.tsv", run_dir="runs/tr", quiet=True, **TINY)
    saved = json.loads((tmp_path / "work" / "runs" / "tr" / "config.json").read_text())
    assert saved["task"]["data"] == str(tmp_path / "work" / "pairs.tsv")
    assert saved["given"] == {"task.data": "pairs.tsv"}
    monkeypatch.chdir(tmp_path / "elsewhere")
    evaluation = evaluate(tmp_path / "work" / result.run_dir, quiet=True)
    assert evaluation.baselines, "the baselines did not read the run's training split"
    assert set(evaluation.metrics) >= {"loss", "exact_match"}


def test_missing_relative_data_names_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError, match=rf"looked for {tmp_path}/digits: working directory {tmp_path}"):
        train("classify", data="digits", run_dir="runs/c", quiet=True, steps=1)
    assert not (tmp_path / "runs" / "c").exists()
