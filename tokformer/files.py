"""A user's files: one place that turns every way a read fails into one message, and that says
where a command's result may not be written.

Whatever reads the file (``Path.read_text``, PIL, networkx, ``csv``), a missing,
unreadable or non-text file is reported the same way: one :class:`~tokformer.errors.DataError`
naming the file and the cause (docs/reliability.md, "Files"), never a traceback.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from tokformer.errors import DataError, TokformerError, UsageError


def where(path: str | os.PathLike) -> str:
    """``path``, and for a relative one where it was looked for: a missing file's message must say
    which directory it was relative to (a run evaluated from elsewhere reads its paths from there)."""
    if Path(path).expanduser().is_absolute():
        return str(path)
    return f"{path} (looked for {os.path.abspath(Path(path).expanduser())}: working directory {os.getcwd()})"


def file_error(path: str | os.PathLike, error: OSError | UnicodeDecodeError) -> DataError:
    """The DataError for ``error`` raised while reading ``path``."""
    if isinstance(error, UnicodeDecodeError):
        return DataError(f"{path} is not UTF-8 text (invalid byte at offset {error.start})")
    if isinstance(error, FileNotFoundError):
        return DataError(f"{where(path)}: no such file")
    if isinstance(error, IsADirectoryError):
        return DataError(f"{path} is a directory, not a file")
    if isinstance(error, PermissionError):
        return DataError(f"cannot read {path}: permission denied")
    return DataError(f"cannot read {path}: {error.strerror or error}")


@contextlib.contextmanager
def reading(path: str | os.PathLike) -> Iterator[Path]:
    """``with reading(path) as file: ...``: an OSError or UTF-8 decoding error inside the block
    becomes :func:`file_error`'s DataError. For readers of our own and other libraries' alike."""
    try:
        yield Path(path)
    except (OSError, UnicodeDecodeError) as error:
        raise file_error(path, error) from None


def regular(path: str | os.PathLike) -> Path:
    """``path``, unless it names a pipe, socket or device (a link is followed): a DataError naming it. For
    a reader that opens the file itself (safetensors, networkx): a FIFO would block it for good and a
    device (``/dev/zero``) never ends. A missing file or a folder is left to the reader to report."""
    file = Path(path)
    if file.exists() and not file.is_file() and not file.is_dir():
        raise DataError(f"{path} is not a regular file (a pipe, socket or device); give a file")
    return file


def wrong_size(path: Path, expected: int) -> str | None:
    """None when ``path`` is a file of ``expected`` bytes, else what is there instead (``"missing"``,
    ``"N bytes"``), for a record that says how large its data file is (a corpus, a shard)."""
    size = path.stat().st_size if path.is_file() else None
    if size == expected:
        return None
    return "missing" if size is None else f"{size} bytes"


def read_bytes(path: str | os.PathLike) -> bytes:
    """The file's bytes, or a DataError naming it. Only regular files are read (:func:`regular`)."""
    with reading(path) as file:
        return regular(file).read_bytes()


def read_text(path: str | os.PathLike) -> str:
    """The file's UTF-8 text, or a DataError naming it (missing, unreadable, a directory, not a regular
    file, not UTF-8). A leading byte-order mark (Windows editors write one) is dropped: it is never
    content, and kept it would make the first JSON line invalid or glue itself to the first sentence."""
    data = read_bytes(path)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise not_utf8(path, error) from None


def not_utf8(path: str | os.PathLike, error: UnicodeDecodeError) -> DataError:
    """The DataError for bytes of ``path`` that are not UTF-8, naming the line and column (1-based) of
    the first bad byte when ``error.object`` is the whole text (as :func:`read_text` decodes it)."""
    text, start = bytes(error.object), error.start
    line = text.count(b"\n", 0, start) + 1
    column = start - (text.rfind(b"\n", 0, start) + 1) + 1
    return DataError(f"{path}:{line} is not UTF-8 text (invalid byte 0x{text[start]:02x} at column {column})")


def read_lines(path: str | os.PathLike) -> list[str]:
    """The file's lines without line endings; DataError if it is unreadable, not UTF-8 or empty."""
    text = read_text(path)
    lines = text.split("\n")
    if lines and lines[-1] == "":  # the final newline ends the last line, it starts none
        lines.pop()
    if not lines:
        raise DataError(f"{path} is empty")
    return [line.removesuffix("\r") for line in lines]


def loads(text: str | bytes) -> Any:
    """``json.loads``, with nesting too deep for the parser (a few KB of ``[[[[...``, which makes
    ``json`` raise RecursionError) reported as the ``ValueError`` any other malformed JSON is."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def json_line(line: str, where: str) -> Any:
    """The JSON value of one line of a JSONL file, or a DataError naming ``where`` (``FILE:LINE``): an
    empty line, or one that is not JSON (nesting too deep included)."""
    if not line.strip():
        raise DataError(f"{where}: empty line; every line must hold a JSON object")
    try:
        return loads(line)
    except ValueError as error:  # a JSONDecodeError, or loads' "JSON nested too deeply"
        raise DataError(f"{where}: not valid JSON ({getattr(error, 'msg', error)})") from None


def check_text(text: str, where: str, name: str) -> None:
    """Refuse a lone surrogate in field ``name`` of a record read at ``where``: JSON's ``"\\ud800"`` escape
    reads as one, and the tokenizer, which has no UTF-8 bytes for it, would refuse it later without
    naming the line."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise DataError(f'{where}: "{name}" holds a lone surrogate (an unpaired \\ud800-\\udfff escape), '
                        "which is not text") from None


def read_json(path: str | os.PathLike) -> Any:
    """The JSON document in the file, or a DataError naming it (unreadable, not UTF-8, not JSON)."""
    text = read_text(path)
    try:
        return loads(text)
    except ValueError as error:
        raise DataError(f"{path} is not valid JSON: {error}") from None


#: The longest file name a file read by tokformer may give (Linux's PATH_MAX).
MAX_PATH_BYTES = 4096


def inside(folder: str | os.PathLike, name: Any, described: str, error: type[TokformerError] = DataError) -> Path:
    """``folder / name`` for a file name read from a file (an index, a manifest): refused in one line
    unless it is a relative path that stays inside ``folder``, no ``..``, not absolute, and not a link
    that leads out of it. ``described`` names the file and key the name came from.

    A name longer than :data:`MAX_PATH_BYTES` is refused before the file system sees it: resolving costs
    time in the square of the name's length (each of its parts joins and looks up the whole prefix), and
    no file system holds such a path."""
    folder = Path(folder)
    if not isinstance(name, str) or not name.strip():
        raise error(f"{described}: {shown(name)} is not a file name")
    if len(name.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        raise error(f"{described}: {shown(name)} is longer than {MAX_PATH_BYTES} bytes, more than a path may be")
    relative = PurePosixPath(name)
    if relative.is_absolute() or ".." in relative.parts or "\\" in name or "\0" in name:
        raise error(f"{described}: {shown(name)} points outside {folder}; file names there must be relative "
                    "to it, without '..'")
    path = folder / relative
    try:
        resolved = path.resolve()
    except (RuntimeError, OSError) as err:  # Python <= 3.12 raises RuntimeError on a loop of links
        raise error(f"{described}: {shown(name)} cannot be followed ({err})") from None
    if not resolved.is_relative_to(folder.resolve()):
        raise error(f"{described}: {shown(name)} is a link that leads outside {folder}")
    return path


def shown(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters: an error message quotes what it refuses without
    printing a huge value someone put in a file."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def check_output_file(out: str | os.PathLike, *, overwrite: bool, inputs: Sequence[str | os.PathLike] = (),
                      flag: str = "--out") -> Path:
    """``out`` as a Path, or a one-line UsageError where writing a command's result there would destroy
    something: a folder or another non-file; a file that exists, unless ``overwrite`` (the user asked to
    replace it); one of the command's own ``inputs``, even with ``overwrite`` (the result would replace
    the data it was made from); a path under a file (``notes.txt/a.png``: no folder can be made there).
    Checked before any work, so a refusal costs nothing."""
    path = Path(out)
    if not path.exists():
        folder = next(f for f in path.parents if f.exists())  # the nearest that is there
        if not folder.is_dir():
            raise UsageError(f"{flag} {out}: {folder} is a file, not a folder to write in; choose another path")
        return path
    if not path.is_file():
        raise UsageError(f"{flag} {out} is a folder or another non-file; give the path of a file to write")
    for given in inputs:
        if Path(given).exists() and os.path.samefile(path, given):
            raise UsageError(f"{flag} {out} is the input {given}: writing there would replace it; choose another "
                             "file")
    if not overwrite:
        raise UsageError(f"{flag} {out} exists; pass --overwrite to replace it")
    return path


def some_of(names: Sequence[str], shown: int = 3) -> str:
    """The first ``shown`` of ``names`` for a message, `` ...`` after them if there are more: ``a, b, c ...``."""
    return ", ".join(names[:shown]) + (" ..." if len(names) > shown else "")


def foreign_entries(folder: Path, owned: Iterable[str]) -> list[str]:
    """What under ``folder`` tokformer did not write: relative paths that no pattern of ``owned``
    names (``*`` within one name; a last part ``**``: a folder and all below it; a folder some pattern
    goes through is walked into), each folder not walked into with a trailing ``/``. A temporary file
    beside one of ours (``.NAME.XXXX``, :func:`tokformer.atomic.write_atomic`'s) is ours. What a
    command that replaces a whole folder (``--overwrite``) may delete is what this leaves out."""
    patterns = [PurePosixPath(p).parts for p in owned]
    found: list[str] = []

    def walk(folder: Path, parts: tuple[str, ...]) -> None:
        for entry in sorted(folder.iterdir()):
            path, is_file = (*parts, entry.name), entry.is_file()  # a link to a file counts as one: only it goes
            if any(_covers(p, path, is_file) for p in patterns):
                continue
            if entry.is_dir() and not entry.is_symlink() and any(_leads_into(p, path) for p in patterns):
                walk(entry, path)
            elif not (is_file and any(_is_temporary_of(p, path) for p in patterns)):
                found.append("/".join(path) + ("/" if entry.is_dir() else ""))

    walk(folder, ())
    return found


def _covers(pattern: tuple[str, ...], path: tuple[str, ...], is_file: bool) -> bool:
    """Whether ``pattern`` names ``path``, a file, or, ending in ``**``, a folder ``path`` is below."""
    if pattern[-1] == "**":
        head = pattern[:-1]
        return len(path) > len(head) and _parts_match(head, path[: len(head)])
    return is_file and len(path) == len(pattern) and _parts_match(pattern, path)


def _leads_into(pattern: tuple[str, ...], folder: tuple[str, ...]) -> bool:
    """Whether ``pattern`` names something inside ``folder``."""
    return len(pattern) > len(folder) and _parts_match(pattern[: len(folder)], folder)


def _is_temporary_of(pattern: tuple[str, ...], path: tuple[str, ...]) -> bool:
    """Whether ``path`` is a temporary file written beside a file ``pattern`` names (``.NAME.XXXX``); a
    ``**`` pattern's folder holds anything, so :func:`_covers` has taken what this would match of it."""
    return (len(path) == len(pattern) and _parts_match(pattern[:-1], path[:-1])
            and fnmatch.fnmatchcase(path[-1], f".{pattern[-1]}.*"))


def _parts_match(pattern: tuple[str, ...], path: tuple[str, ...]) -> bool:
    return all(fnmatch.fnmatchcase(name, part) for part, name in zip(pattern, path, strict=True))
