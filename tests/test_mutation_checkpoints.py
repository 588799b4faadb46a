"""Checkpoints: choosing the best one, the tokenizers of several directories,
optimizer param groups through JSON, the wording of write failures and misfits (mutation testing,
benchmarks/results/mutation.md)."""

from __future__ import annotations

import errno
import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from tokformer import atomic
from tokformer.errors import CheckpointError, ConfigError, UsageError
from tokformer.store import checkpoints, steps, training_state, whole

pytestmark = pytest.mark.usefixtures("one_thread")

def save_steps(run: Path, *numbers: int) -> None:
    for step in numbers:
        whole.save_checkpoint(run, step, {"w": torch.full((2,), float(step))}, {"step": step})


def test_best_without_best_json_is_the_latest_checkpoint(tmp_path: Path) -> None:
    numbers = sorted(torch.randperm(50)[: int(torch.randint(3, 6, ()))].add(1).tolist())
    save_steps(tmp_path, *numbers)
    assert checkpoints.find_checkpoint(tmp_path, "best") == steps.step_dir(tmp_path, numbers[-1])


def test_best_json_naming_a_pruned_step_is_refused(tmp_path: Path) -> None:
    save_steps(tmp_path, 3, 6, 9)
    atomic.write_json_atomic(tmp_path / checkpoints.BEST_FILE, {"step": 4})
    with pytest.raises(CheckpointError, match="names step 4, which has no checkpoint"):
        checkpoints.find_checkpoint(tmp_path, "best")


@pytest.mark.parametrize("step", ['"6"', "true", "6.0"], ids=["string", "bool", "float"])
def test_best_json_whose_step_is_not_a_step_number_is_damaged(tmp_path: Path, step: str) -> None:
    save_steps(tmp_path, 3, 6)
    (tmp_path / checkpoints.BEST_FILE).write_text(f'{{"step": {step}}}')
    with pytest.raises(CheckpointError, match="not a step number"):
        checkpoints.best_step(tmp_path)


def test_load_weights_checks_every_tokenizer_directory_it_is_given(tmp_path: Path) -> None:
    """A task with two tokenizer directories (translate: source, target): editing the second is caught."""
    dirs = ("src_tokenizer", "tgt_tokenizer")
    for name in dirs:
        (tmp_path / name).mkdir()
        (tmp_path / name / "vocab.json").write_text(json.dumps({"a": 0, name: 1}))
    model = torch.nn.Linear(2, 2)
    state = {"step": 1, checkpoints.TOKENIZER_HASH: checkpoints.tokenizer_fingerprint(tmp_path, dirs)}
    path = whole.save_checkpoint(tmp_path, 1, model.state_dict(), state)
    checkpoints.load_weights(model, path, dirs)  # unchanged: loads
    (tmp_path / dirs[1] / "vocab.json").write_text(json.dumps({"a": 0, "b": 1}))
    with pytest.raises(CheckpointError, match="another tokenizer") as error:
        checkpoints.load_weights(model, path, dirs)
    assert f"another tokenizer than {tmp_path / dirs[0]}, {tmp_path / dirs[1]} (" in str(error.value), error.value


def test_a_checkpoint_of_another_model_names_itself_and_what_to_check(tmp_path: Path) -> None:
    path = whole.save_checkpoint(tmp_path, 1, torch.nn.Linear(3, 2).state_dict(), {"step": 1})
    with pytest.raises(CheckpointError) as error:
        checkpoints.load_weights(torch.nn.Linear(2, 2), path)
    assert str(error.value).startswith(f"checkpoint {path} does not fit the model built from "
                                       "the run's config and tokenizer"), str(error.value)


def test_a_failed_write_says_why_in_words_and_that_earlier_checkpoints_are_intact(tmp_path: Path) -> None:
    error = steps.write_failed(tmp_path, 7, OSError(errno.ENOSPC, "No space left on device"))
    assert isinstance(error, CheckpointError)
    assert str(error).endswith(": No space left on device; earlier checkpoints are intact"), str(error)
    assert "[Errno" not in str(error)


def test_optimizer_param_groups_come_back_from_json_as_the_optimizer_gave_them() -> None:
    params = [torch.nn.Parameter(torch.randn(2)) for _ in range(3)]
    optimizer = torch.optim.AdamW([{"params": params[:2]}, {"params": params[2:], "lr": 0.1}],
                                  betas=(float(torch.rand(())) * 0.5 + 0.4, 0.999))
    groups = optimizer.state_dict()["param_groups"]
    back = training_state.param_groups_from_json(json.loads(json.dumps(groups)))
    assert back == groups, "betas must be a tuple again and params the list of indices they were"



def test_a_whole_checkpoint_reads_back_with_its_path_and_an_index_keyed_optimizer_state(tmp_path: Path) -> None:
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(3, 2)).sum().backward()
    optimizer.step()
    path = whole.save_checkpoint(tmp_path, 3, model.state_dict(), {"step": 3, "optimizer": optimizer.state_dict()})
    saved = checkpoints.read_checkpoint(path)
    assert saved.path == path and saved.by_name is False
    assert set(saved.optimizer["state"]) == {0, 1}, "a whole checkpoint's optimizer state is keyed by index"


def test_a_damaged_optimizer_state_is_a_checkpoint_error_naming_state_json(tmp_path: Path) -> None:
    path = whole.save_checkpoint(tmp_path, 3, {"w": torch.zeros(2)},
                                 {"step": 3, "optimizer": {"state": {"not an index": {}}, "param_groups": []}})
    with pytest.raises(CheckpointError, match=re.escape(str(path / "state.json"))):
        checkpoints.read_checkpoint(path)


def test_a_checkpoint_is_built_inside_the_runs_checkpoints_folder_even_before_the_run_exists(tmp_path: Path) -> None:
    run = tmp_path / "not" / "yet" / "a" / "run"
    step = int(torch.randint(1, 10**6, ()))
    tmp = steps.temp_step_dir(run, step)
    assert tmp.parent == run / steps.CHECKPOINTS, "a temporary checkpoint must sit beside the final ones"
    assert tmp.name.startswith(f".tmp-{steps.step_dir(run, step).name}-"), tmp.name
    assert steps.list_checkpoints(run) == []  # invisible until published
    steps.remove_partial(run)
    assert not tmp.exists(), "remove_partial finds the leftovers of an interrupted save"


def test_remove_partial_never_fails_on_a_stray_file(tmp_path: Path) -> None:
    save_steps(tmp_path, 2)
    stray = tmp_path / steps.CHECKPOINTS / ".tmp-notes"
    stray.write_text("not a directory")
    leftover = steps.temp_step_dir(tmp_path, 4)
    steps.remove_partial(tmp_path)
    assert not leftover.exists() and steps.list_checkpoints(tmp_path) == [2]


def test_tensors_are_keyed_by_their_path_in_the_state() -> None:
    """state.safetensors names each tensor by where it sits in state.json: ``optimizer.state.0.exp_avg``."""
    a, b = torch.randn(2), torch.randn(3)
    structure, tensors = training_state.split_tensors({"optimizer": {"state": {0: {"exp_avg": a}}}, "rng": [b]})
    assert structure == {"optimizer": {"state": {"0": {"exp_avg": {"__tensor__": "optimizer.state.0.exp_avg"}}}},
                         "rng": [{"__tensor__": "rng.0"}]}
    assert set(tensors) == {"optimizer.state.0.exp_avg", "rng.0"}


def documented_fingerprint(run: Path, dirs: tuple[str, ...]) -> str:
    """The format runs already on disk were fingerprinted with (so they still load): SHA-256 over each file's
    relative name, NUL, bytes, NUL, sorted; with several directories each is preceded by its name, "/", NUL."""
    digest = hashlib.sha256()
    for name in dirs:
        if len(dirs) > 1:
            digest.update(name.encode() + b"/\0")
        for file in sorted(p for p in (run / name).rglob("*") if p.is_file()):
            digest.update(file.relative_to(run / name).as_posix().encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


@pytest.mark.parametrize("dirs", [("tokenizer",), ("src_tokenizer", "tgt_tokenizer")], ids=["one", "two"])
def test_tokenizer_fingerprint_keeps_the_format_saved_runs_were_made_with(tmp_path: Path,
                                                                           dirs: tuple[str, ...]) -> None:
    for name in dirs:
        for i in range(int(torch.randint(1, 4, ()))):
            (tmp_path / name / f"sub{i % 2}").mkdir(parents=True, exist_ok=True)
            content = bytes(torch.randint(0, 256, (20,)).tolist())
            (tmp_path / name / f"sub{i % 2}" / f"file{i}.json").write_bytes(content)
    assert checkpoints.tokenizer_fingerprint(tmp_path, dirs) == documented_fingerprint(tmp_path, dirs)


def test_moving_a_tokenizer_file_to_the_other_directory_changes_the_fingerprint(tmp_path: Path) -> None:
    dirs = ("src_tokenizer", "tgt_tokenizer")
    for name in dirs:
        (tmp_path / name).mkdir()
    (tmp_path / dirs[0] / "merges.txt").write_text("a b\n")
    before = checkpoints.tokenizer_fingerprint(tmp_path, dirs)
    (tmp_path / dirs[0] / "merges.txt").rename(tmp_path / dirs[1] / "merges.txt")
    assert checkpoints.tokenizer_fingerprint(tmp_path, dirs) != before


def test_split_tensors_copies_by_default_and_keeps_the_tensors_themselves_when_asked() -> None:
    base = torch.randn(3, 4)
    state = {"transposed": base.t(), "row": base[1]}  # a non-contiguous tensor and a view sharing its storage
    _, copies = training_state.split_tensors(state)
    assert all(t.is_contiguous() and t.data_ptr() != base.data_ptr() for t in copies.values())
    assert torch.equal(copies["transposed"], base.t()) and torch.equal(copies["row"], base[1])
    _, kept = training_state.split_tensors(state, copy=False)
    assert kept["transposed"] is state["transposed"] and kept["row"] is state["row"]


def test_training_state_with_views_and_non_contiguous_tensors_round_trips(tmp_path: Path) -> None:
    base = torch.randn(3, 4)
    state = {"step": 5, "transposed": base.t(), "rows": [base[0], base[2]]}
    training_state.save_training_state(state, tmp_path)
    back = training_state.load_training_state(tmp_path)
    assert back["step"] == 5 and torch.equal(back["transposed"], base.t())
    assert all(torch.equal(a, b) for a, b in zip(back["rows"], state["rows"], strict=True))


def test_a_checkpoint_selector_is_a_string_or_a_whole_step_and_nothing_else() -> None:
    """`checkpoint=20` from Python is step "20"; a bool (an int to Python) or None is no selector."""
    assert checkpoints.checkpoint_selector("best") == "best"
    assert checkpoints.checkpoint_selector(20) == checkpoints.checkpoint_selector(np.int64(20)) == "20"
    for bad in (True, None, 2.0):
        with pytest.raises(UsageError, match=rf"got {bad!r} \({type(bad).__name__}\)"):
            checkpoints.checkpoint_selector(bad)


def test_a_run_without_checkpoints_names_the_newest_copy_an_overwrite_set_aside(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(ConfigError) as plain:
        checkpoints.find_checkpoint(run)
    assert str(plain.value) == f"no checkpoint in {run / 'checkpoints'}; has this run saved one yet?"
    *older, newer = (tmp_path / f".run.replaced-20261205-10000{i}-1" for i in (1, 2, 3))  # three: [1] is not [-1]
    for aside in (*older, newer):
        aside.mkdir()
    with pytest.raises(ConfigError) as aside:
        checkpoints.find_checkpoint(run)
    assert str(aside.value) == (
        f"no checkpoint in {run / 'checkpoints'}: a `tokformer train --overwrite` of it has not saved its first one "
        f"(it is running, or was stopped); the run it replaces is kept as {newer}, and the next `tokformer train` "
        f"of {run} puts it back if the new one never saved a checkpoint")
