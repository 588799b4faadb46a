"""Checkpoints: no pickle, atomic directories, retention, RNG round trips."""

import json
import os
import random
import stat

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from tokformer import atomic
from tokformer.engine.rng import rng_state, set_rng_state
from tokformer.errors import ConfigError
from tokformer.store import checkpoints, steps, training_state, whole


def test_split_and_join_tensors_round_trip():
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.randn(3, 2))])
    opt.param_groups[0]["params"][0].grad = torch.ones(3, 2)
    opt.step()
    state = {"optimizer": opt.state_dict(), "step": 4, "nested": [torch.arange(3), {"x": 1.5}]}
    structure, tensors = training_state.split_tensors(state)
    json.dumps(structure)  # everything else is plain JSON
    back = training_state.join_tensors(json.loads(json.dumps(structure)), tensors)
    assert torch.equal(back["nested"][0], torch.arange(3))
    assert torch.equal(back["optimizer"]["state"]["0"]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])


def test_save_is_complete_and_leaves_no_temporaries(tmp_path):
    model = {"w": torch.randn(2, 2)}
    path = whole.save_checkpoint(tmp_path, 7, model, {"step": 7, "t": torch.ones(2)})
    assert sorted(p.name for p in path.iterdir()) == ["model.safetensors", "state.json", "state.safetensors"]
    assert not list((tmp_path / "checkpoints").glob(".tmp-*"))
    assert torch.equal(checkpoints.load_model_state(path)["w"], model["w"])
    assert training_state.load_training_state(path)["step"] == 7


def test_partial_save_is_invisible_and_cleaned(tmp_path):
    whole.save_checkpoint(tmp_path, 5, {"w": torch.zeros(1)}, {"step": 5})
    partial = tmp_path / "checkpoints" / ".tmp-step-00000010-abc"
    partial.mkdir()
    (partial / "model.safetensors").write_bytes(b"half")
    assert steps.list_checkpoints(tmp_path) == [5]
    assert checkpoints.find_checkpoint(tmp_path).name == "step-00000005"
    steps.remove_partial(tmp_path)
    assert not partial.exists()


def test_prune_keeps_last_k_and_best(tmp_path):
    for step in (10, 20, 30, 40, 50):
        whole.save_checkpoint(tmp_path, step, {"w": torch.zeros(1)}, {"step": step})
    steps.prune(tmp_path, keep_last=2, keep={20})
    assert steps.list_checkpoints(tmp_path) == [20, 40, 50]


def test_find_checkpoint_best_latest_and_step(tmp_path):
    with pytest.raises(ConfigError, match="no checkpoint"):
        checkpoints.find_checkpoint(tmp_path)
    for step in (1, 2):
        whole.save_checkpoint(tmp_path, step, {"w": torch.zeros(1)}, {"step": step})
    atomic.write_json_atomic(tmp_path / "best.json", {"step": 1})
    assert checkpoints.find_checkpoint(tmp_path, "best").name == "step-00000001"
    assert checkpoints.find_checkpoint(tmp_path, "latest").name == "step-00000002"
    assert checkpoints.find_checkpoint(tmp_path, "2").name == "step-00000002"
    with pytest.raises(ConfigError, match="not found"):
        checkpoints.find_checkpoint(tmp_path, "9")


def test_rng_states_survive_a_checkpoint(tmp_path):
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    whole.save_checkpoint(tmp_path, 1, {}, {"rng": rng_state()})
    expected = (random.random(), np.random.rand(), torch.rand(1))
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    set_rng_state(training_state.load_training_state(steps.step_dir(tmp_path, 1))["rng"])
    got = (random.random(), np.random.rand(), torch.rand(1))
    assert got[:2] == expected[:2] and torch.equal(got[2], expected[2])


def test_shared_tensors_are_saved_once_and_restored_under_every_name(tmp_path):
    embedding = torch.nn.Embedding(10, 4)
    head = torch.nn.Linear(4, 10, bias=False)
    head.weight = embedding.weight  # tied, as in a language model
    model = torch.nn.ModuleDict({"embedding": embedding, "head": head})
    path = whole.save_checkpoint(tmp_path, 1, model.state_dict(), {"step": 1})
    assert sorted(load_file(path / "model.safetensors")) == ["embedding.weight"]  # stored once
    restored = torch.nn.ModuleDict({"embedding": torch.nn.Embedding(10, 4), "head": torch.nn.Linear(4, 10, bias=False)})
    restored.load_state_dict(checkpoints.load_model_state(path))  # strict: both names present
    assert torch.equal(restored["head"].weight, embedding.weight)
    assert torch.equal(restored["embedding"].weight, embedding.weight)


class _ViewsOfOneWeight(torch.nn.Module):
    """A square weight and buffers that are other views of its memory, as a user's model may register them."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(3, 3))
        self.register_buffer("transposed", self.weight.detach().t())  # same start, shape and dtype: not a tie
        self.register_buffer("first_row", self.weight.detach()[0])  # a slice: safetensors refused to store it


def test_other_views_of_a_saved_tensor_are_stored_as_themselves_not_as_aliases(tmp_path):
    """Shared tensors were matched by start, shape and dtype: a transposed view was stored as an alias of the
    weight and read back untransposed, and loading it wrote the weight's transpose into the weight."""
    model = _ViewsOfOneWeight()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    path = whole.save_checkpoint(tmp_path, 1, model.state_dict(), {"step": 1})
    restored = _ViewsOfOneWeight()
    restored.load_state_dict(checkpoints.load_model_state(path))
    assert torch.equal(restored.weight, state["weight"]) and torch.equal(restored.transposed, state["weight"].t())
    assert torch.equal(restored.first_row, state["weight"][0])


def test_a_published_checkpoint_gets_the_permissions_a_plain_mkdir_and_write_would(tmp_path) -> None:
    previous = os.umask(0o022)
    try:
        tmp = steps.temp_step_dir(tmp_path, 7)
        save_file({"w": torch.zeros(2)}, str(tmp / "model.safetensors"))  # safetensors writes it owner-only
        final = steps.publish(tmp, tmp_path, 7)
    finally:
        os.umask(previous)
    assert stat.S_IMODE(final.stat().st_mode) == 0o755  # mkdtemp alone: 0o700
    assert stat.S_IMODE((final / "model.safetensors").stat().st_mode) == 0o644


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_an_atomic_text_write_gets_the_permissions_a_plain_write_would(tmp_path, umask) -> None:
    previous = os.umask(umask)
    try:
        atomic.write_text_atomic(tmp_path / "out.txt", "text\n")
        (tmp_path / "plain.txt").write_text("text\n")
    finally:
        os.umask(previous)
    mode = lambda name: stat.S_IMODE((tmp_path / name).stat().st_mode)
    assert mode("out.txt") == mode("plain.txt") == 0o666 & ~umask  # mkstemp alone would give 0o600


def test_atomic_text_write_keeps_the_old_file_when_the_write_fails(tmp_path, monkeypatch):
    target = tmp_path / "out.txt"
    atomic.write_text_atomic(target, "old\n")

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space"):
        atomic.write_text_atomic(target, "new\n")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]  # no temporary left behind
