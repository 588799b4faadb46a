"""BPETokenizer's options, caches, worker pool and error paths (mutation testing,
benchmarks/results/mutation.md): what the parity and round-trip tests pass through without looking.

Every test builds its own tokenizer: mutmut runs a mutant only on the tests it saw call the
mutated function, and it credits a shared fixture's work to the first test that asked for it."""

from __future__ import annotations

import pickle
from array import array

import pytest
import torch

from tokformer.tokenizers import BPETokenizer, TokenizerError
from tokformer.tokenizers import bpe as bpe_module
from tokformer.tokenizers.bpe import PARALLEL_MIN_CHARS, SurrogateError
from tokformer.tokenizers.pretokenize import PATTERNS

CORPUS = ["the cat sat on the mat. the dog sat on the log.\n", "a cat and a dog, 12 cats and 34 dogs!\n"] * 3
LINES = "".join(f"line {i}: the cat sat on the mat.\n" for i in range(60))
BYTES = {bytes([b]): b for b in range(256)}


def trained(**options) -> BPETokenizer:
    """A small tokenizer: 60 merges over CORPUS, specials from ``options``; the Python encoder, which this module
    guards (tests/test_bpe_backend.py compares the compiled ones with it)."""
    options.setdefault("backend", "python")
    return BPETokenizer.train(CORPUS, 256 + 60 + len(options.get("special_tokens", ())), **options)


def without_merges(**options) -> BPETokenizer:
    """The 256 bytes plus "ab" (id 256), which no merge builds."""
    return BPETokenizer(BYTES | {b"ab": 256}, [], backend="python", **options)


# ----------------------------------------------------------------- construction


def test_a_vocabulary_without_every_byte_is_refused_by_name() -> None:
    vocab = {bytes([b]): b for b in range(256) if b != 7}
    with pytest.raises(TokenizerError, match=r"lacks 1 single bytes, e.g. b'\\x07'"):
        BPETokenizer(vocab, [])


def test_a_special_token_on_a_vocabulary_id_is_refused() -> None:
    with pytest.raises(TokenizerError, match="special token '<s>' reuses the id of a vocabulary token"):
        BPETokenizer(BYTES, [], special_tokens={"<s>": 65})


def test_vocab_size_is_one_past_the_largest_id_even_with_gaps() -> None:
    assert BPETokenizer(BYTES, [], special_tokens={"<s>": 1000}).vocab_size == 1001
    assert BPETokenizer(BYTES, []).vocab_size == 256


def test_options_have_gpt2s_defaults() -> None:
    tokenizer = BPETokenizer(BYTES, [])
    assert tokenizer.max_length == 1024 and tokenizer.ignore_merges is False
    assert tokenizer.encode("ab") == [97, 98]


def test_ignore_merges_emits_a_vocabulary_pre_token_whole_and_survives_files() -> None:
    assert without_merges().encode("ab") == [97, 98]
    kept = without_merges(ignore_merges=True)
    assert kept.ignore_merges is True
    assert kept.encode("ab cab") == [256, 32, 99, 97, 98]  # " cab" is no vocabulary token: merged as usual
    assert kept.files().ignore_merges is True
    assert BPETokenizer.from_files(kept.files()).encode("ab") == [256]


def test_hf_json_keeps_ignore_merges(tmp_path) -> None:
    without_merges(ignore_merges=True).save_hf_json(tmp_path / "tokenizer.json")
    assert BPETokenizer.from_hf_json(tmp_path / "tokenizer.json").encode("ab") == [256]


def test_train_passes_pattern_progress_and_options_on(capsys) -> None:
    tokenizer = BPETokenizer.train(CORPUS, 300, pattern="cl100k", max_length=7)
    assert tokenizer.pattern == PATTERNS["cl100k"] and tokenizer.max_length == 7
    assert capsys.readouterr().err == ""  # silent by default
    BPETokenizer.train(CORPUS, 300, show_progress=True)
    assert "merges: " in capsys.readouterr().err


def test_vocab_merges_files_keep_the_pattern_and_options(tmp_path) -> None:
    tokenizer = trained(pattern="cl100k")
    vocab, merges = tokenizer.save_vocab_merges(tmp_path / "new" / "nested")  # parents made
    loaded = BPETokenizer.from_vocab_merges(vocab, merges, pattern="cl100k", max_length=9)
    assert loaded.pattern == PATTERNS["cl100k"] and loaded.max_length == 9
    assert loaded.encode(LINES) == tokenizer.encode(LINES)
    tokenizer.save_vocab_merges(tmp_path / "new" / "nested")  # an existing folder is fine


def test_unknown_config_keys_are_refused_by_name(tmp_path) -> None:
    trained().save_hf_json(tmp_path / "tokenizer.json")
    with pytest.raises(TokenizerError, match=r"unknown bpe tokenizer config keys: \['bogus'\]"):
        BPETokenizer.from_config({"max_length": 8, "bogus": 1}, tmp_path)


def test_token_to_id_reads_bytes_from_the_vocabulary_and_strings_from_the_specials() -> None:
    tokenizer = trained(special_tokens=["<s>"])
    assert tokenizer.token_to_id(b"a") == tokenizer.vocab[b"a"]
    assert tokenizer.token_to_id("<s>") == 0


def test_mergeable_ranks_refuses_two_merges_onto_one_token() -> None:
    vocab = BYTES | {b"ab": 256, b"bc": 257, b"abc": 258}
    assert BPETokenizer(vocab, [(b"a", b"b"), (b"b", b"c"), (b"ab", b"c")]).mergeable_ranks() == vocab
    twice = BPETokenizer(vocab, [(b"a", b"b"), (b"b", b"c"), (b"ab", b"c"), (b"a", b"bc")])
    with pytest.raises(TokenizerError, match="do not follow the merge order"):
        twice.mergeable_ranks()


# ----------------------------------------------------------------- special tokens


def test_every_allowed_special_in_a_text_is_kept_with_the_text_between() -> None:
    tokenizer = trained(special_tokens=["<s>"])
    text = "cat<s>dog<s>mat"
    expected = tokenizer.encode("cat") + [0] + tokenizer.encode("dog") + [0] + tokenizer.encode("mat")
    assert tokenizer.encode(text, allowed_special="all") == expected
    assert tokenizer.encode_batch([text, "x"], allowed_special="all")[0] == expected
    assert [i for _, ids in tokenizer.iter_encode(text, allowed_special="all") for i in ids] == expected


def test_a_special_that_extends_another_wins() -> None:
    tokenizer = BPETokenizer(BYTES, [], special_tokens={"<a>": 300, "<a>!": 301})
    assert tokenizer.encode("<a>!<a>", allowed_special="all") == [301, 300]


def test_each_allowed_set_gets_its_own_special_regex() -> None:
    tokenizer = BPETokenizer(BYTES, [], special_tokens={"<a>": 300, "<b>": 301})
    assert tokenizer.encode("<a><b>", allowed_special=["<a>"]) == [300, *b"<b>"]
    assert tokenizer.encode("<a><b>", allowed_special=["<b>"]) == [*b"<a>", 301]


# ----------------------------------------------------------------- cutting large texts


def chunk_count(tokenizer: BPETokenizer, text: str, **options) -> int:
    return len(list(tokenizer.iter_encode(text, chunk_chars=100, **options)))


def test_named_patterns_cut_large_texts_but_custom_ones_do_not() -> None:
    assert chunk_count(trained(), LINES) > 1
    assert chunk_count(trained(pattern=r"\w+|\s+|[^\w\s]+"), LINES) == 1


def test_an_allowed_special_with_a_newline_stops_cutting() -> None:
    tokenizer = trained(special_tokens=["<|a\nb|>", "<s>"])
    assert chunk_count(tokenizer, LINES) > 1  # not allowed: plain text, cut as usual
    assert chunk_count(tokenizer, LINES, allowed_special=["<s>"]) > 1
    assert chunk_count(tokenizer, LINES, allowed_special=["<|a\nb|>"]) == 1
    assert chunk_count(tokenizer, LINES, allowed_special="all") == 1


def test_cut_texts_encode_like_whole_ones() -> None:
    tokenizer = trained()
    chunks = list(tokenizer.iter_encode(LINES, chunk_chars=100))
    assert sum(n for n, _ in chunks) == len(LINES)
    assert [i for _, ids in chunks for i in ids] == tokenizer.encode(LINES)


# ----------------------------------------------------------------- worker processes


def test_workers_resolve_from_the_size_of_the_input(monkeypatch) -> None:
    resolve = bpe_module._resolve_workers
    monkeypatch.setattr(bpe_module.machine, "cores", lambda: 3)  # the cores this process may use
    assert resolve(None, PARALLEL_MIN_CHARS - 1) == 1
    assert resolve(None, PARALLEL_MIN_CHARS) == 3
    assert resolve(2, 10) == 2 and resolve(64, 10) == 64
    for bad in (0, 65):
        with pytest.raises(TokenizerError, match=f"num_workers must be between 1 and 64, got {bad}"):
            resolve(bad, 10)


def test_a_worker_encodes_like_the_tokenizer_and_packs_ids_unsigned() -> None:
    tokenizer = BPETokenizer(BYTES, [], special_tokens={"<big>": 2**31 + 5})
    text = "a<big>b"
    try:
        bpe_module._init_worker(tokenizer)
        blob = bpe_module._encode_in_worker((text, tokenizer._special_regex("all")))
    finally:
        bpe_module._init_worker(None)
    assert array("I", blob).tolist() == tokenizer.encode(text, allowed_special="all") == [97, 2**31 + 5, 98]
    with pytest.raises(AssertionError, match="^worker not initialised$"):
        bpe_module._encode_in_worker((text, None))


def test_small_inputs_stay_in_process_unless_workers_are_asked_for() -> None:
    tokenizer = trained()
    tokenizer.encode(LINES, num_workers=None)
    tokenizer.encode_batch([LINES], num_workers=None)
    tokenizer.encode_batch([LINES], num_workers=1)
    assert tokenizer._executor is None


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("entry", ["encode", "encode_batch"])
def test_asked_for_workers_encode_on_a_pool_of_that_size_with_the_same_ids(
    entry: str, workers: int, monkeypatch
) -> None:
    tokenizer = trained(special_tokens=["<s>", "<big>"])
    tokenizer.special_tokens["<big>"] = 2**31 + 5  # an id above int32 must come back unsigned
    tokenizer._id_to_bytes[2**31 + 5] = b"<big>"
    text = LINES + "<s>" + LINES + "<big>"
    handed: list[int] = []
    parallel = BPETokenizer._encode_parallel
    monkeypatch.setattr(
        BPETokenizer, "_encode_parallel", lambda self, texts, *a: handed.append(len(texts)) or parallel(self, texts, *a)
    )
    try:
        if entry == "encode":
            ids = tokenizer.encode(text, allowed_special="all", num_workers=workers)
            expected = tokenizer.encode(text, allowed_special="all")
            assert handed[0] >= 2 * workers, f"a large text went to {workers} workers in {handed[0]} chunk(s)"
        else:
            texts = [text[i : i + 200] for i in range(0, len(text), 50)]  # 40+ texts: several per task
            ids = tokenizer.encode_batch(texts, allowed_special="all", num_workers=workers)
            expected = [tokenizer.encode(t, allowed_special="all") for t in texts]
        assert ids == expected
        assert tokenizer._executor is not None and tokenizer._executor[0] == (workers, False)  # processes
        assert tokenizer._executor[1]._max_workers == workers
    finally:
        tokenizer.close()


def test_the_pool_is_reused_for_the_same_size_and_restarts_after_close() -> None:
    tokenizer = trained()
    try:
        pool = tokenizer._pool(2)
        assert tokenizer._pool(2) is pool
        other = tokenizer._pool(3)
        assert other is not pool and other._max_workers == 3
        tokenizer.close()
        assert tokenizer._executor is None
        assert tokenizer.encode_batch(["the cat", "the dog"], num_workers=2) == tokenizer.encode_batch(
            ["the cat", "the dog"], num_workers=1
        )
    finally:
        tokenizer.close()


def test_workers_are_forked_so_the_tokenizer_is_never_pickled_for_them(monkeypatch) -> None:
    tokenizer = trained()

    def refuse(self):
        raise AssertionError("the tokenizer was pickled for a worker")

    monkeypatch.setattr(BPETokenizer, "__getstate__", refuse)
    try:
        assert tokenizer.encode_batch(["the cat"], num_workers=2) == tokenizer.encode_batch(["the cat"], num_workers=1)
    finally:
        tokenizer.close()


def test_a_tokenizer_with_a_running_pool_pickles_without_pool_or_cache() -> None:
    tokenizer = trained()
    try:
        tokenizer.encode_batch(["the cat"], num_workers=2)
        tokenizer.encode("a warm cache")
        copy = pickle.loads(pickle.dumps(tokenizer))
    finally:
        tokenizer.close()
    assert copy._executor is None and copy._finalizer is None and copy._cache == {}
    assert copy.encode(LINES) == tokenizer.encode(LINES)


# ----------------------------------------------------------------- caches


def test_the_cache_is_cleared_only_once_it_holds_more_than_its_limit(monkeypatch) -> None:
    monkeypatch.setattr(bpe_module, "CACHE_LIMIT", 3)
    tokenizer = trained(pattern="cl100k")  # one cached unit per pre-token
    tokenizer.encode("cat dog mat")  # 3 units: "cat", " dog", " mat"
    tokenizer.encode("log")
    assert set(tokenizer._cache) == {"cat", " dog", " mat", "log"}
    tokenizer.encode("sat")
    assert set(tokenizer._cache) == {"sat"}


def test_pieces_up_to_the_length_limit_are_cached_and_longer_ones_are_not(monkeypatch) -> None:
    monkeypatch.setattr(bpe_module, "CACHED_PIECE_LEN", 4)
    tokenizer = trained(pattern="cl100k")
    assert tokenizer.encode("cats ducks") == tokenizer.encode("cats") + tokenizer.encode(" ducks")
    assert set(tokenizer._cache) == {"cats"}
    gpt2 = trained()  # its units are words with their spaces and punctuation, split into cached pieces
    gpt2.encode("x cde, y")  # units "x", " cde,", " y"; " cde," splits into " cde" and ","
    assert set(gpt2._cache) == {"x", " y", " cde", ","}


def test_a_piece_shared_by_two_units_is_merged_once(monkeypatch) -> None:
    calls: list[list[int]] = []
    merge = bpe_module.merge_piece
    monkeypatch.setattr(bpe_module, "merge_piece", lambda ids, ranks: calls.append(ids) or merge(ids, ranks))
    tokenizer = trained()
    tokenizer.encode("cat, ")
    tokenizer.encode("cat. ")  # a new unit: "cat" is found in the piece cache
    assert [tokenizer.decode_bytes(ids) for ids in calls].count(b"cat") == 1


# ----------------------------------------------------------------- errors, batches, decoding, embedding


@pytest.mark.parametrize("pattern", ["gpt2", r"\w+|\s+|[^\w\s]+"])
def test_a_lone_surrogate_is_named_with_its_index(pattern: str) -> None:
    with pytest.raises(SurrogateError, match="lone surrogate U\\+D800 at index 4"):
        trained(pattern=pattern).encode("cat \ud800 dog")


def test_batch_pads_with_id_0_or_the_pad_token_and_truncates_to_max_length() -> None:
    tokenizer = trained(special_tokens=["<pad>", "<s>"], max_length=4)
    texts = ["the cat sat on the mat", "a<s>"]
    long, short = tokenizer.encode(texts[0]), tokenizer.encode("a")
    assert len(long) > 4
    plain = tokenizer.batch(texts)  # no truncation: the longest sample sets the width
    assert plain.ids.shape == (2, len(long)) and plain.ids[1, len(short) + 3 :].eq(0).all()
    special = tokenizer.batch(texts, allowed_special="all", truncation=True)
    assert special.ids.shape == (2, 4) and special.ids[1, :2].tolist() == [*short, 1]
    width = len(tokenizer.encode("a a"))
    assert width < 4 and tokenizer.batch(["a", "a a"], truncation=True).ids.shape == (2, width)  # not max_length
    padded = BPETokenizer.train(CORPUS, 300, special_tokens=["<s>", "<pad>"], pad_token="<pad>")
    batch = padded.batch(["a", "the cat"], max_length=8, pad_to_max_length=True)
    assert batch.ids.shape == (2, 8) and batch.ids[0, ~batch.mask[0]].eq(1).all()


def test_decoding_keeps_specials_by_default_and_replaces_invalid_utf8() -> None:
    tokenizer = trained(special_tokens=["<s>"])
    ids = tokenizer.encode("cat<s>", allowed_special="all")
    assert tokenizer.decode(ids) == "cat<s>" and tokenizer.decode_bytes(ids) == b"cat<s>"
    assert tokenizer.decode(ids, skip_special_tokens=True) == "cat"
    assert tokenizer.decode([tokenizer.vocab[b"\xff"], tokenizer.vocab[b"a"]]) == "\ufffda"


def test_the_embedder_has_learned_positions_up_to_max_length_and_no_dropout_by_default() -> None:
    tokenizer = trained(max_length=12)
    embedder = tokenizer.build_embedder(8)
    assert embedder.position.table.num_embeddings == 12 and embedder.drop.p == 0.0
    assert tokenizer.build_embedder(8, dropout=0.25).drop.p == 0.25
    assert tokenizer.build_embedder(8, positions=False).position is None
    batch = tokenizer.batch(["the cat"])
    embedder.train()
    assert torch.equal(embedder(batch), embedder(batch))  # no dropout in training mode either
