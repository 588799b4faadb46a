"""Compiled encoders for byte-level BPE: which library runs a tokenizer's merges, and whether it may.

The pure-Python encoder of :class:`~.bpe.BPETokenizer` is the reference. A compiled library
(riptoken, or tiktoken, whose algorithm riptoken reimplements) is used in its place only where it
gives the same ids. Those libraries merge the adjacent pair whose *joined bytes* have the lowest
rank and emit a pre-token found whole in the vocabulary; Hugging Face's semantics, ours, merge the
adjacent pair with the lowest *merge rule*. The two agree when (:func:`vocabulary_refusal`):

1. ids grow with the merge order, so ids can serve as ranks;
2. every multi-byte token is the result of a merge, so the library cannot join two tokens into
   one the merges never build;
3. every token's own bytes merge to that token. Then no pair of tokens that joins into a third
   without being its merge can sit side by side in an encoding, and a pre-token found whole is
   what the merges make of it. (Vocabularies trained by BPE have all three.)

The pre-tokenizer must cut text the same way too (:func:`pattern_for_library`). The library
runs the pattern in Rust's regex engine, whose Unicode tables can be a version older than
those of the ``regex`` module: letters and digits added since are ``\\p{L}``/``\\p{N}`` here
and punctuation there. The pattern is widened with exactly those code points, found by asking
the library itself; a pattern the check cannot vouch for (any not in :data:`VERIFIED_PATTERNS`)
stays with the Python encoder, since a user's regex may leave gaps between matches, which we
keep as pieces and the libraries drop.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache

import regex

from tokformer.tokenizers.base import TokenizerError
from tokformer.tokenizers.bpe_merge import Ranks, merge_piece
from tokformer.tokenizers.pretokenize import PATTERNS, safe_chunks

log = logging.getLogger(__name__)

#: The compiled libraries in the order ``backend="auto"`` tries them (benchmarks/results/bpe.md
#: measures them against each other: riptoken is the faster; tiktoken is OpenAI's and
#: riptoken's own dependency, so it is there whenever riptoken is).
LIBRARIES = ("riptoken", "tiktoken")

#: riptoken merges a pre-token longer than this many UTF-8 bytes with another algorithm, which
#: breaks ties between equal pairs differently from tiktoken and Hugging Face ("\\n" * 502 starts
#: with a lone newline); such text goes to tiktoken (see :func:`_guarded`).
RIPTOKEN_EXACT_PIECE_BYTES = 500
#: Where a GPT-2 pre-token can be longer than that: it is an optional space and a run of one
#: kind (letters, digits, other, or whitespace), so at least 125 characters of \\S or of \\s in a row.
_GPT2_LONG_RUN = r"\S{125,}|\s{125,}"
_GUARDED_PART_CHARS = 4096  # a text with a long run is cut into parts about this long, each checked on its own
PYTHON = "python"
AUTO = "auto"
CHOICES = (AUTO, PYTHON, *LIBRARIES)

#: Pre-tokenization patterns whose every construct the libraries' engine runs as ``regex`` does
#: (alternation, greedy and bounded repeats, ``(?!\\S)``, ``(?i:...)``, classes): GPT-2's,
#: cl100k's (which is also Llama-3's), and Qwen2's (cl100k's with single digits). All three
#: match every character, so no text falls between matches.
VERIFIED_PATTERNS: dict[str, str] = {
    "gpt2": PATTERNS["gpt2"],
    "cl100k": PATTERNS["cl100k"],
    "qwen2": PATTERNS["cl100k"].replace(r"\p{N}{1,3}", r"\p{N}"),
}

_WIDENED_CLASSES = (r"\p{L}", r"\p{N}")  # widened with the code points the library's tables lack
_EQUAL_CLASSES = (r"\s", r"(?i:[sdmtlvre])")  # must already agree (whitespace; the contractions' case folding)
_PROPERTY = regex.compile(r"\\p\{[LN]\}")


class CompiledEncoder:
    """One library's encoder for one vocabulary: ``encode_ordinary(text)`` with no special tokens.

    The libraries release the GIL while they encode, so threads run it in parallel. Where the
    library has its own batch call on all cores (riptoken: its Rayon pool), ``encode_ordinary_batch``
    is it: for short texts, a thread handing the GIL back and forth for each one costs more than it
    encodes.
    """

    def __init__(self, name: str, encode_ordinary: Callable[[str], list[int]],
                 encode_ordinary_batch: Callable[[list[str]], list[list[int]]] | None = None) -> None:
        self.name = name
        self.encode_ordinary = encode_ordinary
        self.encode_ordinary_batch = encode_ordinary_batch


@dataclass(frozen=True)
class Vocabulary:
    """What a compiled encoder is built from: the tokenizer's vocabulary, merges and pattern."""

    vocab: Mapping[bytes, int]
    merges: Sequence[tuple[bytes, bytes]]
    ranks: Ranks
    byte_ids: Sequence[int]
    pattern: str


def rank_order_refusal(vocab: Mapping[bytes, int], merges: Sequence[tuple[bytes, bytes]],
                       byte_ids: Sequence[int]) -> str | None:
    """Why the ids cannot serve as tiktoken's ranks (condition 1: every merged token's id above every single
    byte's and above the ids the merges before it make), or None."""
    previous = max(byte_ids)
    for rank, (a, b) in enumerate(merges):
        token_id = vocab[a + b]
        if token_id <= previous:
            return f"token ids do not follow the merge order (merge {rank} makes id {token_id})"
        previous = token_id
    return None


def vocabulary_refusal(vocabulary: Vocabulary) -> str | None:
    """Why a library would not give this vocabulary's ids (see the module's conditions 1-3), or None."""
    vocab = vocabulary.vocab
    order = rank_order_refusal(vocab, vocabulary.merges, vocabulary.byte_ids)
    if order is not None:
        return order
    singles = {bytes([b]) for b in range(256)}
    made = [a + b for a, b in vocabulary.merges]
    unmade = vocab.keys() - singles - set(made)
    if unmade:
        return f"token {min(unmade)!r} is made by no merge"
    for token in made:
        alone = merge_piece(list(map(vocabulary.byte_ids.__getitem__, token)), vocabulary.ranks)
        if alone != [vocab[token]]:
            return f"token {token!r} is not what the merges make of its own bytes"
    return None


def pattern_for_library(library: str, pattern: str) -> str | None:
    """``pattern`` as the library must run it to cut text as ``regex`` does, or None if it cannot."""
    if pattern not in VERIFIED_PATTERNS.values():
        return None
    differences = _class_differences(library)
    return None if differences is None else widened(pattern, differences)


def widened(pattern: str, differences: Mapping[str, str]) -> str:
    """``pattern`` with each ``\\p{L}``/``\\p{N}`` also matching the code points ``differences`` gives it:
    appended inside a ``[...]`` class, a class of its own outside one (no verified pattern nests classes)."""
    out, inside, i = [], False, 0
    while i < len(pattern):
        found = _PROPERTY.match(pattern, i)
        if found:
            name, extra = found.group(), differences[found.group()]
            out.append(name + extra if inside else f"[{name}{extra}]")
            i = found.end()
        elif pattern[i] == "\\":
            out.append(pattern[i : i + 2])
            i += 2
        else:
            inside = {"[": True, "]": False}.get(pattern[i], inside)
            out.append(pattern[i])
            i += 1
    return "".join(out)


def build(library: str, vocabulary: Vocabulary) -> CompiledEncoder | str:
    """The library's encoder for ``vocabulary`` (one :func:`vocabulary_refusal` accepts), or why it cannot
    be had (a one-line reason)."""
    if _library(library) is None:
        return f"{library} is not installed"
    pattern = pattern_for_library(library, vocabulary.pattern)
    if pattern is None:
        return f"{library} is not verified to pre-tokenize with the pattern {vocabulary.pattern[:60]!r}"
    # Special tokens stay out: the tokenizer splits them off itself, with its own precedence rules.
    encode = _constructor(library)(dict(vocabulary.vocab), pattern)
    if library != "riptoken":
        return CompiledEncoder(library, encode)
    if vocabulary.pattern != PATTERNS["gpt2"]:
        limit = RIPTOKEN_EXACT_PIECE_BYTES
        return f"riptoken is exact on pre-tokens of up to {limit} bytes, guarded for GPT-2's pattern only"
    exact = build("tiktoken", vocabulary)
    if isinstance(exact, str):
        return f"riptoken needs tiktoken for its long pre-tokens: {exact}"
    batch = encode.__self__.encode_ordinary_batch  # the CoreBPE's own batch call
    return CompiledEncoder(library, *_guarded(encode, batch, exact.encode_ordinary))


def _constructor(library: str) -> Callable[[dict[bytes, int], str], Callable[[str], list[int]]]:
    """How to make the library's ``encode_ordinary`` from ranks and a pattern (its Rust core, unwrapped)."""
    if library == "riptoken":
        return lambda ranks, pattern: _library("riptoken").CoreBPE(ranks, {}, pattern).encode_ordinary
    return lambda ranks, pattern: (
        _library("tiktoken")
        .Encoding("tokformer", pat_str=pattern, mergeable_ranks=ranks, special_tokens={})
        ._core_bpe.encode_ordinary  # the Rust call: the wrapper would replace lone surrogates instead of refusing
    )


def _guarded(
    fast: Callable[[str], list[int]], fast_batch: Callable[[list[str]], list[list[int]]],
    exact: Callable[[str], list[int]],
) -> tuple[Callable[[str], list[int]], Callable[[list[str]], list[list[int]]]]:
    """``fast`` on text with no GPT-2 pre-token past :data:`RIPTOKEN_EXACT_PIECE_BYTES`, ``exact`` on the rest;
    and the same for a batch, whose texts are checked together first (joined by newlines, which no
    run of ``\\S`` crosses; a run of ``\\s`` that the join makes long only sends the batch to the check
    of each text).

    The check is one more pass of riptoken's regex engine over the text (whose ``\\s`` is ``regex``'s,
    :func:`_class_differences` checks), matching nothing in most text.
    """
    long_runs = _constructor("riptoken")({bytes([b]): b for b in range(256)}, _GPT2_LONG_RUN)

    def encode_ordinary(text: str) -> list[int]:
        if not long_runs(text):
            return fast(text)
        # only the parts that hold a long run go to tiktoken (CJK text has runs of letters without a space)
        parts = safe_chunks(text, _GUARDED_PART_CHARS, PATTERNS["gpt2"])
        return [i for part in parts for i in (exact(part) if long_runs(part) else fast(part))]

    def encode_ordinary_batch(texts: list[str]) -> list[list[int]]:
        if not long_runs("\n".join(texts)):
            return fast_batch(texts)
        return [encode_ordinary(text) for text in texts]

    return encode_ordinary, encode_ordinary_batch


@cache
def _library(name: str):  # noqa: ANN202 - a module or None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


@cache
def _class_differences(library: str) -> dict[str, str] | None:
    """For each widened class, the code points ``regex`` puts in it and the library does not, as a class body.

    None where the tables disagree the other way (the library counts a character that ``regex``
    does not), or where whitespace or case folding differ: no widening fixes those.
    """
    every = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    byte_ranks = {bytes([b]): b for b in range(256)}
    make = _constructor(library)

    def library_set(cls: str) -> set[str]:  # the characters the library's engine matches with ``cls``
        return set(bytes(make(byte_ranks, cls)(every)).decode("utf-8"))

    differences = {}
    for cls in _WIDENED_CLASSES:
        ours, theirs = set(regex.findall(cls, every)), library_set(cls)
        if theirs - ours:
            return None
        differences[cls] = _class_body(ours - theirs)
    if any(set(regex.findall(cls, every)) != library_set(cls) for cls in _EQUAL_CLASSES):
        return None
    return differences


def _class_body(chars: set[str]) -> str:
    """Code points as the inside of a Rust regex class: ``\\x{558}\\x{107bb}-\\x{107bf}``."""
    points = sorted(map(ord, chars))
    runs: list[list[int]] = []
    for point in points:
        if runs and runs[-1][1] == point - 1:
            runs[-1][1] = point
        else:
            runs.append([point, point])
    return "".join(f"\\x{{{a:x}}}" if a == b else f"\\x{{{a:x}}}-\\x{{{b:x}}}" for a, b in runs)


def checked_choice(choice: str) -> str:
    """``choice`` if it names a backend (one of :data:`CHOICES`); a TokenizerError listing them if not."""
    if choice not in CHOICES:
        raise TokenizerError(f"unknown BPE backend {choice!r}; choose one of {', '.join(CHOICES)}")
    return choice


def select(choice: str, vocabulary: Vocabulary) -> CompiledEncoder | None:
    """The encoder for ``backend=choice``: a library's, or None for the Python encoder.

    ``"auto"`` takes the first library of :data:`LIBRARIES` that accepts the vocabulary, and
    says once (at info level, or a warning when no library is installed) why it runs none.
    Naming a library that cannot encode it exactly is an error.
    """
    if checked_choice(choice) == PYTHON:
        return None
    reasons = []
    libraries = LIBRARIES if choice == AUTO else (choice,)
    refusal = vocabulary_refusal(vocabulary) if any(_library(name) for name in libraries) else None
    for library in libraries:
        built = refusal or build(library, vocabulary)
        if isinstance(built, CompiledEncoder):
            return built
        reasons.append(built)
    if choice != AUTO:
        raise TokenizerError(f"BPE backend {choice} cannot encode this tokenizer exactly: {reasons[0]}")
    _say_once("; ".join(dict.fromkeys(reasons)), missing=all(_library(name) is None for name in LIBRARIES))
    return None


@cache
def _say_once(reasons: str, missing: bool) -> None:
    if missing:
        log.warning("no compiled BPE library installed (pip install riptoken): encoding in Python, slower")
    else:
        log.info("BPE encodes in Python: %s", reasons)
