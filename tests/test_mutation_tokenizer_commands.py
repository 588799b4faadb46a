"""The tokenizer commands as library calls (tokenizers/commands.py), unit by unit: where a binary file
is caught, which --out folders a training may write, the training's defaults and options, and long
texts encoded chunk by chunk with a bar. Written to kill the mutants tests/test_tokenizer_cli.py let live."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tqdm import tqdm

from tokformer.tokenizers import commands
from tokformer.tokenizers.base import TokenizerError
from tokformer.tokenizers.bpe import BPETokenizer

TEXT = "the cat sat on the mat, and the dog sat on the log. " * 40


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


@pytest.fixture
def saved(tmp_path: Path, corpus: Path) -> Path:
    commands.train_tokenizer([corpus], 300, tmp_path / "tok", special_tokens=["<|endoftext|>"])
    return tmp_path / "tok"


def test_a_binary_file_is_named_with_its_first_nul_byte(tmp_path: Path) -> None:
    (tmp_path / "blob").write_bytes(b"a\0b\0c")
    with pytest.raises(TokenizerError, match=r"looks binary \(NUL byte at offset 1\)"):
        commands.read_text_file(tmp_path / "blob")


@pytest.mark.parametrize("config", [
    {"model_max_length": 1024},  # Hugging Face's tokenizer_config.json, beside its tokenizer.json
    {"type": "image", "config": {}},  # another tokformer tokenizer's
    "{oops",
])
def test_a_folder_with_a_tokenizers_file_names_but_no_saved_bpe_is_not_ours(tmp_path: Path, config) -> None:
    folder = tmp_path / "theirs"
    folder.mkdir()
    (folder / "tokenizer_config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    (folder / "tokenizer.json").write_text("{}")
    for overwrite in (False, True):
        with pytest.raises(TokenizerError, match="holds tokenizer.json, tokenizer_config.json, which is no tokenizer"):
            commands.check_out(folder, overwrite)


def test_a_refused_folder_lists_three_entries_and_counts_the_rest(tmp_path: Path) -> None:
    for n, expected in ((3, "holds a, b, c, which"), (4, "holds a, b, c (4 entries), which")):
        folder = tmp_path / str(n)
        folder.mkdir()
        for name in "abcd"[:n]:
            (folder / name).write_text("x")
        with pytest.raises(TokenizerError) as refused:
            commands.check_out(folder, overwrite=True)
        assert str(refused.value).startswith(f"{folder} {expected}")


def test_the_library_call_refuses_a_saved_tokenizer_unless_told_to_overwrite(corpus: Path, saved: Path) -> None:
    with pytest.raises(TokenizerError, match="already holds a tokenizer; pass --overwrite"):
        commands.train_tokenizer([corpus], 280, saved)
    assert commands.train_tokenizer([corpus], 280, saved, overwrite=True).vocab_size <= 280
    assert commands.load_text_tokenizer(saved).vocab_size <= 280


def test_training_defaults_to_the_gpt2_pattern_no_frequency_floor_and_no_bar(tmp_path: Path, corpus: Path,
                                                                            capfd: pytest.CaptureFixture) -> None:
    trained = commands.train_tokenizer([corpus], 300, tmp_path / "a")
    assert capfd.readouterr().err == ""
    reference = BPETokenizer.train([TEXT], 300, pattern="gpt2")
    assert trained.merges == reference.merges and trained.files() == reference.files()


def test_training_options_reach_the_trainer(tmp_path: Path, corpus: Path, capfd: pytest.CaptureFixture) -> None:
    trained = commands.train_tokenizer([corpus], 300, tmp_path / "a", min_frequency=100, show_progress=True)
    assert trained.merges == BPETokenizer.train([TEXT], 300, min_frequency=100).merges
    assert len(trained.merges) < len(BPETokenizer.train([TEXT], 300).merges)  # the floor stopped it early
    assert "merges" in capfd.readouterr().err


def test_special_tokens_in_text_are_plain_text_unless_allowed(saved: Path) -> None:
    tokenizer = commands.load_text_tokenizer(saved)
    eot = tokenizer.token_to_id("<|endoftext|>")
    assert eot not in commands.encode_text(saved, "<|endoftext|>")
    assert commands.encode_text(saved, "<|endoftext|>", allow_special=True) == [eot]


def test_a_long_text_is_encoded_whole_chunk_by_chunk_with_a_bar_of_characters(
        saved: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture) -> None:
    text = "the cat sat on the mat.\nthe dog sat on the log.\n" * 25  # cut at line ends only
    original = BPETokenizer.iter_encode
    monkeypatch.setattr(BPETokenizer, "iter_encode",
                        lambda self, text, **options: original(self, text, chunk_chars=64, **options))
    monkeypatch.setattr(commands, "PROGRESS_MIN_CHARS", len(text))
    tokenizer = commands.load_text_tokenizer(saved)
    assert len(list(tokenizer.iter_encode(text))) > 10  # the test means something: many chunks
    ids = commands.encode_text(saved, text, show_progress=True)
    assert ids == tokenizer.encode(text)
    err = capfd.readouterr().err
    scaled = tqdm.format_sizeof(len(text))  # 1.20k: SI-scaled
    assert f"{scaled}/{scaled}" in err and "char/s" in err
    commands.encode_text(saved, text[:-1], show_progress=True)  # one character short of the threshold
    commands.encode_text(saved, text)  # not asked for
    assert capfd.readouterr().err == ""
