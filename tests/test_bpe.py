"""Byte-level BPE behaviour: round trips, special tokens, pathological input, files, batches."""

from __future__ import annotations

import json
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tokformer.tokenizers import BPETokenizer, SurrogateError, TokenizerError, load_tokenizer
from tokformer.tokenizers.bpe_merge import merge_long, merge_short

CORPUS = [
    "the cat sat on the mat; the dog sat on the log.\n" * 20,
    "Grüße aus München, 안녕하세요 세계, 你好世界, 🙂🚀 emoji 🙂🚀.\n" * 10,
    "def add(a, b):\n    return a + b\n\n\nclass Thing:\n    pass\n" * 10,
    "aaaaaaaaaaaaaaaa bbbbbbbb " * 10,
]
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=200)


@pytest.fixture(scope="module")
def tok() -> BPETokenizer:
    return BPETokenizer.train(CORPUS, 400, special_tokens=["<|endoftext|>", "<pad>"], pad_token="<pad>")


@settings(max_examples=200, deadline=None)
@given(text=TEXT)
def test_round_trip_any_unicode(tok, text):
    assert tok.decode(tok.encode(text)) == text


@settings(max_examples=50, deadline=None)
@given(text=TEXT)
def test_round_trip_custom_pattern_keeps_unmatched_text(text):
    words_only = BPETokenizer.train(CORPUS, 300, pattern=r"\p{L}+")
    assert words_only.decode(words_only.encode(text)) == text


@settings(max_examples=120, deadline=None)
@given(ids=st.lists(st.sampled_from([1, 2, 3, 5, 6]), max_size=80))
def test_heap_merge_equals_quadratic_merge(ids):
    ranks = {(1, 1): (0, 5), (5, 1): (1, 6), (5, 5): (2, 7), (2, 3): (3, 8), (1, 5): (4, 9), (6, 6): (5, 10)}
    assert merge_long(list(ids), ranks) == merge_short(list(ids), ranks)


def test_decode_joins_bytes_of_split_characters(tok):
    ids = tok.encode("세계🚀")
    assert any(len(tok.id_to_token(i).decode("utf-8", "ignore")) == 0 for i in ids)  # a token splits a character
    assert tok.decode(ids) == "세계🚀"


def test_lone_surrogate_raises_naming_the_position(tok):
    with pytest.raises(SurrogateError, match=r"U\+D800 at index 3"):
        tok.encode("abc\ud800def")
    assert isinstance(SurrogateError("x"), ValueError)


def test_special_tokens_are_text_unless_allowed(tok):
    eot = tok.token_to_id("<|endoftext|>")
    text = "hi<|endoftext|>there"
    assert eot not in tok.encode(text)
    assert tok.decode(tok.encode(text)) == text
    allowed = tok.encode(text, allowed_special={"<|endoftext|>"})
    assert allowed.count(eot) == 1
    assert tok.decode(allowed) == text
    assert tok.encode(text, allowed_special="all") == allowed
    assert tok.decode(allowed, skip_special_tokens=True) == "hithere"
    with pytest.raises(TokenizerError, match="unknown special"):
        tok.encode(text, allowed_special={"<nope>"})


def test_pathological_piece_is_not_quadratic(tok):
    start = time.perf_counter()
    ids = tok.encode("a" * 100_000)
    assert time.perf_counter() - start < 10
    assert tok.decode(ids) == "a" * 100_000
    assert len(ids) < 20_000  # the run was merged, not left one id per byte


def test_parallel_encoding_equals_serial(tok):
    texts = [c * 3 for c in CORPUS] * 4
    assert tok.encode_batch(texts, num_workers=2) == [tok.encode(t) for t in texts]
    big = "".join(texts)
    assert tok.encode(big, num_workers=2) == tok.encode(big)
    assert [i for _, chunk in tok.iter_encode(big, chunk_chars=100) for i in chunk] == tok.encode(big)


def test_a_worker_count_past_the_cap_is_refused_and_a_batch_forks_no_more_workers_than_texts(tok):
    """encode_batch(["a"] * 3, num_workers=10000) forked 10,000 processes for three texts."""
    with pytest.raises(TokenizerError, match="num_workers must be between 1 and 64, got 65"):
        tok.encode_batch(["a"] * 3, num_workers=65)
    with pytest.raises(TokenizerError, match="num_workers must be between 1 and 64, got 65"):
        tok.encode("a", num_workers=65)
    python = BPETokenizer(tok.vocab, tok.merges, special_tokens=tok.special_tokens, backend="python")
    try:
        assert python.encode_batch(["ab", "cd"], num_workers=64) == [tok.encode("ab"), tok.encode("cd")]
        assert python._executor is not None and python._executor[0] == (2, False)  # two processes
        assert tok.encode_batch(["ab", "cd"], num_workers=64) == [tok.encode("ab"), tok.encode("cd")]
        assert tok._executor is None or tok._executor[0][0] == 2  # two threads, or the library's own batch
    finally:
        tok.close()
        python.close()


def test_batch_pads_masks_and_numbers_positions(tok):
    batch = tok.batch(["the cat", "the cat sat on the mat", ""])
    lengths = [len(tok.encode(t)) for t in ["the cat", "the cat sat on the mat", ""]]
    assert batch.ids.shape == (3, max(lengths))
    assert batch.lengths.tolist() == lengths
    assert (batch.ids[~batch.mask] == tok.token_to_id("<pad>")).all()
    assert torch.equal(batch.positions[1], torch.arange(max(lengths)))
    cut = tok.batch(["the cat sat on the mat"], max_length=3, truncation=True, pad_to_max_length=True)
    assert cut.ids[0].tolist() == tok.encode("the cat sat on the mat")[:3]
    with pytest.raises(TokenizerError, match="truncation=True"):
        tok.batch(["the cat sat on the mat"], max_length=3)
    embedded = tok.build_embedder(16)(batch)
    assert embedded.shape == (3, max(lengths), 16)


def test_save_load_directory_and_gpt2_files(tok, tmp_path):
    tok.save(tmp_path / "t")
    loaded = load_tokenizer(tmp_path / "t")
    assert isinstance(loaded, BPETokenizer)
    assert loaded.pad_token == "<pad>"
    assert loaded.encode(CORPUS[1], allowed_special="all") == tok.encode(CORPUS[1], allowed_special="all")
    vocab, merges = tok.save_vocab_merges(tmp_path / "g")
    gpt2 = BPETokenizer.from_vocab_merges(vocab, merges, special_tokens=["<|endoftext|>", "<pad>"])
    assert gpt2.encode(CORPUS[2]) == tok.encode(CORPUS[2])
    assert gpt2.special_tokens == tok.special_tokens
    assert merges.read_text().startswith("#version")


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: d.pop("model"), "missing"),
        (lambda d: d["model"]["merges"].append(["zz", "qq"]), "not in the vocabulary"),
        (lambda d: d["model"]["vocab"].pop("a"), "single bytes|not in the vocabulary"),
        (lambda d: d.update(pre_tokenizer={"type": "Whitespace"}), "unsupported pre_tokenizer"),
        (lambda d: d["model"].update(vocab={"\u4e00": 0}), "not byte-level|missing"),
    ],
)
def test_corrupt_tokenizer_json_is_a_clear_error(tok, tmp_path, damage, message):
    path = tmp_path / "tokenizer.json"
    tok.save_hf_json(path)
    document = json.loads(path.read_text())
    damage(document)
    path.write_text(json.dumps(document))
    with pytest.raises(TokenizerError, match=message):
        BPETokenizer.from_hf_json(path)


def test_training_input_errors():
    with pytest.raises(TokenizerError, match="empty"):
        BPETokenizer.train(["", ""], 300)
    with pytest.raises(TokenizerError, match="below 256 bytes"):
        BPETokenizer.train(CORPUS, 257, special_tokens=["<a>", "<b>"])
    with pytest.raises(TokenizerError, match="unknown pattern name"):
        BPETokenizer.train(CORPUS, 300, pattern="gtp2")
    with pytest.raises(TokenizerError, match="invalid pre-tokenization regex"):
        BPETokenizer.train(CORPUS, 300, pattern="(unclosed")


def test_min_frequency_stops_training():
    loose = BPETokenizer.train(CORPUS, 1000)
    strict = BPETokenizer.train(CORPUS, 1000, min_frequency=50)
    assert 0 < len(strict.merges) < len(loose.merges)
