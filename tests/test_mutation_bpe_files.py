"""BPE files as Hugging Face writes and reads them, and the ones we refuse (mutation testing,
benchmarks/results/mutation.md): the document we write is HF's own, every unsupported option is named,
every id and merge entry is checked, and files are UTF-8 whatever the locale."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from ascii_locale import run_under_ascii_locale
from hf_bpe import hf, train_hf

from tokformer.tokenizers import BPETokenizer, TokenizerError

SAMPLE = "Grüße, 你好"
TEXTS = ["the cat sat on the mat. Grüße, 你好!\n", "a dog and a cat\n"] * 3


def hf_document(tmp_path: Path, pattern: str) -> dict:
    """A tokenizer.json that HF trained and wrote (with the byte-level decoder a GPT-2 file has)."""
    reference = train_hf(TEXTS, 300, pattern, 0, ["<s>", "<pad>"])
    reference.decoder = hf.decoders.ByteLevel()
    reference.save(str(tmp_path / "hf.json"))
    return json.loads((tmp_path / "hf.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("pattern", ["gpt2", "cl100k"])
def test_the_tokenizer_json_we_write_is_the_one_hf_writes(tmp_path: Path, pattern: str) -> None:
    expected = hf_document(tmp_path, pattern)
    BPETokenizer.from_hf_json(tmp_path / "hf.json").save_hf_json(tmp_path / "ours.json")
    ours = json.loads((tmp_path / "ours.json").read_text(encoding="utf-8"))
    # HF writes its decoder's add_prefix_space as true whatever it was given; decoding does not read it.
    assert ours == expected | {"decoder": expected["decoder"] | {"add_prefix_space": False}}
    assert list(ours["model"]["vocab"]) == list(expected["model"]["vocab"])  # in id order, as HF lists it


def test_vocab_merges_files_have_the_gpt2_names_and_load_in_hf(tmp_path: Path) -> None:
    tokenizer = BPETokenizer.train(TEXTS, 300, special_tokens=["<s>"])
    vocab, merges = tokenizer.save_vocab_merges(tmp_path)
    assert (vocab, merges) == (tmp_path / "vocab.json", tmp_path / "merges.txt")
    assert sorted(os.listdir(tmp_path)) == ["merges.txt", "vocab.json"]
    assert list(json.loads(vocab.read_text(encoding="utf-8")).values()) == list(range(tokenizer.vocab_size))
    reference = hf.Tokenizer(hf.models.BPE.from_file(str(vocab), str(merges)))
    reference.pre_tokenizer = hf.pre_tokenizers.ByteLevel(add_prefix_space=False)
    text = "the cat sat on a dog. Grüße"
    assert reference.encode(text).ids == tokenizer.encode(text)


def test_files_are_utf8_under_an_ascii_locale(tmp_path: Path) -> None:
    """Windows and C-locale machines default to another encoding; a tokenizer's files must not. Files written
    here are read there, under an ASCII locale, and what that writes is read back here."""
    tokenizer = BPETokenizer.train(TEXTS, 300)
    here, there = tmp_path / "here", tmp_path / "there"
    tokenizer.save_hf_json(tmp_path / "tokenizer.json")
    tokenizer.save_vocab_merges(here)
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from tokformer.tokenizers import BPETokenizer
        root = Path({str(tmp_path)!r})
        loaded = BPETokenizer.from_hf_json(root / "tokenizer.json")
        gpt2 = BPETokenizer.from_vocab_merges(root / "here" / "vocab.json", root / "here" / "merges.txt")
        loaded.save_hf_json(root / "again.json")
        gpt2.save_vocab_merges(root / "there")
        sys.stdout.write(repr([loaded.encode({SAMPLE!a}), gpt2.encode({SAMPLE!a})]))
        """
    )
    run = run_under_ascii_locale(script)
    assert run.returncode == 0, run.stderr[-2000:]
    expected = tokenizer.encode(SAMPLE)
    assert run.stdout == repr([expected, expected])
    assert BPETokenizer.from_hf_json(tmp_path / "again.json").encode(SAMPLE) == expected
    assert BPETokenizer.from_vocab_merges(there / "vocab.json", there / "merges.txt").encode(SAMPLE) == expected
    for path in [tmp_path / "again.json", there / "vocab.json", there / "merges.txt"]:
        assert "Ġ" in path.read_bytes().decode("utf-8")  # UTF-8 and readable: tokens as themselves, not \u0120


# ----------------------------------------------------------------- what we refuse, and say why


@pytest.fixture
def document(tmp_path: Path) -> dict:
    BPETokenizer.train(TEXTS, 300, special_tokens=["<s>"], pattern="cl100k").save_hf_json(tmp_path / "base.json")
    return json.loads((tmp_path / "base.json").read_text(encoding="utf-8"))


def read(tmp_path: Path, document: dict):
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return BPETokenizer.from_hf_json(path)


def gpt2_level(**options) -> dict:
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True} | options


def split_then(byte_level: dict, **split) -> dict:
    """Split(regex) then ``byte_level``; a ``split`` option set to None is left out."""
    step = {"type": "Split", "pattern": {"Regex": r"\w+|\s+"}, "behavior": "Isolated", "invert": False} | split
    step = {key: value for key, value in step.items() if value is not None}
    return {"type": "Sequence", "pretokenizers": [step, byte_level]}


ACCEPTED = {
    "ByteLevel without use_regex (HF's default: true)": (gpt2_level(), "gpt2"),
    "ByteLevel with use_regex": (gpt2_level(use_regex=True), "gpt2"),
    "Split then ByteLevel(use_regex=false)": (split_then(gpt2_level(use_regex=False)), r"\w+|\s+"),
}
REFUSED = {
    "ByteLevel with a prefix space": gpt2_level(add_prefix_space=True),
    "ByteLevel alone without its regex": gpt2_level(use_regex=False),
    "an inverted Split": split_then(gpt2_level(use_regex=False), invert=True),
    "a Split by string": split_then(gpt2_level(use_regex=False), pattern={"String": " "}),
    "a Split without a pattern": split_then(gpt2_level(use_regex=False), pattern=None),
    "a second ByteLevel that splits again (use_regex defaults to true)": split_then(gpt2_level()),
    "a second ByteLevel with a prefix space": split_then(gpt2_level(use_regex=False, add_prefix_space=True)),
    "a Split that keeps the delimiters apart": split_then(gpt2_level(use_regex=False), behavior="Removed"),
    "a Split, then ByteLevel, then another step": {
        "type": "Sequence",
        "pretokenizers": [*split_then(gpt2_level(use_regex=False))["pretokenizers"], {"type": "Digits"}],
    },
    "two steps but not a Sequence": split_then(gpt2_level(use_regex=False)) | {"type": "Other"},
}


@pytest.mark.parametrize("name", ACCEPTED)
def test_pre_tokenizers_we_read(tmp_path: Path, document: dict, name: str) -> None:
    pre_tokenizer, pattern = ACCEPTED[name]
    expected = BPETokenizer(dict(read(tmp_path, document).vocab), [], pattern=pattern).pattern
    assert read(tmp_path, document | {"pre_tokenizer": pre_tokenizer}).pattern == expected


@pytest.mark.parametrize("name", REFUSED)
def test_pre_tokenizers_we_refuse_by_name_and_file(tmp_path: Path, document: dict, name: str) -> None:
    with pytest.raises(TokenizerError, match=r"tokenizer\.json: unsupported pre_tokenizer"):
        read(tmp_path, document | {"pre_tokenizer": REFUSED[name]})


def test_the_model_type_defaults_to_bpe_and_others_are_refused(tmp_path: Path, document: dict) -> None:
    untyped = document | {"model": {k: v for k, v in document["model"].items() if k != "type"}}
    assert read(tmp_path, untyped).vocab == read(tmp_path, document).vocab
    with pytest.raises(TokenizerError, match="model type 'WordPiece' is not BPE"):
        read(tmp_path, document | {"model": document["model"] | {"type": "WordPiece"}})


@pytest.mark.parametrize(
    ("option", "value"), [("continuing_subword_prefix", "##"), ("end_of_word_suffix", "</w>"), ("dropout", 0.1)]
)
def test_bpe_options_we_do_not_implement_are_refused_by_name(tmp_path, document, option, value) -> None:
    with pytest.raises(TokenizerError, match=f"BPE option {option}={value!r} is not supported"):
        read(tmp_path, document | {"model": document["model"] | {option: value}})


def test_a_normalizer_is_refused(tmp_path: Path, document: dict) -> None:
    with pytest.raises(TokenizerError, match="normalizers are not supported"):
        read(tmp_path, document | {"normalizer": {"type": "NFC"}})


def test_ignore_merges_is_read_and_defaults_to_false(tmp_path: Path, document: dict) -> None:
    assert read(tmp_path, document | {"model": document["model"] | {"ignore_merges": True}}).ignore_merges is True
    without = {k: v for k, v in document["model"].items() if k != "ignore_merges"}
    assert read(tmp_path, document | {"model": without}).ignore_merges is False


@pytest.mark.parametrize("bad", ["7", 1.5, True, -1])
@pytest.mark.parametrize("where", ["vocab", "added_tokens"])
def test_an_id_that_is_no_token_id_is_refused_naming_the_file(tmp_path, document, bad, where) -> None:
    if where == "vocab":
        vocab = document["model"]["vocab"]
        document = document | {"model": document["model"] | {"vocab": vocab | {"Ġcat": bad}}}
    else:
        document = document | {"added_tokens": [document["added_tokens"][0] | {"id": bad}]}
    with pytest.raises(TokenizerError, match=rf"tokenizer\.json: token id {bad!r} is not a non-negative integer"):
        read(tmp_path, document)


@pytest.mark.parametrize("entry", [["Ġ", "t", "h"], ["Ġ", 5], "Ġ t h", "Ġ t ", "Ġt"])
def test_a_merge_that_is_not_two_tokens_is_refused(tmp_path, document, entry) -> None:
    with pytest.raises(TokenizerError, match="bad merge entry"):
        read(tmp_path, document | {"model": document["model"] | {"merges": [entry]}})


def test_gpt2_files_name_the_special_tokens_they_lack(tmp_path: Path) -> None:
    vocab, merges = BPETokenizer.train(TEXTS, 300).save_vocab_merges(tmp_path)
    with pytest.raises(TokenizerError, match=r"special tokens \['<s>'\] are not in"):
        BPETokenizer.from_vocab_merges(vocab, merges, special_tokens=["<s>"])
    merges.write_text("#version: 0.2\nĠ t \n", encoding="utf-8")
    with pytest.raises(TokenizerError, match="corrupt merges file"):
        BPETokenizer.from_vocab_merges(vocab, merges)


@pytest.mark.parametrize("which", ["vocab", "merges"])
def test_gpt2_files_that_are_pipes_are_refused_by_name_not_waited_on(tmp_path: Path, named_pipe, which: str) -> None:
    files = dict(zip(("vocab", "merges"), BPETokenizer.train(TEXTS, 300).save_vocab_merges(tmp_path), strict=True))
    files[which].unlink()
    named_pipe(files[which])
    with pytest.raises(TokenizerError, match=f"^{files[which]} is not a regular file"):
        BPETokenizer.from_vocab_merges(files["vocab"], files["merges"])


def test_gpt2_files_name_a_missing_one_and_a_vocab_nested_too_deeply(tmp_path: Path) -> None:
    vocab, merges = BPETokenizer.train(TEXTS, 300).save_vocab_merges(tmp_path)
    merges.unlink()
    with pytest.raises(TokenizerError, match=f"^missing file {merges}$"):
        BPETokenizer.from_vocab_merges(vocab, merges)
    vocab.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(TokenizerError, match=f"^corrupt JSON file {vocab}: JSON nested too deeply$"):
        BPETokenizer.from_vocab_merges(vocab, merges)
