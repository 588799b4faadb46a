"""The compiled BPE backends give the pure-Python encoder's ids, token for token, or are not used.

Each installed library (riptoken, tiktoken) is compared with the reference on random Unicode
from every plane (surrogates included), every special-token mode, long runs and whitespace
runs, the code points whose Unicode class the libraries' tables do not know, and real text;
the vocabularies it must refuse, and the fallback when none is installed, are tested too.
"""

from __future__ import annotations

import logging
import pickle
import random
import sysconfig
from pathlib import Path

import pytest
import regex
from hf_bpe import train_hf
from hypothesis import given, settings
from hypothesis import strategies as st

from tokformer import machine
from tokformer.tokenizers import BPETokenizer, SurrogateError, TokenizerError, bpe_backend
from tokformer.tokenizers.bpe_backend import VERIFIED_PATTERNS, pattern_for_library

LIBRARIES = [name for name in bpe_backend.LIBRARIES if bpe_backend._library(name) is not None]
pytestmark = pytest.mark.skipif(not LIBRARIES, reason="no compiled BPE library installed")
SPECIALS = ["<|endoftext|>", "<|end|>", "<|end|>x"]  # one special the prefix of another
CORPUS = [
    "the cat sat on the mat; the dog's bed isn't 42 feet. 1234567 THE'LL 'S\n" * 8,
    "Grüße aus München, 안녕하세요 세계, 你好世界, 🙂🚀👍🏽 emoji.\n\u3000全角\u00a0nbsp\n" * 4,
    "def add(a, b):\n    return a + b\n\n\n\tclass Thing:  # comment   \n        pass\r\n" * 4,
]
BYTES = {bytes([b]): b for b in range(256)}
WHITESPACE = [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2003", "\x0b", "\x0c", "\x85", *"\x1c\x1d\x1e\x1f"]
ATOMS = [*WHITESPACE, *"aZé1٣.!'", "'s", "'T", "'ll", "'RE", "世界", "🙂", "👍🏽", "ab", "42", "<|end|>", "<|end|>x"]


def pair(pattern: str, library: str) -> tuple[BPETokenizer, BPETokenizer]:
    """The same trained vocabulary under the reference encoder and under ``library`` (a verified pattern's name)."""
    pattern = VERIFIED_PATTERNS[pattern]
    reference = BPETokenizer.train(CORPUS, 700, pattern=pattern, special_tokens=SPECIALS, backend="python")
    files = reference.files()
    compiled = BPETokenizer(files.vocab, files.merges, special_tokens=files.special_tokens, pattern=pattern,
                            backend=library)
    assert compiled.backend == library
    return reference, compiled


# riptoken runs GPT-2's pattern only (its long pre-tokens are guarded for that pattern alone)
PAIRS = [(p, lib) for p in VERIFIED_PATTERNS for lib in LIBRARIES if lib != "riptoken" or p == "gpt2"]


@pytest.fixture(scope="module", params=PAIRS, ids=str)
def tokenizers(request) -> tuple[BPETokenizer, BPETokenizer]:
    return pair(*request.param)


def same_result(reference: BPETokenizer, compiled: BPETokenizer, text: str, **options) -> None:
    """Equal ids, or the same SurrogateError (message included)."""
    try:
        expected = reference.encode(text, **options)
    except SurrogateError as err:
        with pytest.raises(SurrogateError) as raised:
            compiled.encode(text, **options)
        assert str(raised.value) == str(err)
        return
    assert compiled.encode(text, **options) == expected, repr(text[:200])


@settings(max_examples=150, deadline=None)
@given(text=st.text(st.characters(), max_size=300), mode=st.sampled_from([(), ["<|end|>"], "all"]))
def test_random_unicode_of_every_category_gives_the_reference_ids(tokenizers, text, mode):
    same_result(*tokenizers, text, allowed_special=mode)


@settings(max_examples=150, deadline=None)
@given(text=st.lists(st.sampled_from(ATOMS), max_size=80).map("".join), mode=st.sampled_from([(), "all"]))
def test_whitespace_contractions_and_specials_give_the_reference_ids(tokenizers, text, mode):
    same_result(*tokenizers, text, allowed_special=mode)


def test_code_points_of_every_block_in_every_context_give_the_reference_ids(tokenizers):
    """Every 11th code point and every one the library's Unicode tables lack, each beside a letter, a digit, a
    space and an apostrophe: the class decisions (the widened classes' own test checks all 1.1M alone)."""
    reference, compiled = tokenizers
    newer = regex.findall(r"\\x\{([0-9a-f]+)\}(?:-\\x\{([0-9a-f]+)\})?", "".join(
        bpe_backend._class_differences(compiled.backend).values()))
    points = {c for c in range(0, 0x110000, 11) if not 0xD800 <= c <= 0xDFFF}
    points |= {c for first, last in newer for c in range(int(first, 16), int(last or first, 16) + 1)}
    chars = [chr(c) for c in sorted(points)]
    for start in range(0, len(chars), 20_000):
        text = "".join(f"a{c}1 {c}{c}'{c}\n" for c in chars[start : start + 20_000])
        assert compiled.encode(text) == reference.encode(text), f"code points from U+{ord(chars[start]):04X}"


@pytest.mark.parametrize("text", ["a" * 20_000, " " * 20_000, "\n" * 5000 + "x", "1" * 9999, "🙂" * 3000,
                                  "ab" * 8000, " \t" * 5000 + "x", "'s" * 4000, "<|end|>" * 500,
                                  "the cat\n" * 900 + "世" * 700 + "\nsat\n" + "\n" * 600 + "x\n" + "mat\n" * 900])
def test_long_runs_give_the_reference_ids(tokenizers, text):
    same_result(*tokenizers, text)
    same_result(*tokenizers, text, allowed_special="all")


def test_real_text_gives_the_reference_ids(tokenizers):
    reference, compiled = tokenizers
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for name in ["argparse.py", "textwrap.py", "difflib.py", "this.py", "codecs.py"]:
        text = (stdlib / name).read_text(encoding="utf-8")
        assert compiled.encode(text) == reference.encode(text), name
    assert compiled.encode_batch(CORPUS) == reference.encode_batch(CORPUS)


def test_a_lone_surrogate_is_refused_naming_its_index(tokenizers):
    _, compiled = tokenizers
    with pytest.raises(SurrogateError, match="U\\+DC00 at index 10"):
        compiled.encode("abc<|end|>\udc00", allowed_special="all")


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_batch_on_threads_or_the_librarys_own_and_a_large_text_cut_for_threads_give_the_serial_ids(library):
    _, compiled = pair("gpt2", library)
    texts = [CORPUS[i % 3][i:] for i in range(40)] + ["x" * 300 + " " * 200]  # one long run: riptoken's check
    serial = [compiled.encode(t) for t in texts]
    try:
        assert compiled.encode_batch(texts, num_workers=machine.cores()) == serial  # riptoken: its Rayon pool
        assert compiled.encode_batch(texts[:-1], num_workers=machine.cores()) == serial[:-1]
        more = machine.cores() + 1
        assert compiled.encode_batch(texts, num_workers=more) == serial
        assert compiled._executor is not None and compiled._executor[0] == (more, True)  # threads, no processes
        big = "".join(CORPUS) * 30
        assert compiled.encode(big, num_workers=2) == compiled.encode(big)
        with pytest.raises(SurrogateError, match="U\\+D800 at index 1;"):
            compiled.encode_batch(["ok", "a\ud800", "b"], num_workers=machine.cores())
    finally:
        compiled.close()


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_pickled_tokenizer_builds_its_own_compiled_encoder(library):
    _, compiled = pair("gpt2", library)
    copy = pickle.loads(pickle.dumps(compiled))
    assert copy.backend == library
    assert copy.encode(CORPUS[1]) == compiled.encode(CORPUS[1])


# ----------------------------------------------------------------- files from elsewhere


def test_gpt2_vocab_and_merges_files_load_onto_the_compiled_backend(tmp_path):
    reference, _ = pair("gpt2", LIBRARIES[0])
    vocab_path, merges_path = reference.save_vocab_merges(tmp_path)
    loaded = BPETokenizer.from_vocab_merges(vocab_path, merges_path, special_tokens=SPECIALS)
    assert loaded.backend == LIBRARIES[0]
    for text in CORPUS:
        assert loaded.encode(text, allowed_special="all") == reference.encode(text, allowed_special="all")


@pytest.mark.parametrize("pattern", ["gpt2", "qwen2"])
def test_a_tokenizer_json_trained_by_hugging_face_loads_onto_the_compiled_backend(tmp_path, pattern):
    """HF's own trainer, the GPT-2 pattern or Qwen2's (a Split regex before ByteLevel); ids equal HF's."""
    source = VERIFIED_PATTERNS[pattern]
    reference = train_hf(CORPUS, 600, "gpt2" if pattern == "gpt2" else source, 0, ["<s>"])  # a name or a regex
    path = tmp_path / "tokenizer.json"
    reference.save(str(path))
    loaded = BPETokenizer.from_hf_json(path)
    assert loaded.pattern == source
    assert loaded.backend == (LIBRARIES[0] if pattern == "gpt2" else next(n for n in LIBRARIES if n != "riptoken"))
    for text in [*CORPUS, "x 12345 ٣٤٥ 'LL\n\n  y"]:
        assert loaded.encode(text) == reference.encode(text, add_special_tokens=False).ids


# ----------------------------------------------------------------- what must stay in Python


@pytest.mark.parametrize(
    ("vocab", "merges", "reason"),
    [
        # "abc" is built as (ab, c), but "bc" merges first: the merges leave "a" + "bc", which a
        # library would join into "abc" (its bytes are a token). The Python encoder gives [97, 257].
        (BYTES | {b"bc": 256, b"ab": 257, b"abc": 258}, [(b"b", b"c"), (b"a", b"b"), (b"ab", b"c")],
         "not what the merges make of its own bytes"),
        (BYTES | {b"ab": 257, b"cd": 256}, [(b"a", b"b"), (b"c", b"d")], "do not follow the merge order"),
        (BYTES | {b"ab": 256, b"xyz": 257}, [(b"a", b"b")], "made by no merge"),
    ],
)
def test_a_vocabulary_a_library_would_encode_differently_stays_in_python(vocab, merges, reason, caplog):
    with caplog.at_level(logging.INFO, logger=bpe_backend.__name__):
        auto = BPETokenizer(vocab, merges)
        assert auto.backend == "python"
    assert reason in caplog.text
    for library in LIBRARIES:
        with pytest.raises(TokenizerError, match=f"backend {library} cannot encode this tokenizer exactly: .*{reason}"):
            _ = BPETokenizer(vocab, merges, backend=library).backend
    if reason.startswith("not what"):
        assert auto.encode("abc") == [97, 256]


@pytest.mark.skipif("riptoken" not in LIBRARIES or "tiktoken" not in LIBRARIES, reason="needs riptoken and tiktoken")
def test_riptoken_alone_breaks_ties_differently_past_500_bytes_so_long_pieces_go_to_tiktoken():
    """Why the guard exists: riptoken's own result for one pre-token of 502 newlines is not the merges' result."""
    reference, guarded = pair("gpt2", "riptoken")
    raw = bpe_backend._constructor("riptoken")(dict(reference.vocab), VERIFIED_PATTERNS["gpt2"])
    newline_pair = reference.vocab[b"\n\n"]
    for count in (bpe_backend.RIPTOKEN_EXACT_PIECE_BYTES + 2, 3000):
        text = "\n" * count + "x"
        expected = reference.encode(text)
        assert expected[0] == newline_pair and raw(text) != expected  # the leftmost pair merges first
        assert guarded.encode(text) == expected
    edge = " " + "a" * 124 + "é" * 200  # 125 characters of one run, 526 bytes: one pre-token past the limit
    assert guarded.encode(edge) == reference.encode(edge)
    with pytest.raises(TokenizerError, match="guarded for GPT-2's pattern only"):
        _ = BPETokenizer(reference.vocab, reference.merges, pattern="cl100k", backend="riptoken").backend


def test_a_pattern_nobody_verified_stays_in_python():
    """A user's regex may leave gaps between matches: we keep them as pieces, the libraries drop them."""
    tokenizer = BPETokenizer(BYTES, [], pattern=r"\w+")
    assert tokenizer.backend == "python"
    assert tokenizer.encode("ab, c") == list(b"ab, c")
    for library in LIBRARIES:
        assert pattern_for_library(library, r"\w+") is None


def test_without_a_compiled_library_tokformer_encodes_in_python_and_says_so_once(monkeypatch, caplog):
    monkeypatch.setattr(bpe_backend, "_library", lambda name: None)
    bpe_backend._say_once.cache_clear()
    with caplog.at_level(logging.INFO, logger=bpe_backend.__name__):
        first = BPETokenizer(BYTES | {b"ab": 256}, [(b"a", b"b")])
        second = BPETokenizer(BYTES | {b"ab": 256}, [(b"a", b"b")])
        assert first.backend == second.backend == "python"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "pip install riptoken" in warnings[0].getMessage()
    assert first.encode("abab") == [256, 256]
    with pytest.raises(TokenizerError, match="riptoken is not installed"):
        _ = BPETokenizer(BYTES, [], backend="riptoken").backend
    bpe_backend._say_once.cache_clear()


def test_an_unknown_backend_name_is_refused_at_once():
    with pytest.raises(TokenizerError, match="unknown BPE backend 'rust'; choose one of auto, python, riptoken"):
        BPETokenizer(BYTES, [], backend="rust")


# ----------------------------------------------------------------- the Unicode tables


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("cls", [r"\p{L}", r"\p{N}", r"[^\s\p{L}\p{N}]", r"[^\r\n\p{L}\p{N}]?\p{L}+"])
def test_a_widened_class_matches_exactly_the_characters_regex_matches(library, cls):
    """The property the widening rests on: after it, the library's engine puts every code point where
    ``regex`` does (letters and digits newer than its Unicode tables included)."""
    every = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    differences = bpe_backend._class_differences(library)
    assert differences is not None
    encode = bpe_backend._constructor(library)(BYTES, bpe_backend.widened(cls, differences))
    assert bytes(encode(every)).decode("utf-8") == "".join(regex.findall(cls, every))


def test_widening_appends_inside_a_class_and_wraps_outside_one():
    assert bpe_backend.widened(r" ?\p{L}+|[^\s\p{N}]|\\p{L}", {r"\p{L}": "X", r"\p{N}": "Y"}) == (
        r" ?[\p{L}X]+|[^\s\p{N}Y]|\\p{L}"
    )


def test_random_documents_from_every_plane_give_the_reference_ids(tokenizers):
    reference, compiled = tokenizers
    rng = random.Random(0)
    for _ in range(20):
        text = "".join(chr(rng.choice([rng.randrange(0x80), rng.randrange(0x800), rng.randrange(0x10000),
                                       rng.randrange(0x10000, 0x110000)])) for _ in range(2000))
        text = regex.sub(r"[\ud800-\udfff]", " ", text)
        assert compiled.encode(text) == reference.encode(text)


def test_a_loaded_tokenizer_changes_backend_and_the_cli_offers_every_choice(tmp_path):
    from click.testing import CliRunner

    from tokformer.cli import main

    reference, _ = pair("gpt2", LIBRARIES[0])
    reference.save(tmp_path / "tok")
    loaded = BPETokenizer.load(tmp_path / "tok")
    assert loaded.backend == LIBRARIES[0]
    loaded.use_backend("python")
    assert loaded.backend == "python" and loaded.encode(CORPUS[0]) == reference.encode(CORPUS[0])
    with pytest.raises(TokenizerError, match="unknown BPE backend 'fast'"):
        loaded.use_backend("fast")
    command = main.commands["tokenizer"].commands["encode"]
    option = next(p for p in command.params if p.name == "backend")
    assert tuple(option.type.choices) == bpe_backend.CHOICES
    runner = CliRunner()
    for backend in ("python", LIBRARIES[0]):
        result = runner.invoke(main, ["tokenizer", "encode", "--tokenizer", str(tmp_path / "tok"), "--backend", backend,
                                      "-q", CORPUS[1]])
        assert result.exit_code == 0, result.output
        assert result.output.split() == [str(i) for i in reference.encode(CORPUS[1])]
    if "riptoken" in LIBRARIES:  # riptoken cannot run cl100k's pattern: one line says why, exit 2
        BPETokenizer.train(CORPUS, 300, pattern="cl100k").save(tmp_path / "cl100k")
        result = runner.invoke(main, ["tokenizer", "encode", "--tokenizer", str(tmp_path / "cl100k"),
                                      "--backend", "riptoken", "x"])
        assert result.exit_code == 2 and "guarded for GPT-2's pattern only" in result.output
        assert "Traceback" not in result.output


@pytest.mark.parametrize("library", LIBRARIES)
def test_words_of_letters_newer_than_the_librarys_tables_give_the_reference_ids(library):
    """End to end, where it shows: a vocabulary whose merges join such letters with "a". The library's own
    pattern splits them off as punctuation (its ids differ); the widened one does not."""
    body = bpe_backend._class_differences(library)[r"\p{L}"]
    letters = "".join(chr(int(h, 16)) for h in regex.findall(r"\\x\{([0-9a-f]+)\}", body)[:30])
    if not letters:
        pytest.skip(f"{library}'s Unicode tables know every letter regex knows")
    words = [f"{a}{b}{a} {b}a{b}" for a in letters for b in letters[:8]]
    reference = BPETokenizer.train(CORPUS + [" ".join(words)] * 3, 1000, backend="python")
    compiled = BPETokenizer(reference.vocab, reference.merges, backend=library)
    raw = bpe_backend._constructor(library)(dict(reference.vocab), reference.pattern)
    assert [compiled.encode(w) for w in words] == [reference.encode(w) for w in words]
    assert [raw(w) for w in words] != [reference.encode(w) for w in words]


# ----------------------------------------------------------------- the pieces, one by one (mutation testing: the
# module's caches credit a whole computation to the first test that asked for it)


def test_a_class_body_joins_neighbouring_code_points_into_ranges():
    assert bpe_backend._class_body({"A", "B", "C", "E", "\U000107bb"}) == r"\x{41}-\x{43}\x{45}\x{107bb}"
    assert bpe_backend._class_body(set()) == ""


class Recorder:
    """A fake encoder that records what it was given and returns one id per character."""

    def __init__(self, mark: int) -> None:
        self.mark, self.seen = mark, []

    def __call__(self, text: str) -> list[int]:
        self.seen.append(text)
        return [self.mark] * len(text)

    def batch(self, texts: list[str]) -> list[list[int]]:
        self.seen.append(list(texts))
        return [[self.mark] * len(t) for t in texts]


@pytest.mark.skipif("riptoken" not in LIBRARIES, reason="the guard runs on riptoken")
def test_the_guard_sends_only_the_parts_with_a_long_run_to_the_exact_encoder():
    fast, exact = Recorder(1), Recorder(2)
    encode, batch = bpe_backend._guarded(fast, fast.batch, exact)
    assert encode("short text\n") == [1] * 11 and exact.seen == []
    # lines that start with a space have no cut before a non-space after a newline, only GPT-2's cuts
    text = " a\n" * 3000 + "x" * 130 + "\n" + " b\n" * 3000
    ids = encode(text)
    assert len(ids) == len(text) and set(ids) == {1, 2}
    assert sum(map(len, exact.seen)) < len(text) // 4 and any("x" * 130 in part for part in exact.seen)
    fast.seen.clear()
    texts = ["one\n", " two", "three "]
    assert batch(texts) == [[1] * len(t) for t in texts] and fast.seen == [texts]  # one call for the batch
    fast.seen.clear()
    near = ["a" * 124, "b" * 124]  # runs of 124 each: joined by a newline, still no run of 125
    assert batch(near) == [[1] * 124] * 2 and fast.seen == [near]
    fast.seen.clear()
    assert batch(["one", "y" * 200, "two"]) == [[1] * 3, [2] * 200, [1] * 3]
    assert fast.seen == ["one", "two"]  # the texts checked one by one, the clean ones encoded fast


def test_a_pattern_is_not_widened_where_the_tables_cannot_be_reconciled(monkeypatch):
    monkeypatch.setattr(bpe_backend, "_class_differences", lambda library: None)
    assert pattern_for_library(LIBRARIES[0], VERIFIED_PATTERNS["gpt2"]) is None


def test_two_merges_that_make_the_same_token_are_refused():
    vocab = BYTES | {b"ab": 256, b"bc": 257, b"abc": 258}
    refusal = bpe_backend.vocabulary_refusal(bpe_backend.Vocabulary(
        vocab, [(b"a", b"b"), (b"b", b"c"), (b"ab", b"c"), (b"a", b"bc")], {}, list(range(256)), "gpt2"))
    assert refusal == "token ids do not follow the merge order (merge 3 makes id 258)"


def test_reasons_name_the_library_the_limit_and_the_pattern(caplog):
    pattern = r"(?:\w+|\s+)" + "|x" * 40
    bpe_backend._say_once.cache_clear()
    with caplog.at_level(logging.INFO, logger=bpe_backend.__name__):
        assert BPETokenizer(BYTES, [], pattern=pattern).backend == "python"
    shown = repr(pattern[:60])
    assert [r.getMessage() for r in caplog.records] == [
        "BPE encodes in Python: " + "; ".join(f"{n} is not verified to pre-tokenize with the pattern {shown}"
                                              for n in LIBRARIES)]
    if "riptoken" in LIBRARIES:
        with pytest.raises(TokenizerError, match="exact on pre-tokens of up to 500 bytes, guarded for GPT-2's"):
            _ = BPETokenizer(BYTES, [], pattern="cl100k", backend="riptoken").backend
    bpe_backend._say_once.cache_clear()


def test_a_missing_library_is_named_even_for_a_vocabulary_it_could_not_run(monkeypatch):
    monkeypatch.setattr(bpe_backend, "_library", lambda name: None)
    vocab = BYTES | {b"ab": 257, b"cd": 256}
    with pytest.raises(TokenizerError, match="riptoken is not installed$"):
        _ = BPETokenizer(vocab, [(b"a", b"b"), (b"c", b"d")], backend="riptoken").backend


@pytest.mark.skipif("riptoken" not in LIBRARIES, reason="riptoken's own batch call")
def test_many_short_texts_on_every_core_go_to_riptokens_own_batch_call(monkeypatch):
    reference, compiled = pair("gpt2", "riptoken")
    assert compiled._compiled.encode_ordinary_batch is not None
    texts = [f"line {i}: the cat\n" for i in range(2 * 256 * machine.cores() + 1)]
    assert compiled.encode_batch(texts, num_workers=machine.cores()) == [reference.encode(t) for t in texts]
    assert compiled._executor is None  # no thread pool was started
