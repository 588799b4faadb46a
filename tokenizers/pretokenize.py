"""Pre-tokenization: cutting text into pieces that BPE merges never cross.

Byte-level BPE never merges across a pre-token boundary, so the split pattern decides
which tokens can exist (e.g. a word and the space before it, but never a word and the
punctuation after it). The two named patterns are GPT-2's and cl100k's (GPT-3.5/4);
any other string is compiled as a user-supplied regex (`regex` module syntax, which
supports ``\\p{L}`` classes and possessive quantifiers).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import regex

from tokformer.tokenizers.base import TokenizerError

PATTERNS: dict[str, str] = {
    "gpt2": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
    "cl100k": (
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
        r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
    ),
}

# GPT-2 pieces never cross the end of a run of non-space characters that whitespace
# follows (see :func:`chunker`), so GPT-2 text may be cut into "whitespace run + the
# non-space run after it" chunks and each chunk encoded on its own.
_GPT2_CHUNK = r"\s*+\S+|\s+"

# A cut after "<non-space>\n" and before a non-space character (``(?<=\S\n)(?=\S)``) is a piece
# boundary under both named patterns (no piece spans a newline followed by a non-space, and no
# lookahead sees past it), so texts can be split there and encoded in parallel with identical output.
# ``str.isspace`` is ``regex``'s ``\s`` plus these four separators, which ``\s`` does not match:
_NOT_REGEX_SPACE = frozenset("\x1c\x1d\x1e\x1f")


class PatternError(TokenizerError):
    """A pre-tokenization pattern that is neither a known name nor a valid regex."""


def resolve_pattern(pattern: str) -> str:
    """A pattern name ("gpt2", "cl100k") or a regex -> the regex source.

    A string that looks like a plain identifier but is no known name is an error rather
    than a regex, so that a typo such as ``gtp2`` fails loudly instead of silently
    splitting text on the literal word.
    """
    if pattern in PATTERNS:
        return PATTERNS[pattern]
    if pattern.isidentifier():
        raise PatternError(f"unknown pattern name {pattern!r}; known: {', '.join(PATTERNS)} (or pass a regex)")
    compile_pattern(pattern)
    return pattern


@cache
def compile_pattern(source: str) -> regex.Pattern[str]:
    """Compile a regex source once; a bad regex raises :class:`PatternError`."""
    try:
        return regex.compile(source)
    except regex.error as err:
        raise PatternError(f"invalid pre-tokenization regex {source!r}: {err}") from None


@cache
def pretokenizer(source: str) -> Callable[[str], list[str]]:
    """The function that cuts text into pre-tokens under the regex ``source``.

    The named patterns match every character, so ``findall`` is exact and fastest. A
    user-supplied regex may leave gaps; like Hugging Face's ``Split(behavior="Isolated")``
    we keep each gap as a piece of its own, so no text is ever dropped.
    """
    compiled = compile_pattern(source)
    if is_named(source):
        return compiled.findall

    def split_keeping_gaps(text: str) -> list[str]:
        pieces: list[str] = []
        end = 0
        for match in _bounded(compiled, text):
            if match.start() > end:
                pieces.append(text[end : match.start()])
            if match.end() > match.start():
                pieces.append(match.group())
            end = match.end()
        if end < len(text):
            pieces.append(text[end:])
        return pieces

    return split_keeping_gaps


#: Seconds a pattern that is not one of ours may spend on a text: a base, plus per MB of text. A
#: regex from someone's tokenizer.json can backtrack catastrophically on some input; tokformer
#: stops it with a one-line error rather than hang.
FOREIGN_REGEX_SECONDS = (2.0, 1.0)


def _bounded(compiled: regex.Pattern[str], text: str) -> list[regex.Match[str]]:
    """Every match of a user-supplied pattern in ``text``, or a PatternError when it runs past
    :data:`FOREIGN_REGEX_SECONDS` (the ``regex`` module's own timeout, checked as it matches)."""
    base, per_mb = FOREIGN_REGEX_SECONDS
    try:
        return list(compiled.finditer(text, timeout=base + per_mb * len(text) / 1e6))
    except TimeoutError:
        raise PatternError(f"the pre-tokenization regex {compiled.pattern[:80]!r} took too long on a text of "
                           f"{len(text)} characters (catastrophic backtracking?); fix or replace the pattern"
                           ) from None


@cache
def chunker(source: str) -> Callable[[str], list[str]]:
    r"""The function that cuts text into the units the encoder caches: pre-tokens or coarser.

    Splitting into pieces costs the encoder more than the cache lookups: a regex match
    per piece. Under the GPT-2 pattern whole words can be cut instead (about half as many
    matches), because a chunk's pieces, found in the chunk alone, are its pieces in the
    whole text. Chunk boundaries sit after a non-space run followed by whitespace. No
    GPT-2 piece crosses one: a piece holds whitespace after its first character only if
    it is all whitespace, so the piece holding the non-space character before the
    boundary ends there. No match decides differently in the chunk alone: the only
    character it could read past the chunk is the whitespace after it (end of text in
    the chunk), which stops every ``\p{L}+``, ``\p{N}+``, ``[^\s\p{L}\p{N}]+`` run and
    fails every contraction alike; a whitespace run inside a chunk is followed by the
    chunk's non-space run, so ``\s+(?!\S)`` sees the same character in both.

    Other patterns (cl100k's pieces cross whitespace: ``"\tfoo"``, ``".\n\n"``) get their
    pre-tokens.
    """
    if source == PATTERNS["gpt2"]:
        return compile_pattern(_GPT2_CHUNK).findall
    return pretokenizer(source)


def is_named(source: str) -> bool:
    """Whether a regex source is one of the named patterns (whose safe cut points we know)."""
    return source in PATTERNS.values()


def safe_chunks(text: str, target_size: int, pattern: str | None = None) -> list[str]:
    """Split ``text`` at safe cut points into chunks of roughly ``target_size`` characters.

    Only valid for the named patterns (see ``_NOT_REGEX_SPACE``); concatenating the chunks'
    pre-tokens gives exactly the pre-tokens of the whole text. Under GPT-2's ``pattern`` a cut may
    also go before any newline that follows a non-space (:func:`gpt2_safe_cut`), which indented text
    is full of.
    """
    find = gpt2_safe_cut if pattern == PATTERNS["gpt2"] else safe_cut
    chunks: list[str] = []
    start = 0
    while len(text) - start > target_size:
        cut = find(text, start + target_size)
        if cut < 0:
            break
        chunks.append(text[start:cut])
        start = cut
    chunks.append(text[start:])
    return chunks


def safe_cut(text: str, position: int) -> int:
    """The first safe cut point at or after ``position`` (a cut before ``text[i]``), or -1 if there is none.

    A walk from newline to newline with ``str.find``: a regex lookbehind search does the same,
    but tries the lookbehind at every character of text with no cut point (indented lines),
    which cost more than encoding it.
    """
    newline = text.find("\n", max(position - 1, 1))  # a cut at i needs text[i - 1] == "\n" and text[i - 2]
    while 0 <= newline < len(text) - 1:
        if _regex_non_space(text[newline - 1]) and _regex_non_space(text[newline + 1]):
            return newline + 1
        newline = text.find("\n", newline + 1)
    return -1


def gpt2_safe_cut(text: str, position: int) -> int:
    r"""The first cut at or after ``position`` before a newline that follows a non-space, or -1.

    Safe under GPT-2's pattern only: there a piece holding a newline is all whitespace (only
    ``\s+(?!\S)`` and ``\s+`` match one), so with a non-space before it the newline starts a piece;
    the piece before ends on that non-space in the chunk as in the text, and no GPT-2 alternative
    looks behind. (cl100k's ``[^\s\p{L}\p{N}]+[
]*`` puts ``".
"`` in one piece: not there.)
    """
    newline = text.find("\n", max(position, 1))
    while newline >= 0:
        if _regex_non_space(text[newline - 1]):
            return newline
        newline = text.find("\n", newline + 1)
    return -1


def _regex_non_space(char: str) -> bool:
    return not char.isspace() or char in _NOT_REGEX_SPACE
