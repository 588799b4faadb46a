"""The tokenizer API: registry (decorator and entry points), save/load dispatch, padding helpers."""

from __future__ import annotations

import json
import sys
import textwrap
from typing import Any

import pytest
import torch
from torch import nn

from tokformer.tokenizers import (
    BPETokenizer,
    Tokenizer,
    TokenizerError,
    available_tokenizers,
    get_tokenizer_class,
    load_tokenizer,
    pad_features,
    pad_ids,
    register_tokenizer,
    registry,
)


@pytest.fixture(autouse=True)
def _restore_registry():
    """The registry as it was, with every built-in in it: one first imported during a test would register then,
    be dropped here, and never register again (its module stays imported), failing later tests that load it."""
    registry.import_builtin_tokenizers()
    saved = dict(registry._REGISTRY)
    yield
    registry._REGISTRY.clear()
    registry._REGISTRY.update(saved)


class Chars(Tokenizer):
    """A minimal tokenizer: one id per character code (mod 128)."""

    def __init__(self, lowercase: bool = False) -> None:
        self.lowercase = lowercase

    def batch(self, samples):
        return pad_ids([[ord(c) % 128 for c in (s.lower() if self.lowercase else s)] for s in samples])

    def build_embedder(self, d_model: int, *, dropout: float = 0.0) -> nn.Module:
        return nn.Identity()

    def get_config(self) -> dict[str, Any]:
        return {"lowercase": self.lowercase}


def test_bpe_is_registered_by_default():
    assert get_tokenizer_class("bpe") is BPETokenizer
    assert "bpe" in available_tokenizers()


def test_builtin_tokenizer_is_found_without_its_module_imported(monkeypatch):
    """``load_tokenizer`` on a fresh interpreter must find built-ins whose module nobody imported yet."""
    package = sys.modules["tokformer.tokenizers"]
    monkeypatch.setattr(package, "bpe", package.bpe)  # restored afterwards, like the entries below
    monkeypatch.delitem(registry._REGISTRY, "bpe")
    monkeypatch.delitem(sys.modules, "tokformer.tokenizers.bpe")
    found = get_tokenizer_class("bpe")
    assert found is not BPETokenizer  # a fresh import registered it
    assert found.__module__ == "tokformer.tokenizers.bpe" and issubclass(found, Tokenizer)


def test_decorator_registers_and_save_load_dispatches(tmp_path):
    register_tokenizer("chars")(Chars)
    Chars(lowercase=True).save(tmp_path)
    assert json.loads((tmp_path / "tokenizer_config.json").read_text()) == {
        "type": "chars",
        "config": {"lowercase": True},
    }
    loaded = load_tokenizer(tmp_path)
    assert isinstance(loaded, Chars) and loaded.lowercase
    assert loaded.batch(["AB"]).ids.tolist() == [[97, 98]]


class HalfSaved(Chars):
    """Its second file cannot be written: a full disk, a kill, after the config is already out."""

    def save_files(self, directory) -> None:
        (directory / "vocab.txt").write_text("abc")
        raise OSError(28, "No space left on device")


def test_a_save_into_a_new_folder_that_fails_half_way_leaves_no_folder(tmp_path):
    register_tokenizer("half")(HalfSaved)
    with pytest.raises(OSError, match="No space left"):
        HalfSaved().save(tmp_path / "tok" / "nested")
    assert [p.name for p in tmp_path.rglob("*")] == ["tok"]  # the missing parent, and nothing in it


def test_a_save_into_a_folder_holding_files_writes_beside_them(tmp_path):
    register_tokenizer("chars")(Chars)
    (tmp_path / "weights.bin").write_bytes(b"a model folder's")
    assert Chars(lowercase=True).save(tmp_path) == tmp_path
    assert (tmp_path / "weights.bin").read_bytes() == b"a model folder's"
    assert load_tokenizer(tmp_path).lowercase and sorted(p.name for p in tmp_path.iterdir()) == [
        "tokenizer_config.json", "weights.bin"]


def test_name_clash_and_non_tokenizer_are_rejected():
    register_tokenizer("chars")(Chars)
    with pytest.raises(ValueError, match="already taken"):
        register_tokenizer("chars")(type("Other", (Chars,), {}))
    with pytest.raises(TypeError):
        register_tokenizer("x")(dict)


def test_unknown_type_bad_config_and_missing_dir_are_clear_errors(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text('{"type": "nope", "config": {}}')
    with pytest.raises(TokenizerError, match="unknown tokenizer 'nope'"):
        load_tokenizer(tmp_path)
    register_tokenizer("chars")(Chars)
    (tmp_path / "tokenizer_config.json").write_text('{"type": "chars", "config": {"lowercas": true}}')
    with pytest.raises(TokenizerError, match="bad chars tokenizer config"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text("[1, 2")
    with pytest.raises(TokenizerError, match="corrupt tokenizer config"):
        load_tokenizer(tmp_path)
    with pytest.raises(TokenizerError, match="not a saved tokenizer"):
        load_tokenizer(tmp_path / "missing")
    with pytest.raises(TokenizerError, match="not registered"):
        type("Unregistered", (Chars,), {})().save(tmp_path / "unregistered")


def test_third_party_entry_point_is_usable_by_name(tmp_path, monkeypatch):
    """A package that only declares an entry point (no import, no decorator) is found by name."""
    (tmp_path / "plugin_tok_pkg.py").write_text(
        textwrap.dedent(
            """
            from torch import nn
            from tokformer.tokenizers import Tokenizer, pad_ids

            class Bytes(Tokenizer):
                def batch(self, samples):
                    return pad_ids([list(s.encode()) for s in samples])

                def build_embedder(self, d_model, *, dropout=0.0):
                    return nn.Identity()

                def get_config(self):
                    return {}
            """
        )
    )
    dist = tmp_path / "plugin_tok_pkg-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: plugin-tok-pkg\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[tokformer.tokenizers]\nplugin_bytes = plugin_tok_pkg:Bytes\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "plugin_bytes" in available_tokenizers()
    cls = get_tokenizer_class("plugin_bytes")
    assert cls.__module__ == "plugin_tok_pkg" and cls.type_name == "plugin_bytes"
    cls().save(tmp_path / "saved")
    assert load_tokenizer(tmp_path / "saved").batch(["hi"]).ids.tolist() == [[104, 105]]


def test_pad_ids_mask_polarity_positions_and_truncation():
    batch = pad_ids([[5, 6, 7], [8]], pad_id=1)
    assert batch.ids.tolist() == [[5, 6, 7], [8, 1, 1]]
    assert batch.mask.tolist() == [[True, True, True], [True, False, False]]
    assert batch.positions.tolist() == [[0, 1, 2], [0, 1, 2]]
    cut = pad_ids([[5, 6, 7], [8]], max_length=2, truncation=True, pad_to_max_length=True)
    assert cut.ids.tolist() == [[5, 6], [8, 0]]
    with pytest.raises(TokenizerError, match="max_length 2"):
        pad_ids([[5, 6, 7]], max_length=2)


def test_pad_features_zero_pads_features_and_positions():
    batch = pad_features([torch.ones(2, 3), torch.ones(1, 3)], [torch.ones(2, 4), torch.ones(1, 4)])
    assert batch.features.shape == (2, 2, 3) and batch.positions.shape == (2, 2, 4)
    assert batch.mask.tolist() == [[True, True], [True, False]]
    assert batch.features[1, 1].abs().sum() == 0 and batch.positions[1, 1].abs().sum() == 0
    assert pad_features([torch.ones(2, 3)]).positions is None
