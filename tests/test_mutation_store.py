"""What tokformer's folders promise that their tests left unchecked (mutation testing,
benchmarks/results/mutation.md): how a path is described, what a model folder's version and tokenizer
checks refuse and how they name the files at fault, the size checks against weights and memory, a run
directory's listing in messages, and an aside copy's deletion."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from tiny import TINY, TRAIN
from torch import nn

import tokformer
from tokformer.engine import load_run, train
from tokformer.errors import CheckpointError, ConfigError
from tokformer.store import budget, run_dir
from tokformer.store.folder import check_free
from tokformer.store.source import MODEL, RUN, Source, describe, refuse_pickled_only


def edited(folder: Path, tmp_path: Path, **values: object) -> Path:
    """A copy of ``folder`` whose config.json has ``values`` set at its top level."""
    copy = shutil.copytree(folder, tmp_path / "copy")
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, **values}))
    return copy


# -- describing a path -----------------------------------------------------------------------


def test_a_task_section_is_an_object_or_a_bare_name_and_nothing_else() -> None:
    assert Source(Path("r"), RUN, {"task": "sort"}).task_section() == {"name": "sort"}
    assert Source(Path("r"), RUN, {"task": 3}).task_section() is None
    assert Source(Path("r"), MODEL, {"task": {"name": 3}}).task_name() is None
    assert Source(Path("r"), MODEL, {"task": {"name": "sort"}}).task_name() == "sort"


def test_only_a_config_with_task_and_train_sections_is_a_run(sort_folder: Path, tmp_path: Path) -> None:
    assert not run_dir.is_run(sort_folder)  # a model folder: format and task, no train
    assert run_dir.is_run(edited(sort_folder, tmp_path, train={}))


# -- a model folder's checks --------------------------------------------------------------------


@pytest.mark.parametrize("version", [2, True, "1"])
def test_a_format_version_this_tokformer_cannot_read_is_refused(sort_folder: Path, tmp_path: Path,
                                                                version: object) -> None:
    with pytest.raises(ConfigError, match=rf"format_version {version!r} is not one this tokformer reads"):
        tokformer.load_model(edited(sort_folder, tmp_path, format_version=version))


def test_an_edited_tokenizer_is_named_by_its_folder(sort_folder: Path, tmp_path: Path) -> None:
    copy = edited(sort_folder, tmp_path)
    (copy / "tokenizer" / "vocab.json").write_text("{}")
    with pytest.raises(ConfigError, match=rf"^{copy / 'tokenizer'} is not the tokenizer {copy / 'model.safetensors'}"):
        tokformer.load_model(copy)


def test_a_config_bigger_than_its_weights_is_refused_naming_the_config(sort_folder: Path, tmp_path: Path) -> None:
    copy = edited(sort_folder, tmp_path)
    config = json.loads((copy / "config.json").read_text())
    config["task"].update(d_model=1024, n_layers=8)
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=rf"^{copy / 'config.json'} describes a model of [0-9,]+ parameters"):
        tokformer.load_model(copy)


# -- run directories ----------------------------------------------------------------------------


def test_contents_lists_a_few_entries_and_counts_the_rest(tmp_path: Path) -> None:
    for name in ("b.txt", "c.txt", "d.txt"):
        (tmp_path / name).write_text("x")
    (tmp_path / "a").mkdir()
    assert run_dir.contents(tmp_path) == "a/, b.txt, c.txt (4 entries)"
    assert run_dir.contents(tmp_path, shown=4) == "a/, b.txt, c.txt, d.txt"


def test_discarding_an_aside_copy_that_is_already_gone_is_quiet(tmp_path: Path) -> None:
    run_dir.discard(tmp_path / "gone")  # the new run stands; a copy deleted by hand must not fail it


# -- sizes ---------------------------------------------------------------------------------------


def test_check_against_weights_allows_two_bytes_a_parameter_plus_slack(tmp_path: Path) -> None:
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"\0" * 1000)
    slack = 1000 * 1.01 + (1 << 20)  # a header's worth (1 MiB) and 1% over the file
    budget.check_against_weights(int(slack // 2), [weights], "c")
    with pytest.raises(ConfigError, match=r"^c describes a model of [0-9,]+ parameters, but its weights hold only 1,0"):
        budget.check_against_weights(int(slack // 2) + 1, [weights], "c")
    budget.check_against_weights(None, [weights], "c")  # size unknown: nothing to check


def test_a_model_is_sized_on_the_meta_device_without_building_it() -> None:
    devices = []

    def build() -> nn.Module:
        devices.append(torch.empty(1).device.type)
        return nn.Sequential(nn.Linear(10, 10), nn.BatchNorm1d(3))  # 110 + 6 parameters; buffers 3 + 3 + 1

    assert budget.planned_size(build) == 110 + 6 + 7 and devices == ["meta"]  # buffers count: they are loaded too
    assert budget.planned_size(lambda: None) is None


def test_a_builder_that_cannot_run_on_meta_leaves_the_size_unknown_and_an_overflow_is_refused(
        caplog: pytest.LogCaptureFixture) -> None:
    def reads_values() -> nn.Module:
        raise NotImplementedError("Cannot copy out of meta tensor; no data!")

    def overflows() -> nn.Module:
        raise RuntimeError("Storage size calculation overflowed with sizes=[4611686018427387904, 8]")

    with caplog.at_level(logging.DEBUG, logger=budget.__name__):
        assert budget.planned_size(reads_values) is None
    assert caplog.messages == ["cannot size the model on the meta device: Cannot copy out of meta tensor; no data!"]
    with pytest.raises(ConfigError, match=r"^the config asks for a tensor too large to allocate \(Storage size"):
        budget.planned_size(overflows)


@pytest.mark.parametrize(("meminfo", "expected"), [
    ("MemTotal:       16384 kB\nMemFree:  1 kB\nMemAvailable:    2048 kB\n", 2048 * 1024),  # kB to bytes
    ("MemTotal:       16384 kB\n", None),  # no such line (an old kernel)
    (None, None),  # no /proc (not Linux)
])
def test_available_memory_reads_memavailable_in_kilobytes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                          meminfo: str | None, expected: int | None) -> None:
    file = tmp_path / "meminfo"
    if meminfo is not None:
        file.write_text(meminfo)
    monkeypatch.setattr(budget, "Path", lambda path: file if path == "/proc/meminfo" else Path(path))
    assert budget.available_memory() == expected


def test_the_memory_limit_is_the_environments_else_what_is_available(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(budget, "available_memory", lambda: 12345)
    monkeypatch.setenv("TOKFORMER_MEMORY_LIMIT", "999")
    assert budget.memory_limit() == 999
    monkeypatch.setenv("TOKFORMER_MEMORY_LIMIT", "1GB")  # not a byte count: ignored
    assert budget.memory_limit() == 12345
    monkeypatch.delenv("TOKFORMER_MEMORY_LIMIT")
    assert budget.memory_limit() == 12345


def test_check_memory_refuses_only_what_cannot_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    budget.check_memory(100, 16, "x", limit=1600)  # exactly fits
    with pytest.raises(ConfigError, match=r"^x asks for a model of 101 parameters, about 0\.0 GiB, more than the 0\.0"):
        budget.check_memory(101, 16, "x", limit=1600)
    budget.check_memory(None, 16, "x", limit=1)  # size unknown
    monkeypatch.setattr(budget, "memory_limit", lambda: 1600)  # the default limit
    with pytest.raises(ConfigError):
        budget.check_memory(101, 16, "x")
    monkeypatch.setattr(budget, "memory_limit", lambda: None)  # unknown: nothing to check against
    budget.check_memory(10**12, 16, "x")


def test_every_tokenizer_directory_of_a_task_is_fingerprinted(tmp_path: Path) -> None:
    """A translate model with two vocabularies: the folder loads as saved, and an edit of the target's
    tokenizer (not the default ``tokenizer/`` directory, which it does not have) is refused."""
    options = {**TINY["translate"], "shared_vocab": False, "share_embeddings": False}
    task, model = load_run(train("translate", run_dir=str(tmp_path / "run"), **options, **TRAIN).run_dir)
    folder = tokformer.save_pretrained(task, model, tmp_path / "folder")
    tokformer.load_model(folder)
    vocab = next(p for p in (folder / "tokenizer_tgt").rglob("*") if p.is_file())
    vocab.write_bytes(vocab.read_bytes() + b" ")
    with pytest.raises(ConfigError, match="is not the tokenizer"):
        tokformer.load_model(folder)


def test_a_compiled_model_is_saved_under_the_models_own_keys(sort_folder: Path, tmp_path: Path) -> None:
    task, model = tokformer.load_model(sort_folder)
    saved = tokformer.save_pretrained(task, torch.compile(model), tmp_path / "compiled")  # compiles nothing yet
    _, loaded = tokformer.load_model(saved)
    assert loaded.state_dict().keys() == model.state_dict().keys()


def test_weights_that_do_not_fit_name_their_file_and_the_config_they_were_checked_against(sort_folder: Path,
                                                                                         tmp_path: Path) -> None:
    copy = edited(sort_folder, tmp_path)
    config = json.loads((copy / "config.json").read_text())
    config["task"]["d_model"] = 8
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=rf"^{copy / 'model.safetensors'} does not fit the model built from "
                                              rf"{copy / 'config.json'} and its tokenizer \(shape: "):
        tokformer.load_model(copy)


def test_an_output_folder_may_be_new_or_an_empty_directory_only(tmp_path: Path) -> None:
    check_free(tmp_path / "new")
    (tmp_path / "empty").mkdir()
    check_free(tmp_path / "empty")
    (tmp_path / "file").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    for taken in ("file", "full"):
        with pytest.raises(ConfigError, match="already exists and is not an empty directory"):
            check_free(tmp_path / taken)


def test_pickles_beside_safetensors_weights_are_not_refused(tmp_path: Path) -> None:
    torch.save({"w": torch.zeros(2)}, tmp_path / "pytorch_model.bin")
    (tmp_path / "model.safetensors").write_bytes(b"")
    refuse_pickled_only(tmp_path)  # the safetensors weights are what is read
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(ConfigError, match="is a pickled checkpoint"):
        refuse_pickled_only(tmp_path)


def test_a_foreign_source_has_no_task() -> None:
    assert Source(Path("f"), "hugging-face", {"model_type": "gpt2"}).task_name() is None


def test_a_lone_weights_file_is_described_by_its_own_path(tmp_path: Path) -> None:
    weights = tmp_path / "vit.safetensors"
    weights.write_bytes(b"")
    assert describe(weights) == Source(weights, "timm")


def test_a_folder_without_config_says_whether_it_has_weights(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"has no config\.json and no \.safetensors weights: it is not a run"):
        describe(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ConfigError, match=rf"^{tmp_path} has no config\.json: it is not a run directory"):
        describe(tmp_path)


def test_a_folder_whose_config_cannot_be_read_is_no_run(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{oops")
    assert not run_dir.is_run(tmp_path)


@pytest.mark.parametrize("stands", [False, True])
def test_of_several_aside_copies_the_newest_comes_back_and_the_rest_go(tmp_path: Path, stands: bool) -> None:
    """Three killed overwrites in a row: the newest copy is the run the user last had; the older ones go.
    If the new run stands (it saved a checkpoint), every copy goes."""
    run = tmp_path / "run"
    copies = [tmp_path / f".run{run_dir.ASIDE}20261205-0{i}0000-1" for i in range(3)]  # oldest first
    for i, copy in enumerate(copies):
        (copy / "checkpoints" / f"step-0000000{i + 1}").mkdir(parents=True)
        (copy / "checkpoints" / f"step-0000000{i + 1}" / "state.json").write_text("{}")
    if stands:
        shutil.copytree(copies[0], run)
    run_dir.recover(run)
    assert not any(copy.exists() for copy in copies)
    assert (run / "checkpoints" / ("step-00000001" if stands else "step-00000003")).is_dir()


def test_check_data_fits_refuses_only_what_exceeds_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(budget, "memory_limit", lambda: 1000)
    budget.check_data_fits(1000, "exactly the limit")
    with pytest.raises(ConfigError, match=r"^1001 things take about 0\.0 GiB, more than the 0\.0 GiB"):
        budget.check_data_fits(1001, "1001 things")
    monkeypatch.setattr(budget, "memory_limit", lambda: None)  # unknown: nothing to check against
    budget.check_data_fits(10**18, "anything")
