"""The GPT-2 byte-to-unicode alphabet used by byte-level BPE files.

Byte-level BPE works on raw UTF-8 bytes, but `vocab.json`, `merges.txt` and Hugging Face's
`tokenizer.json` store tokens as *strings*. GPT-2 maps every byte to one printable
unicode character (printable ASCII and Latin-1 bytes map to themselves, the rest to
U+0100 onwards) so that tokens are readable and never contain whitespace or control
characters. We only need the mapping at the file-format edge: in memory a token is bytes.
"""

from __future__ import annotations

from functools import cache


@cache
def bytes_to_unicode() -> dict[int, str]:
    """Byte value -> its printable stand-in character (GPT-2's table)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


@cache
def unicode_to_bytes() -> dict[str, int]:
    """Inverse of :func:`bytes_to_unicode`."""
    return {c: b for b, c in bytes_to_unicode().items()}


def alphabet_order() -> list[int]:
    """The 256 byte values in the order Hugging Face's trainer gives them ids.

    HF sorts the initial alphabet by the code point of each byte's stand-in character,
    so byte ids follow this order rather than 0..255.
    """
    table = bytes_to_unicode()
    return sorted(range(256), key=lambda b: ord(table[b]))


def token_to_str(token: bytes) -> str:
    """Bytes of a token -> its byte-level string form."""
    table = bytes_to_unicode()
    return "".join(table[b] for b in token)


def str_to_token(text: str) -> bytes:
    """Byte-level string form -> the token's bytes; KeyError on a character outside the alphabet."""
    table = unicode_to_bytes()
    return bytes(table[c] for c in text)
