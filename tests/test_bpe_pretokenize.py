"""Pre-tokenization: named patterns, user regexes, and the safe cut points parallel encoding relies on."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokformer.tokenizers import BPETokenizer
from tokformer.tokenizers.pretokenize import PATTERNS, PatternError, pretokenizer, resolve_pattern, safe_chunks

# Text rich in the characters where patterns disagree: newlines, spaces, tabs, digits, quotes.
TRICKY = st.lists(st.sampled_from([*"ab1 \n\t\r'.!é世🙂", "'s", "'ll", "\n\n"]), max_size=150).map("".join)


@settings(max_examples=150, deadline=None)
@given(text=TRICKY, size=st.integers(1, 40))
@pytest.mark.parametrize("name", ["gpt2", "cl100k"])
def test_safe_chunks_give_the_same_pieces(name, text, size):
    split = pretokenizer(PATTERNS[name])
    chunks = safe_chunks(text, size)
    assert "".join(chunks) == text
    assert [piece for chunk in chunks for piece in split(chunk)] == split(text)


def test_gpt2_pattern_pieces():
    split = pretokenizer(PATTERNS["gpt2"])
    assert split("Hello world's  3 cats!!\n\n x") == ["Hello", " world", "'s", " ", " 3", " cats", "!!", "\n\n", " x"]


def test_user_regex_keeps_unmatched_text_and_bad_names_fail():
    split = pretokenizer(resolve_pattern(r"\d+"))
    assert split("ab12cd3") == ["ab", "12", "cd", "3"]
    with pytest.raises(PatternError, match="unknown pattern name"):
        resolve_pattern("gtp2")
    with pytest.raises(PatternError, match="invalid"):
        resolve_pattern("[a-")


def test_tokenizer_with_custom_pattern_survives_pickling():
    tok = BPETokenizer.train(["hello world " * 20], 270, pattern=r"\p{L}+")
    clone = pickle.loads(pickle.dumps(tok))
    assert clone.encode("hello, world!") == tok.encode("hello, world!")
