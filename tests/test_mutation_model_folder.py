"""Model folders and the weights in them (tokformer/store/folder.py, weights.py), unit by unit: what a
state dict must match to load (keys, shapes, dtype families, finite values) and how a mismatch is
worded, which tensors are stored once, a weights file of another tool, and a model folder's bytes.
Written to kill the mutants that the tests through save_pretrained and checkpoints let live."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import tokformer
from tokformer.errors import CheckpointError, ConfigError
from tokformer.store import weights
from tokformer.store.folder import write_model_folder


class _Four(torch.nn.Module):
    """One tensor of each dtype family a state dict may not cross."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(2, 2))
        self.register_buffer("mask", torch.tensor([True, False]))
        self.register_buffer("index", torch.tensor([1, 2]))
        self.register_buffer("phase", torch.tensor([1 + 1j]))


def _fits(state: dict[str, torch.Tensor]) -> None:
    weights.check_fits(_Four(), state, "FILE", "CONFIG")


def test_a_state_of_other_widths_within_each_dtype_family_fits() -> None:
    _fits({"weight": torch.zeros(2, 2, dtype=torch.float16), "mask": torch.tensor([False, True]),
           "index": torch.tensor([3, 4], dtype=torch.int8), "phase": torch.tensor([2j], dtype=torch.complex128)})


@pytest.mark.parametrize(("key", "value", "named"), [
    ("weight", torch.zeros(2, 2, dtype=torch.int64), "weight int64 vs float32"),
    ("mask", torch.tensor([1, 0]), "mask int64 vs bool"),
    ("index", torch.tensor([True, False]), "index bool vs int64"),
    ("index", torch.tensor([1.0, 2.0]), "index float32 vs int64"),
    ("phase", torch.tensor([1.0]), "phase float32 vs complex64"),
])
def test_a_tensor_of_another_dtype_family_does_not_fit_naming_both(key: str, value: torch.Tensor, named: str) -> None:
    state = {**_Four().state_dict(), key: value}
    with pytest.raises(CheckpointError, match=rf"^FILE does not fit the model built from CONFIG \(dtype: {named}\)$"):
        _fits(state)


def test_every_kind_of_mismatch_is_named_and_long_lists_are_cut_at_three() -> None:
    model = torch.nn.ModuleDict({name: torch.nn.Linear(1, 1, bias=False) for name in "abcd"})
    state = {"a.weight": torch.zeros(1, 2), "x": torch.zeros(1), "y": torch.zeros(1), "z": torch.zeros(1),
             "w": torch.zeros(1)}  # b, c, d missing; four unexpected; a reshaped
    with pytest.raises(CheckpointError) as refused:
        weights.check_fits(model, state, "FILE", "CONFIG")
    assert str(refused.value) == ("FILE does not fit the model built from CONFIG (missing: b.weight, c.weight, "
                                  "d.weight; unexpected: w, x, y ...; shape: a.weight (1, 2) vs (1, 1))")


def test_weights_holding_nan_or_infinity_are_refused_naming_them() -> None:
    model = torch.nn.Linear(2, 1)
    state = {"weight": torch.tensor([[1.0, float("nan")]]), "bias": torch.tensor([float("inf")])}
    with pytest.raises(CheckpointError, match=r"^FILE holds NaN or infinite values in weight, bias: the weights"):
        weights.load_fitting(model, state, "FILE", "CONFIG")
    assert torch.isfinite(model.weight).all()  # nothing was loaded


def test_only_views_of_shared_memory_are_copied_to_be_saved() -> None:
    """Distinct tensors are stored as they are (a copy of each would double the memory a save needs)."""
    a, b = torch.randn(3, 3), torch.randn(3)
    unique, aliases = weights.dedupe_shared({"a": a, "b": b, "tied": a, "row": a[1]})
    assert unique["a"] is a and unique["b"] is b and aliases == {"tied": "a"}
    assert unique["row"] is not a[1] and torch.equal(unique["row"], a[1])
    assert unique["row"].untyped_storage().data_ptr() != a.untyped_storage().data_ptr()


def test_a_sharded_model_is_not_written_as_one_file(monkeypatch, tmp_path: Path) -> None:
    """is_dtensor looks the DTensor class up where torch keeps it once imported (tests/test_engine_fsdp.py
    shards a real model; here a stand-in DTensor class is enough)."""
    import sys
    import types

    class FakeDTensor(torch.Tensor):
        pass

    monkeypatch.setitem(sys.modules, "torch.distributed.tensor", types.SimpleNamespace(DTensor=FakeDTensor))
    assert weights.is_dtensor(torch.zeros(1).as_subclass(FakeDTensor)) and not weights.is_dtensor(torch.zeros(1))
    with pytest.raises(ConfigError, match="sharded over processes"):
        weights.save_model_state({"w": torch.zeros(1).as_subclass(FakeDTensor)}, tmp_path)


def test_a_weights_file_without_tokformers_metadata_reads(tmp_path: Path) -> None:
    """Another tool's model.safetensors (no aliases entry, no metadata at all) is a plain state dict."""
    save_file({"w": torch.ones(2)}, tmp_path / weights.WEIGHTS_FILE)
    assert list(weights.read_model_state(tmp_path)) == ["w"]


def test_a_damaged_weights_file_is_named(tmp_path: Path) -> None:
    (tmp_path / weights.WEIGHTS_FILE).write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}")
    with pytest.raises(CheckpointError, match=rf"^checkpoint file {tmp_path / weights.WEIGHTS_FILE} is damaged or "
                                              r"not a tokformer checkpoint \("):
        weights.read_model_state(tmp_path)


def test_a_model_folders_config_is_indented_json_with_a_final_newline(sort_folder: Path, tmp_path: Path) -> None:
    """The same model writes the same bytes (exports can be compared and diffed)."""
    text = (sort_folder / "config.json").read_text(encoding="utf-8")
    assert text == json.dumps(json.loads(text), indent=2) + "\n"
    task, model = tokformer.load_model(sort_folder)
    (tmp_path / "again").mkdir()
    write_model_folder(task, model, tmp_path / "again")
    assert (tmp_path / "again" / "config.json").read_bytes() == (sort_folder / "config.json").read_bytes()


def test_a_changed_tokenizer_names_every_tokenizer_folder_of_the_task(sort_folder: Path, monkeypatch) -> None:
    from tokformer.tasks.sort import SortTask

    monkeypatch.setattr(SortTask, "tokenizer_dirs", lambda self: ("tokenizer", "second"))
    expected = f"{sort_folder / 'tokenizer'}, {sort_folder / 'second'} is not the tokenizer"
    with pytest.raises(ConfigError, match=expected):
        tokformer.load_model(sort_folder)
