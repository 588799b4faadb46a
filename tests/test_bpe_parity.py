"""Parity with Hugging Face `tokenizers` (a test-only dependency): same ids, same merges."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest
from hf_bpe import hf, hf_merges, train_hf

from tokformer.tokenizers import BPETokenizer
from tokformer.tokenizers.byte_level import token_to_str

MULTILINGUAL = (
    "The quick brown fox doesn't jump; it's 3.14159 times lazier than 42 dogs.\n"
    "Grüße aus München! Die Straße ist naß, Äpfel und Öl kosten 12,50 €.\n"
    "안녕하세요, 세계! 한국어 텍스트입니다.\n"
    "你好，世界。这是中文文本，包含标点符号！\n"
    "Emoji: 🙂🚀👍🏽 👨‍👩‍👧‍👦 🇩🇪\n"
    "def f(x: int) -> int:\n\treturn x ** 2  # square\n\n\n\n"
    "    indented    with   runs   of     spaces   \r\n\r\n  trailing   \n"
    "tabs\t\t\tand\u00a0nbsp\u3000ideographic space 'll 've 're 'S\n"
)


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    """~300 KB of stdlib source plus the multilingual sample, deterministic and offline."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    names = ["argparse.py", "textwrap.py", "string.py", "difflib.py", "heapq.py", "functools.py"]
    return [(stdlib / name).read_text(encoding="utf-8") for name in names] + [MULTILINGUAL] * 3


@pytest.mark.parametrize(
    ("pattern", "vocab_size", "min_frequency", "specials"),
    [("gpt2", 1200, 0, ["<|endoftext|>"]), ("gpt2", 2000, 5, []), ("cl100k", 900, 2, ["<pad>", "<eos>"])],
)
def test_trained_merges_and_vocab_equal_hf(corpus, pattern, vocab_size, min_frequency, specials):
    ours = BPETokenizer.train(corpus, vocab_size, pattern=pattern, min_frequency=min_frequency, special_tokens=specials)
    reference = train_hf(corpus, vocab_size, pattern, min_frequency, specials)
    assert [(token_to_str(a), token_to_str(b)) for a, b in ours.merges] == hf_merges(reference)
    our_vocab = {token_to_str(tok): i for tok, i in ours.vocab.items()} | ours.special_tokens
    assert our_vocab == reference.get_vocab()


@pytest.mark.parametrize("backend", ["python", "auto"])  # the reference encoder, and the compiled one auto picks
@pytest.mark.parametrize("pattern", ["gpt2", "cl100k"])
def test_ids_equal_hf_on_the_same_tokenizer_json(corpus, tmp_path, pattern, backend):
    ours = BPETokenizer.train(corpus, 1500, pattern=pattern, special_tokens=["<|endoftext|>"], backend=backend)
    path = tmp_path / "tokenizer.json"
    ours.save_hf_json(path)
    reference = hf.Tokenizer.from_file(str(path))
    loaded = BPETokenizer.from_hf_json(path, backend=backend)
    for text in [MULTILINGUAL, MULTILINGUAL * 3, "a" * 3000, " " * 50 + "\n" * 7 + "x", ""]:
        expected = reference.encode(text, add_special_tokens=False).ids
        assert ours.encode(text) == expected
        assert loaded.encode(text) == expected
    # HF always splits out special tokens; ours does when asked to.
    text = "end of doc<|endoftext|>start of the next"
    assert ours.encode(text, allowed_special="all") == reference.encode(text, add_special_tokens=False).ids


@pytest.mark.parametrize("backend", ["python", "auto"])
def test_loads_a_tokenizer_json_written_by_hf(corpus, tmp_path, backend):
    reference = train_hf(corpus, 1000, "gpt2", 0, ["<s>"])
    reference.decoder = hf.decoders.ByteLevel()
    path = tmp_path / "tokenizer.json"
    reference.save(str(path))
    ours = BPETokenizer.from_hf_json(path, backend=backend)
    ids = ours.encode(MULTILINGUAL)
    assert ids == reference.encode(MULTILINGUAL, add_special_tokens=False).ids
    assert ours.decode(ids) == reference.decode(ids) == MULTILINGUAL
