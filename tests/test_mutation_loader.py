"""The one loader behind every inference command (``tokformer.store.loader``): where the model goes,
which weights a config may claim, which engine settings a folder evaluates with, and what a
:class:`Predictor` passes on. Written for the mutants its first mutation run left
(benchmarks/results/mutation.md, ``loader``)."""

from __future__ import annotations

import inspect
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from tiny import TINY, TRAIN

import tokformer
from tokformer.engine import train
from tokformer.errors import ConfigError, UsageError
from tokformer.runtime.config import TrainConfig
from tokformer.runtime.task import Task
from tokformer.store import loader
from tokformer.tasks.sort import SortTask

BIG = {**TINY["sort"], "d_model": 256}  # about 800,000 parameters: past check_against_weights' 1 MB slack


@pytest.fixture(scope="module")
def big_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train("sort", run_dir=str(tmp_path_factory.mktemp("runs") / "sort"), **BIG, **TRAIN).run_dir


@pytest.fixture
def accelerator(monkeypatch: pytest.MonkeyPatch) -> str:
    """A device name that selects the meta device: where a model is moved shows on a CPU-only machine."""
    monkeypatch.setattr(loader, "select_device",
                        lambda name: torch.device("meta" if name == "accelerator" else "cpu"))
    return "accelerator"


def on(model: torch.nn.Module) -> set[str]:
    return {p.device.type for p in model.parameters()}


def test_every_way_in_moves_the_model_to_the_device_asked_for(big_run, sort_folder, accelerator) -> None:
    assert on(loader.load_run(big_run, device=accelerator)[1]) == {"meta"}
    assert on(loader.load_model(big_run, device=accelerator)[1]) == {"meta"}
    assert on(loader.load_model(sort_folder, device=accelerator)[1]) == {"meta"}
    assert on(loader.load(big_run, device=accelerator).model) == {"meta"}
    assert on(loader.from_pretrained(sort_folder, device=accelerator)[1]) == {"meta"}
    assert on(loader.load_run(big_run, device=torch.device("meta"))[1]) == {"meta"}, "a device object as it is"
    assert on(loader.load_model(sort_folder)[1]) == {"cpu"}


def test_a_run_whose_weights_fit_its_config_loads_whatever_its_size(big_run) -> None:
    task, model = loader.load_run(big_run)
    assert sum(p.numel() for p in model.parameters()) > 2**19 and not model.training


def test_a_run_config_claiming_a_model_its_weights_cannot_hold_is_refused_naming_it(big_run, tmp_path) -> None:
    run = Path(shutil.copytree(big_run, tmp_path / "run"))
    config = json.loads((run / "config.json").read_text())
    config["task"]["n_layers"] = 64  # 64 blocks of width 256: about 50 million parameters, weights for one
    (run / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=rf"^{run / 'config.json'} describes a model of [\d,]+ parameters, but "
                                          r"its weights hold only [\d,]+ bytes"):
        loader.load_run(run)


def test_a_model_folder_evaluates_with_its_tasks_engine_defaults(sort_folder, big_run, monkeypatch) -> None:
    monkeypatch.setattr(SortTask, "train_defaults", {"batch_size": 7})
    assert loader.train_config(sort_folder).batch_size == 7 != TrainConfig().batch_size
    assert loader.train_config(big_run).batch_size == TRAIN.get("batch_size", BIG["batch_size"])


@pytest.mark.parametrize("option", ["model", "beam_size"])
def test_a_predictor_refuses_an_option_its_task_does_not_take_naming_what_it_takes(sort_folder, option) -> None:
    predictor = tokformer.load(sort_folder)
    with pytest.raises(UsageError, match=rf"^task 'sort' has no predict option '{option}'; it takes none$"):
        predictor(["3 1 2"], **{option: 1})


class Echo:
    """A task stand-in whose predict reports the options it got."""

    is_one_input = Task.is_one_input

    def predict(self, model, inputs, top_k: int = 5, **more):
        return [(x, top_k, more) for x in inputs]


def test_a_predictor_passes_options_on_and_any_to_a_task_that_takes_any() -> None:
    predictor = loader.Predictor(Echo(), torch.nn.Identity())
    assert predictor(("a",), top_k=2, temperature=0.5) == [("a", 2, {"temperature": 0.5})]
    assert predictor.predict(["b"]) == [("b", 5, {})]


class TopK:
    """A task stand-in with one option of its own and no catch-all."""

    is_one_input = Task.is_one_input

    def predict(self, model, inputs, top_k: int = 5):
        return [(x, top_k) for x in inputs]


def test_a_predictor_of_a_task_with_options_refuses_others_naming_them(monkeypatch) -> None:
    monkeypatch.setattr(loader, "name_of", lambda task: "topk")
    predictor = loader.Predictor(TopK(), torch.nn.Identity())
    assert predictor(["a"], top_k=1) == [("a", 1)]
    with pytest.raises(UsageError, match=r"^task 'topk' has no predict option 'temperature'; it takes top_k$"):
        predictor(["a"], temperature=0.5)


class Witness:
    """A task stand-in whose predict reports the model, each input and the option it was called with."""

    is_one_input = Task.is_one_input

    def predict(self, model, inputs, top_k: int = 5):
        return [(model, x, top_k) for x in inputs]


def test_a_single_input_gets_its_own_prediction_from_the_model_with_the_options() -> None:
    model = torch.nn.Identity()
    predictor = loader.Predictor(Witness(), model)
    assert predictor("ab", top_k=2) == (model, "ab", 2)
    assert predictor(Path("x.png")) == (model, Path("x.png"), 5)
    assert predictor(["ab", "c"]) == [(model, "ab", 5), (model, "c", 5)]


def test_a_count_is_a_whole_number_of_at_least_one_and_is_named_when_it_is_not() -> None:
    import numpy as np

    assert loader.positive_count("top_k", 1) == 1 and loader.positive_count("top_k", np.int64(3)) == 3
    for bad in (0, -1, True, 1.5, "2", None):
        message = rf"^top_k must be a whole number of at least 1, got {re.escape(repr(bad))}$"
        with pytest.raises(UsageError, match=message):
            loader.positive_count("top_k", bad)


def test_count_options_are_checked_each_and_none_passes_only_where_it_is_the_default() -> None:
    declared = {name: p for name, p in inspect.signature(Witness().predict).parameters.items()}
    loader.check_counts({"top_k": None}, {})  # a task taking **options says its defaults itself
    loader.check_counts({"batch_size": 4, "top_k": 2}, declared)
    for options in ({"top_k": 0}, {"batch_size": 8, "top_k": 0}, {"batch_size": None, "top_k": 0}):
        with pytest.raises(UsageError, match=r"^top_k must be"):
            loader.check_counts(options, {})  # batch_size comes first: a check that stopped there misses top_k
    with pytest.raises(UsageError, match=r"^top_k must be a whole number of at least 1, got None$"):
        loader.check_counts({"top_k": None}, declared)  # declared with a default of 5: None is no count
