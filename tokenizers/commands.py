"""What the ``tokformer tokenizer`` commands do, as plain library calls.

The CLI only parses options and prints; everything a user can get wrong (a missing,
empty, binary or non-UTF-8 file, an unknown pattern, a corrupt tokenizer, a bad id)
raises :class:`~tokformer.tokenizers.base.TokenizerError` with a one-line message
naming the problem, which the CLI prints without a traceback (exit code 2).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from tqdm.auto import tqdm

from tokformer.files import read_bytes, reading
from tokformer.tokenizers.base import TOKENIZER_CONFIG_FILE, TokenizerError, read_config
from tokformer.tokenizers.bpe import HF_FILE, BPETokenizer
from tokformer.tokenizers.registry import load_tokenizer

PROGRESS_MIN_CHARS = 1 << 20  # show a progress bar only for inputs larger than this


def read_text_file(path: str | Path) -> str:
    """A file's text, or a clear error if it is missing, binary or not UTF-8."""
    data = read_bytes(path)
    nul = data.find(b"\0")
    if nul >= 0:
        raise TokenizerError(f"{path} looks binary (NUL byte at offset {nul})")
    with reading(path):
        return data.decode("utf-8")


def check_out(out: Path, overwrite: bool) -> None:
    """Refuse an ``out`` that holds anything but (with ``overwrite``) a tokenizer tokformer saved: the
    files a BPE saves (``tokenizer_config.json``, ``tokenizer.json``) are the names a Hugging Face
    tokenizer folder uses, whose files saving over them would destroy."""
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return
    if not out.is_dir():
        raise TokenizerError(f"{out} is a file, not a directory to save the tokenizer in; choose another --out")
    names = sorted(p.name for p in out.iterdir())
    try:
        ours = set(names) <= {TOKENIZER_CONFIG_FILE, HF_FILE} and read_config(out)["type"] == BPETokenizer.type_name
    except TokenizerError:
        ours = False
    if not ours:
        shown = ", ".join(names[:3]) + (f" ({len(names)} entries)" if len(names) > 3 else "")
        raise TokenizerError(f"{out} holds {shown}, which is no tokenizer tokformer saved; saving there would "
                             "overwrite or mix with it: choose another --out")
    if not overwrite:
        raise TokenizerError(f"{out} already holds a tokenizer; pass --overwrite to replace it, or choose "
                             "another --out")


def train_tokenizer(
    data: Sequence[str | Path],
    vocab_size: int,
    out: str | Path,
    *,
    pattern: str = "gpt2",
    min_frequency: int = 0,
    special_tokens: Sequence[str] = (),
    show_progress: bool = False,
    overwrite: bool = False,
) -> BPETokenizer:
    """Train a byte-level BPE on the text files ``data`` and save it to ``out`` (new, empty, or with
    ``overwrite`` a tokenizer saved before: :func:`check_out`, before the training)."""
    check_out(Path(out), overwrite)
    if not data:
        raise TokenizerError("no training data: pass at least one file")
    texts = [read_text_file(path) for path in data]
    if not any(text.strip() for text in texts):
        raise TokenizerError(f"no text to train on: {', '.join(map(str, data))} holds only whitespace or nothing")
    tokenizer = BPETokenizer.train(
        texts,
        vocab_size,
        pattern=pattern,
        min_frequency=min_frequency,
        special_tokens=special_tokens,
        show_progress=show_progress,
    )
    tokenizer.save(out)
    return tokenizer


def load_text_tokenizer(directory: str | Path) -> BPETokenizer:
    """A saved tokenizer that encodes text (one with ``encode``/``decode``)."""
    tokenizer = load_tokenizer(directory)
    if not isinstance(tokenizer, BPETokenizer):
        raise TokenizerError(f"{directory} holds a {tokenizer.type_name!r} tokenizer, which does not encode text")
    return tokenizer


def encode_text(
    directory: str | Path, text: str, *, allow_special: bool = False, show_progress: bool = False,
    backend: str = "auto",
) -> list[int]:
    """Ids of ``text`` under the tokenizer saved in ``directory``, encoded by ``backend`` (see
    :class:`~.bpe.BPETokenizer`); a progress bar for long texts."""
    tokenizer = load_text_tokenizer(directory)
    tokenizer.use_backend(backend)
    allowed = "all" if allow_special else ()
    bar = tqdm(
        total=len(text), unit="char", unit_scale=True, disable=not show_progress or len(text) < PROGRESS_MIN_CHARS
    )
    ids: list[int] = []
    with bar:
        for chunk_chars, chunk_ids in tokenizer.iter_encode(text, allowed_special=allowed):
            ids += chunk_ids
            bar.update(chunk_chars)
    return ids


def parse_ids(words: Iterable[str]) -> list[int]:
    """Token ids from whitespace-separated words (command-line arguments or stdin)."""
    ids = []
    for word in words:
        try:
            ids.append(int(word))
        except ValueError:
            raise TokenizerError(f"not a token id: {word!r}") from None
    return ids


def decode_ids(directory: str | Path, ids: Sequence[int]) -> str:
    """Text of ``ids`` under the tokenizer saved in ``directory``."""
    return load_text_tokenizer(directory).decode(ids)
