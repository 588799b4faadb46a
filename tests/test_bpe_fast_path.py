"""The encoder's fast path: GPT-2 text cached by word-sized chunks must give the ids of the piece-level path.

The chunking (``pretokenize.chunker``) is exact only if no GPT-2 piece crosses a chunk
boundary and a chunk's pieces found alone are its pieces in context; these tests attack
both claims with whitespace-heavy, random and real text, and compare the ids with the
piece-level encoder and with tiktoken on the same vocabulary.
"""

from __future__ import annotations

import random
import sysconfig
from pathlib import Path

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

from tokformer.tokenizers import BPETokenizer, TokenizerError
from tokformer.tokenizers import bpe as bpe_module
from tokformer.tokenizers.bpe import SurrogateError
from tokformer.tokenizers.bpe_merge import merge_short
from tokformer.tokenizers.pretokenize import PATTERNS, chunker, pretokenizer

WHITESPACE = [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2003", "\x0b", "\x0c", "\x85", *"\x1c\x1d\x1e\x1f"]
ATOMS = [*WHITESPACE, *"aZé1٣.!'", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "世界", "🙂", "👍🏽", "ab", "42"]
# Runs of every kind of whitespace next to words, digits, contractions, CJK and emoji,
# including text that starts or ends in whitespace: where chunk ends would go wrong.
ADVERSARIAL = st.lists(st.sampled_from(ATOMS), max_size=60).map("".join)
UNICODE = st.text(st.characters(exclude_categories=("Cs",)), max_size=200)
CORPUS = [
    "the cat sat on the mat; the dog's bed isn't 42 feet.\n" * 10,
    "Grüße aus München, 안녕하세요 세계, 你好世界, 🙂🚀 emoji.\n\u3000全角\u00a0nbsp\n" * 5,
    "def add(a, b):\n    return a + b\n\n\n\tclass Thing:  # comment   \n        pass\n" * 5,
]
GPT2 = PATTERNS["gpt2"]


@pytest.fixture(scope="module")
def tok() -> BPETokenizer:
    return BPETokenizer.train(CORPUS, 500, special_tokens=["<|endoftext|>"], backend="python")


def piece_level(tok: BPETokenizer) -> BPETokenizer:
    """A fresh copy of ``tok`` that caches pre-tokens, as the encoder did before chunking."""
    copy = BPETokenizer(tok.vocab, tok.merges, special_tokens=tok.special_tokens, pattern=tok.pattern, backend="python")
    copy._chunk = copy._split
    return copy


def fresh(tok: BPETokenizer) -> BPETokenizer:
    return BPETokenizer(tok.vocab, tok.merges, special_tokens=tok.special_tokens, pattern=tok.pattern, backend="python")


def random_unicode(seed: int, length: int) -> str:
    """Characters from every plane's assigned-or-not code points, weighted towards whitespace."""
    rng = random.Random(seed)
    chars = []
    for _ in range(length):
        if rng.random() < 0.3:
            chars.append(rng.choice(WHITESPACE))
        else:
            code = rng.choice([rng.randrange(0x80), rng.randrange(0x3000), rng.randrange(0x110000)])
            chars.append(chr(code) if not 0xD800 <= code <= 0xDFFF else "x")
    return "".join(chars)


def real_files() -> list[str]:
    """A few real documents: stdlib sources and, where the machine has them, license texts."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    paths = [stdlib / name for name in ("textwrap.py", "difflib.py", "tokenize.py")]
    paths += sorted(Path("/usr/share/common-licenses").glob("*"))[:4]
    return [p.read_text(encoding="utf-8", errors="replace") for p in paths if p.is_file()]


@settings(max_examples=400, deadline=None)
@given(text=st.one_of(ADVERSARIAL, UNICODE))
def test_chunks_hold_whole_pieces_that_split_alone_as_in_context(text):
    chunks = chunker(GPT2)(text)
    split = pretokenizer(GPT2)
    assert "".join(chunks) == text
    assert [piece for chunk in chunks for piece in split(chunk)] == split(text)


@pytest.mark.parametrize("seed", range(20))
def test_chunks_on_random_unicode(seed):
    text = random_unicode(seed, 2000)
    split = pretokenizer(GPT2)
    assert [piece for chunk in chunker(GPT2)(text) for piece in split(chunk)] == split(text)


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(ADVERSARIAL, UNICODE))
def test_chunked_ids_equal_piece_level_ids(tok, text):
    assert fresh(tok).encode(text) == piece_level(tok).encode(text)


def test_chunked_ids_equal_piece_level_ids_on_real_files_cold_and_warm(tok):
    docs = real_files() + [random_unicode(seed, 5000) for seed in range(5)]
    chunked, pieces = fresh(tok), piece_level(tok)
    for _ in range(2):  # the second pass reads the warm caches
        assert chunked.encode_batch(docs, num_workers=1) == pieces.encode_batch(docs, num_workers=1)


def test_ids_equal_tiktoken_on_the_same_vocabulary(tok):
    enc = tiktoken.Encoding(
        name="tokformer-test", pat_str=tok.pattern, mergeable_ranks=tok.mergeable_ranks(), special_tokens={}
    )
    rng = random.Random(0)
    docs = real_files() + [random_unicode(seed, 3000) for seed in range(10)]
    docs += ["".join(rng.choice(ATOMS) for _ in range(400)) for _ in range(50)]
    ours = fresh(tok)
    for doc in docs:
        assert ours.encode(doc) == enc.encode_ordinary(doc), doc[:80]


def test_mergeable_ranks_refuse_ids_out_of_merge_order(tok):
    vocab = dict(tok.vocab)
    first, second = (a + b for a, b in tok.merges[:2])
    vocab[first], vocab[second] = vocab[second], vocab[first]
    with pytest.raises(TokenizerError, match="merge order"):
        BPETokenizer(vocab, tok.merges).mergeable_ranks()


def test_other_patterns_cache_pieces_not_chunks():
    # cl100k pieces cross whitespace ("\tfoo", ".\n\n"), so no word chunking there.
    for name in ("cl100k",):
        assert chunker(PATTERNS[name]) is pretokenizer(PATTERNS[name])
    assert chunker(r"\p{L}+") is pretokenizer(r"\p{L}+")


def test_cache_stays_bounded_and_skips_long_units(tok, monkeypatch):
    monkeypatch.setattr(bpe_module, "CACHE_LIMIT", 50)
    ours = fresh(tok)
    words = [f"w{i}x" for i in range(400)]
    for start in range(0, 400, 20):
        ours.encode(" ".join(words[start : start + 20]))
        assert len(ours._cache) <= 50 + 4 * 20  # cleared above the limit; a call adds <= 4 units a word
    long_word = "z" * (bpe_module.CACHED_PIECE_LEN + 1)
    assert ours.decode(ours.encode(f"a {long_word} b")) == f"a {long_word} b"
    assert f" {long_word}" not in ours._cache and long_word not in ours._cache


@settings(max_examples=200, deadline=None)
@given(ids=st.lists(st.sampled_from([1, 2, 3, 5, 6]), max_size=40))
def test_merge_short_equals_the_textbook_rescan(ids):
    ranks = {(1, 1): (0, 5), (5, 1): (1, 6), (5, 5): (2, 7), (2, 3): (3, 8), (1, 5): (4, 9), (6, 6): (5, 10)}
    expected = list(ids)
    while True:  # merge the lowest-ranked adjacent pair, leftmost on ties
        found = [(ranks[p][0], i) for i, p in enumerate(zip(expected, expected[1:], strict=False)) if p in ranks]
        if not found:
            break
        _, at = min(found)
        expected[at : at + 2] = [ranks[(expected[at], expected[at + 1])][1]]
    assert merge_short(list(ids), ranks) == expected


def test_a_batch_of_lines_encodes_as_each_line_alone(tok):
    """The batch fills every miss at once (shared pieces merged once): same ids as one line at a time."""
    lines = [line for doc in real_files() for line in doc.splitlines()][:3000]
    batched = fresh(tok).encode_batch(lines, num_workers=1)
    alone = fresh(tok)
    assert batched == [alone.encode(line) for line in lines]


def test_a_surrogate_in_a_batch_is_named_in_its_own_text(tok):
    texts = ["plain words here", "bad \ud800 here", "more words"]
    with pytest.raises(SurrogateError, match="U\\+D800 at index 4"):
        fresh(tok).encode_batch(texts, num_workers=1)
