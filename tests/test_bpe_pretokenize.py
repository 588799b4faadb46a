"""Pre-tokenization: named patterns, user regexes, and the safe cut points parallel encoding relies on."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokformer.tokenizers import BPETokenizer
from tokformer.tokenizers.pretokenize import (
    PATTERNS,
    PatternError,
    gpt2_safe_cut,
    pretokenizer,
    resolve_pattern,
    safe_chunks,
    safe_cut,
)

# Text rich in the characters where patterns disagree: newlines, spaces, tabs, digits, quotes.
TRICKY = st.lists(st.sampled_from([*"ab1 \n\t\r'.!é世🙂", "'s", "'ll", "\n\n"]), max_size=150).map("".join)


@settings(max_examples=150, deadline=None)
@given(text=TRICKY, size=st.integers(1, 40))
@pytest.mark.parametrize("name", ["gpt2", "cl100k"])
def test_safe_chunks_give_the_same_pieces(name, text, size):
    split = pretokenizer(PATTERNS[name])
    for chunks in (safe_chunks(text, size), safe_chunks(text, size, PATTERNS[name])):  # GPT-2's may cut more
        assert "".join(chunks) == text
        assert [piece for chunk in chunks for piece in split(chunk)] == split(text)


@settings(max_examples=300, deadline=None)
@given(text=st.lists(st.sampled_from([*"ab \n\t\r\x1c\x1f\x85\u00a0\u3000é", "\n\n"]), max_size=60).map("".join))
def test_a_safe_cut_is_where_the_lookbehind_regex_finds_it(text):
    """The specification of a safe cut, ``(?<=\\S\\n)(?=\\S)`` under ``regex``, against the walk from newline to
    newline that replaced it (which must also take \\x1c-\\x1f, spaces to ``str`` and not to ``regex``, as text)."""
    import regex

    spec = regex.compile(r"(?<=\S\n)(?=\S)")
    for position in range(len(text) + 2):
        found = spec.search(text, position)
        assert safe_cut(text, position) == (found.start() if found else -1), (text, position)


@settings(max_examples=300, deadline=None)
@given(text=st.lists(st.sampled_from([*"ab \n\t\r\x1c\x1f\x85\u00a0'.1é", "'s", "\n\n"]), max_size=60).map("".join))
def test_a_gpt2_cut_is_before_each_newline_after_a_non_space_and_keeps_the_pieces(text):
    import regex

    spec = regex.compile(r"(?<=\S)(?=\n)")
    split = pretokenizer(PATTERNS["gpt2"])
    for position in range(len(text) + 2):
        found = spec.search(text, position)
        cut = gpt2_safe_cut(text, position)
        assert cut == (found.start() if found else -1), (text, position)
        if cut > 0:
            assert split(text[:cut]) + split(text[cut:]) == split(text), (text, cut)


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
