"""The BPE trainer's corners (mutation testing, benchmarks/results/mutation.md): pairs seen once, the
smallest vocabulary, ``min_frequency``, merges that spell an existing token, the default pattern and its
progress bars. The parity corpus of test_bpe_parity is large and frequent, so none of these came up there."""

from __future__ import annotations

import random
import re

import pytest
from hf_bpe import hf_merges, train_hf

from tokformer.tokenizers import TokenizerError
from tokformer.tokenizers.bpe_train import count_pretokens, train_bpe
from tokformer.tokenizers.byte_level import token_to_str
from tokformer.tokenizers.pretokenize import PATTERNS, resolve_pattern


def merges_of(texts: list[str], vocab_size: int, **options) -> list[tuple[bytes, bytes]]:
    return train_bpe(texts, vocab_size, **options).merges


def test_a_pair_seen_once_is_merged_and_so_is_the_pair_it_creates() -> None:
    assert merges_of(["abc"], 258) == [(b"a", b"b"), (b"ab", b"c")]


def test_the_smallest_vocabulary_is_the_bytes_and_specials_with_no_merge() -> None:
    trained = train_bpe(["abab abab"], 257, special_tokens=["<s>"])
    assert trained.merges == []
    assert len(trained.vocab) == 256 and trained.special_tokens == {"<s>": 0}
    with pytest.raises(TokenizerError, match="below 256 bytes"):
        train_bpe(["abab"], 256, special_tokens=["<s>"])


def test_min_frequency_stops_before_the_first_rarer_pair() -> None:
    texts = ["ab ab cd"]  # "ab" twice (" ab" once), "cd" once
    assert merges_of(texts, 300, min_frequency=2) == [(b"a", b"b")]
    assert merges_of(texts, 300, min_frequency=3) == []
    assert len(merges_of(texts, 300, min_frequency=1)) == len(merges_of(texts, 300)) > 1


def test_a_merge_that_spells_a_special_token_reuses_its_id() -> None:
    trained = train_bpe(["ab ab ab"], 300, special_tokens=["ab"])
    assert (b"a", b"b") in trained.merges
    assert b"ab" not in trained.vocab  # the special's id stands for it; no second "ab" token
    assert sorted(trained.vocab.values()) == list(range(1, 1 + len(trained.vocab)))


def test_the_default_pattern_is_gpt2() -> None:
    texts = ["it's 12345 dogs' bones, isn't it?  ok"]
    default = train_bpe(texts, 300)
    assert default.pattern == resolve_pattern("gpt2") == PATTERNS["gpt2"]
    assert default.merges == train_bpe(texts, 300, pattern="gpt2").merges


def random_corpus(rng: random.Random) -> list[str]:
    """Short words over three letters: many ties, merges spelling the same string two ways
    ("a"+"bc" and "ab"+"c"), pairs whose counts drop to zero and rise again."""
    words = ["".join(rng.choice("abc") for _ in range(rng.randrange(1, 7))) for _ in range(rng.randrange(3, 12))]
    return [" ".join(rng.choice(words) for _ in range(rng.randrange(1, 30))) for _ in range(rng.randrange(1, 4))]


@pytest.mark.parametrize("seed", range(30))
def test_random_small_corpora_train_like_hf(seed: int) -> None:
    rng = random.Random(seed)
    texts = random_corpus(rng)
    specials = rng.choice([[], ["ab"], ["<s>", "bc"], ["abc"]])
    min_frequency = rng.choice([0, 0, 1, 2, 3])
    vocab_size = 256 + len(specials) + rng.randrange(0, 40)
    ours = train_bpe(texts, vocab_size, min_frequency=min_frequency, special_tokens=specials)
    reference = train_hf(texts, vocab_size, "gpt2", min_frequency, specials)
    assert [(token_to_str(a), token_to_str(b)) for a, b in ours.merges] == hf_merges(reference), texts
    our_vocab = {token_to_str(tok): i for tok, i in ours.vocab.items()} | ours.special_tokens
    assert our_vocab == reference.get_vocab(), texts


def test_progress_bars_count_texts_and_the_vocabulary_when_asked(capsys) -> None:
    texts = ["abc abc", "abd", "bcd bcd"]
    trained = train_bpe(texts, 260, show_progress=True)
    bars = capsys.readouterr().err
    assert re.search(r"(^|\r)pre-tokenize: 100%.* 3/3 .*text/s", bars), bars
    final = 256 + len(trained.merges)
    assert re.search(rf"(^|\r)merges: .* {final}/260 ", bars), bars  # starts at the 256 bytes, one per new token
    assert not re.search(rf" {final + 1}/260 ", bars), bars


def test_training_is_silent_by_default(capsys) -> None:
    train_bpe(["abc abc"], 260)
    count_pretokens(["abc abc"], PATTERNS["gpt2"])
    assert capsys.readouterr().err == ""
