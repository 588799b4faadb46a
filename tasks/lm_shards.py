"""Corpora bigger than memory: token ids in fixed-size memory-mapped shards, tokenized once.

``tokformer data prepare lm`` (:func:`prepare_lm`) encodes a text corpus on every core into a
directory that any number of runs then stream from, without re-encoding and without holding it
in memory::

    SHARDS/
      shards.json        the index: format, dtype, vocabulary, end-of-text id, per-shard token counts
      shard-00000.bin    raw little-endian uint16 ids (uint32 past 65536 tokens), shard_tokens of them
      shard-00001.bin    ... the last shard holds the remainder
      tokenizer/         the BPE the ids are of; the index records its fingerprint

The stream is the lm task's packed corpus cut into files: documents (one per source file, in
``data_seed`` order) each followed by the end-of-text id, so a shard boundary falls anywhere,
mid-document included. :func:`write_shards` writes any iterable of token-id sequences in this
format (the path for Hugging Face ``datasets`` users, docs/lm.md), and :class:`ShardedCorpus`
reads it back as one flat, memory-mapped id space for :class:`~.lm_data.WindowDataset`.

Everything is written into a hidden sibling directory and renamed into place once complete
(index last, everything fsynced), so a crash leaves the old output or the new one, never a
corpus with missing shards. Nothing is pickled to disk: the index is JSON, the shards raw ids.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import multiprocessing
import os
import random
import signal
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from tokformer import files, machine
from tokformer.engine import (
    LOGGER,
    TOKENIZER_DIR,
    hold_lock,
    progress,
    staged_folder,
    tokenizer_fingerprint,
    write_json_atomic,
)
from tokformer.errors import ConfigError, DataError, Interrupted
from tokformer.files import foreign_entries, inside, read_json, some_of
from tokformer.signals import leave_stopping_to_the_parent
from tokformer.tasks import lm_data
from tokformer.tokenizers.base import TOKENIZER_CONFIG_FILE
from tokformer.tokenizers.bpe import HF_FILE, BPETokenizer

INDEX_FILE = "shards.json"
#: What a shards folder holds (:func:`tokformer.files.foreign_entries` patterns): what ``--overwrite`` may delete.
SHARDS_FOLDER = (INDEX_FILE, "shard-[0-9][0-9][0-9][0-9][0-9].bin", f"{TOKENIZER_DIR}/{TOKENIZER_CONFIG_FILE}",
                 f"{TOKENIZER_DIR}/{HF_FILE}")
FORMAT = "tokformer-lm-shards"
VERSION = 1
SHARD_TOKENS = 100_000_000  # 200 MB of uint16 per shard: few files, each small enough to copy
MAX_OPEN = 64  # memory maps kept open at once: each holds a file descriptor
SCAN_CHUNK = 1 << 20  # ids read at a time when looking for a document start
log = logging.getLogger(LOGGER)


@dataclass
class Shard:
    """One shard file of the index: its name (relative to the shards directory) and its ids."""

    file: str
    tokens: int


@dataclass
class ShardIndex:
    """What ``shards.json`` records.

    Attributes:
        format, version: :data:`FORMAT` and :data:`VERSION`, so another file or a future layout is refused.
        dtype: numpy dtype name of the ids (``uint16`` or ``uint32``, little-endian).
        vocab_size: the tokenizer's vocabulary; every id is below it.
        eot_id: the end-of-text id that follows every document.
        shard_tokens: ids per shard (the last shard holds the remainder).
        tokens: ids in all shards.
        documents: documents written.
        tokenizer_sha256: fingerprint of ``tokenizer/`` (:func:`~tokformer.engine.checkpoint.tokenizer_fingerprint`).
        shards: the shard files in stream order.
    """

    format: str
    version: int
    dtype: str
    vocab_size: int
    eot_id: int
    shard_tokens: int
    tokens: int
    documents: int
    tokenizer_sha256: str
    shards: list[Shard]


def find_shards(spec: str) -> Path | None:
    """The shards directory ``spec`` names (a directory holding ``shards.json``), or None for
    anything else (``stdlib``, text files, folders and globs)."""
    path = Path(spec.strip()).expanduser()
    return path if (path / INDEX_FILE).is_file() else None


# -- writing -------------------------------------------------------------------------------


class ShardWriter:
    """Appends ids to fixed-size shard files in a folder, then writes the tokenizer and the index.

    ``add_document`` may be called with arrays of any length: they are cut at shard boundaries,
    so the files depend only on the id stream, never on how it was chunked (or on how many
    processes encoded it). The folder is the staging folder of :func:`_staged_shards`, which
    puts it in place of the output once ``finish`` has written the index.
    """

    def __init__(self, folder: Path, tokenizer: BPETokenizer, shard_tokens: int) -> None:
        if shard_tokens <= 0:
            raise ConfigError(f"shard_tokens must be positive, got {shard_tokens}")
        self.folder, self.tokenizer, self.shard_tokens = folder, tokenizer, shard_tokens
        self.dtype = lm_data.token_dtype(tokenizer.vocab_size).newbyteorder("<")
        self.shards: list[Shard] = []
        self.documents = 0
        self._file: BinaryIO | None = None

    def add_document(self, ids: Sequence[int] | np.ndarray) -> None:
        """Append one document's ids and the end-of-text id; an empty document is dropped."""
        array = np.asarray(ids)
        if array.size == 0:
            return
        if array.ndim != 1 or array.dtype.kind not in "iu":
            raise DataError(f"document {self.documents} is not a flat sequence of integer ids "
                            f"(shape {array.shape}, dtype {array.dtype})")
        low, high = int(array.min()), int(array.max())
        if low < 0 or high >= self.tokenizer.vocab_size:
            raise DataError(f"document {self.documents} holds id {low if low < 0 else high}, outside the "
                            f"tokenizer's vocabulary of {self.tokenizer.vocab_size}: encode it with that tokenizer")
        self._write(array.astype(self.dtype))
        self._write(np.array([self.tokenizer.token_to_id(lm_data.EOT)], dtype=self.dtype))
        self.documents += 1

    def _write(self, ids: np.ndarray) -> None:  # [n]
        while len(ids):
            if self._file is None:
                self.shards.append(Shard(f"shard-{len(self.shards):05d}.bin", 0))
                self._file = (self.folder / self.shards[-1].file).open("wb")
            shard = self.shards[-1]
            take = min(len(ids), self.shard_tokens - shard.tokens)
            ids[:take].tofile(self._file)
            shard.tokens += take
            ids = ids[take:]
            if shard.tokens == self.shard_tokens:
                self.close()

    def close(self) -> None:
        """Close the shard being written (the staging folder fsyncs every file before it is published)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def finish(self) -> ShardIndex:
        """Close the last shard and write the tokenizer and the index (last)."""
        self.close()
        tokens = sum(s.tokens for s in self.shards)
        if tokens == 0:
            raise DataError("the corpus holds no usable text (empty, whitespace-only or binary files)")
        self.tokenizer.save(self.folder / TOKENIZER_DIR)
        index = ShardIndex(format=FORMAT, version=VERSION, dtype=self.dtype.name, vocab_size=self.tokenizer.vocab_size,
                           eot_id=self.tokenizer.token_to_id(lm_data.EOT), shard_tokens=self.shard_tokens,
                           tokens=tokens, documents=self.documents,
                           tokenizer_sha256=tokenizer_fingerprint(self.folder) or "", shards=self.shards)
        write_json_atomic(self.folder / INDEX_FILE, asdict(index))
        return index


@contextlib.contextmanager
def _staged_shards(out: Path, tokenizer: BPETokenizer, shard_tokens: int, overwrite: bool) -> Iterator[ShardWriter]:
    """A :class:`ShardWriter` into a staging folder that replaces ``out`` (nothing, an empty folder or,
    with ``overwrite``, older shards) when the block ends without an error, and is removed otherwise.
    The caller holds ``out``'s lock, and the block ends with ``finish``."""
    _check_out(out, overwrite)
    with staged_folder(out, replace=True) as folder:
        writer = ShardWriter(folder, tokenizer, shard_tokens)
        try:
            yield writer
        finally:
            writer.close()
        _check_out(out, overwrite)  # again: what --overwrite replaces must still be only older shards


def _check_out(out: Path, overwrite: bool) -> None:
    """Refuse an ``out`` that holds anything but an older shards directory (or nothing): what
    ``overwrite`` replaces must be ours to delete."""
    if not out.exists():
        return
    if not out.is_dir():
        raise DataError(f"{out} is a file, not a shards directory")
    if not any(out.iterdir()):
        return
    if not (out / INDEX_FILE).is_file():
        raise DataError(f"{out} is a non-empty directory that holds no shards; write the shards elsewhere")
    if not overwrite:
        raise DataError(f"{out} already holds shards; pass --overwrite to replace them, or write elsewhere")
    foreign = foreign_entries(out, SHARDS_FOLDER)
    if foreign:  # --overwrite replaces shards, never files someone put beside or among them
        raise DataError(f"{out} also holds {some_of(foreign)}, which "
                        "tokformer did not write; move them out before --overwrite, or write the shards elsewhere")


def write_shards(documents: Iterable[Sequence[int] | np.ndarray], out: str | os.PathLike, tokenizer: BPETokenizer,
                 *, shard_tokens: int = SHARD_TOKENS, overwrite: bool = False,
                 show_progress: bool = False) -> ShardIndex:
    """Write documents of token ids (lists or 1-d integer arrays, each encoded with ``tokenizer``)
    as a shards directory ``out`` that ``tokformer train lm --data OUT`` streams from.

    Each document is followed by the end-of-text id, as the lm task packs text. ``documents`` is
    consumed once, one document at a time, so it may be a generator over a dataset bigger than
    memory, e.g. ``(tokenizer.encode(row["text"]) for row in hf_dataset)``. ``tokenizer`` needs the
    ``<|endoftext|>`` special token; it is saved into ``out``. Returns the index written.
    """
    if lm_data.EOT not in tokenizer.special_tokens:
        raise ConfigError(f"the tokenizer has no {lm_data.EOT} special token to separate documents")
    with (hold_lock(Path(out), "tokformer write_shards"), _staged_shards(Path(out), tokenizer, shard_tokens, overwrite)
          as writer, progress(show_progress, unit="tok", unit_scale=True, desc="writing shards") as bar):
        for ids in documents:
            writer.add_document(ids)
            bar.update(len(ids))
        return writer.finish()


# -- tokenizing text on every core ----------------------------------------------------------

_WORKER: BPETokenizer | None = None


def _use_tokenizer(tokenizer: BPETokenizer) -> None:
    """The tokenizer :func:`_encode_file` encodes with, in this process."""
    global _WORKER
    _WORKER = tokenizer


def _init_worker(tokenizer: BPETokenizer) -> None:
    """A worker holds the tokenizer and leaves stopping to the parent (:func:`leave_stopping_to_the_parent`):
    it ends when the parent shuts the pool down, after the document it is on, or at once if the parent
    dies. A worker killed by the signal could die half-way through sending a result: the pool's thread in
    the parent then waits for the rest of that message forever, and the parent never exits (CPython's
    ProcessPoolExecutor cannot recover from a torn message)."""
    _use_tokenizer(tokenizer)
    leave_stopping_to_the_parent()
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)


def _encode_file(path: Path) -> np.ndarray | None:  # [document tokens] int32, or None: skipped
    """One file's ids, in a worker process (the file is read there, so text never crosses a pipe)."""
    assert _WORKER is not None, "_init_worker sets the tokenizer"
    text = lm_data.read_document(path)
    return None if text is None else np.asarray(_WORKER.encode(text), dtype=np.int32)


@contextlib.contextmanager
def _stop_requests() -> Iterator[Callable[[], bool]]:
    """Yields whether SIGTERM (a scheduler, ``kill``, ``timeout``) has asked this process to stop.

    The handler only records the request; the encoding loop acts on it between documents, as if
    Ctrl-C had been pressed, so the staging directory is removed and the command ends with one
    line and the status of a process SIGTERM stopped, 143. (Raising from the handler itself could
    land inside the pool's or logging's internals.)
    """
    requested = threading.Event()
    if threading.current_thread() is not threading.main_thread():  # handlers live on the main thread only
        yield requested.is_set
        return
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: requested.set())
    try:
        yield requested.is_set
    finally:
        signal.signal(signal.SIGTERM, previous)


def _encoded(paths: list[Path], tokenizer: BPETokenizer, workers: int,
             stopped: Callable[[], bool]) -> Iterator[np.ndarray | None]:
    """Each file's ids (None: skipped) in ``paths`` order, whatever the number of ``workers``:
    the output depends on the files, never on which process encoded which. Raises
    Interrupted (a KeyboardInterrupt) once ``stopped()`` says a stop was requested."""
    workers = min(workers, len(paths))  # a process per file at most: one more would only wait
    if workers <= 1:
        _use_tokenizer(tokenizer)
        for path in paths:
            if stopped():
                raise Interrupted(signal.SIGTERM)
            yield _encode_file(path)
        return
    # fork shares the trained tokenizer without pickling it; elsewhere it is pickled to each worker once.
    # Its encoder is chosen here, once, so that forked workers share the choice instead of each checking.
    log.debug("encoding with the %s BPE backend on %d processes", tokenizer.backend, workers)
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_init_worker, initargs=(tokenizer,))
    try:
        for ids in pool.map(_encode_file, paths):
            if stopped():
                raise Interrupted(signal.SIGTERM)
            yield ids
    except BrokenProcessPool:  # the workers were stopped (the process group got the signal) or died
        if stopped():
            raise Interrupted(signal.SIGTERM) from None
        raise
    finally:
        # each worker finishes its document, then exits; waiting for that lets the pool close its wakeup
        # pipe before the interpreter's exit handler writes to it (CPython 3.11's unlocked _ThreadWakeup:
        # without waiting, a stopped command could end in "OSError: [Errno 9] Bad file descriptor";
        # fixed upstream by python/cpython#125492 in 3.12 and later)
        pool.shutdown(wait=True, cancel_futures=True)


def prepare_lm(data: str, out: str | os.PathLike, *, tokenizer: str | os.PathLike | None = None,
               vocab_size: int = lm_data.VOCAB_SIZE, tokenizer_chars: int = lm_data.TOKENIZER_CHARS,
               data_seed: int = lm_data.DATA_SEED, stdlib_bytes: int = lm_data.STDLIB_BYTES,
               shard_tokens: int = SHARD_TOKENS, workers: int | None = None, overwrite: bool = False,
               show_progress: bool = True) -> ShardIndex:
    """Tokenize the text corpus ``data`` once into the shards directory ``out``: the library form of
    ``tokformer data prepare lm``.

    ``data`` is what the lm task's ``data`` option takes (``stdlib``, comma-separated files,
    folders, globs; one document per file). Files are ordered by ``data_seed`` as the task orders
    them, and the BPE is the task's: ``tokenizer`` (a saved directory) or one of ``vocab_size``
    trained on the first ``tokenizer_chars`` characters. So the shards hold exactly the ids that
    ``tokformer train lm --data DATA`` would pack. Files are encoded on ``workers`` processes
    (default: every core); the shards are byte-identical for any number of workers.
    """
    workers = machine.cores() if workers is None else workers
    if not 1 <= workers <= machine.MAX_WORKERS:
        raise ConfigError(f"workers must be between 1 and {machine.MAX_WORKERS}, got {workers}")
    with hold_lock(Path(out), "tokformer data prepare lm"):  # one writer per output folder
        return _prepare(data, Path(out), tokenizer, vocab_size, tokenizer_chars, data_seed, stdlib_bytes,
                        shard_tokens, workers, overwrite, show_progress)


def _prepare(data: str, out: Path, tokenizer: str | os.PathLike | None, vocab_size: int, tokenizer_chars: int,
             data_seed: int, stdlib_bytes: int, shard_tokens: int, workers: int, overwrite: bool,
             show_progress: bool) -> ShardIndex:
    """:func:`prepare_lm` once its output folder is locked."""
    _check_out(Path(out), overwrite)  # before the costly part, not after it
    paths = lm_data.resolve_sources(data, stdlib_bytes)
    random.Random(data_seed).shuffle(paths)
    bpe = (lm_data.load_tokenizer(tokenizer) if tokenizer is not None
           else lm_data.train_tokenizer(paths, vocab_size, tokenizer_chars, data))
    skipped: list[Path] = []
    log.info("encoding %d files on %d process(es)", len(paths), workers)
    with _staged_shards(out, bpe, shard_tokens, overwrite) as writer:
        with _stop_requests() as stopped, progress(show_progress, total=sum(p.stat().st_size for p in paths),
                                                   unit="B", unit_scale=True, desc="tokenizing") as bar:
            for path, ids in zip(paths, _encoded(paths, bpe, workers, stopped), strict=True):
                if ids is None:
                    skipped.append(path)
                else:
                    writer.add_document(ids)
                bar.update(path.stat().st_size)
        lm_data.warn_skipped(skipped, writer.documents)
        return writer.finish()


# -- reading -------------------------------------------------------------------------------


def read_index(directory: Path) -> ShardIndex:
    """The index of a shards directory, checked against the files beside it: a missing or
    truncated shard, a foreign or newer format, or an edited tokenizer is a DataError."""
    document = read_json(directory / INDEX_FILE)

    def corrupt(why: str) -> DataError:
        return DataError(f"{directory / INDEX_FILE} is not a usable shard index ({why}); "
                         "prepare the shards again (tokformer data prepare lm)")

    try:
        index = ShardIndex(**{**document, "shards": [Shard(**s) for s in document["shards"]]})
    except (TypeError, KeyError) as err:
        raise corrupt(f"unexpected fields: {err}") from None
    counts = [index.version, index.vocab_size, index.eot_id, index.shard_tokens, index.tokens, index.documents,
              *(s.tokens for s in index.shards)]
    if not all(type(n) is int and n >= 0 for n in counts) or not all(isinstance(s.file, str) for s in index.shards):
        raise corrupt("a count that is not a non-negative integer, or a file name that is not a string")
    if index.format != FORMAT:
        raise corrupt(f"format {index.format!r}, not {FORMAT!r}")
    if index.version != VERSION:
        raise corrupt(f"version {index.version}; this tokformer reads version {VERSION}")
    if index.dtype not in lm_data.ID_DTYPES:
        raise corrupt(f"dtype {index.dtype!r}")
    if not index.shards or sum(s.tokens for s in index.shards) != index.tokens:
        raise corrupt(f"its shards do not add up to its {index.tokens} tokens")
    itemsize = np.dtype(index.dtype).itemsize
    for shard in index.shards:
        file = inside(directory, shard.file, f"{directory / INDEX_FILE}: shard file", DataError)
        if Path(shard.file).name != shard.file:  # shards sit beside the index, never in a subfolder
            raise corrupt(f"shard file {shard.file!r} is not a file name")
        if (found := files.wrong_size(file, shard.tokens * itemsize)) is not None:
            raise corrupt(f"{shard.file} should hold {shard.tokens * itemsize} bytes, found {found}")
    if tokenizer_fingerprint(directory) != index.tokenizer_sha256:
        raise corrupt(f"{directory / TOKENIZER_DIR} is not the tokenizer the ids were made with")
    return index


class ShardedIds:
    """The shards as one flat id array, sliced without loading it: ``ids[lo:hi]`` reads only the
    shards it touches (memory maps, at most :data:`MAX_OPEN` open) and joins the pieces."""

    def __init__(self, directory: Path, index: ShardIndex) -> None:
        self.directory, self.index = directory, index
        self.offsets = np.cumsum([0] + [s.tokens for s in index.shards]).tolist()  # [shards + 1]
        self._maps: OrderedDict[int, np.memmap] = OrderedDict()

    def __len__(self) -> int:
        return self.index.tokens

    def _map(self, k: int) -> np.memmap:  # [tokens of shard k]
        if k in self._maps:
            self._maps.move_to_end(k)
        else:
            shard = self.index.shards[k]
            self._maps[k] = np.memmap(self.directory / shard.file, dtype=np.dtype(self.index.dtype).newbyteorder("<"),
                                      mode="r", shape=(shard.tokens,))
            if len(self._maps) > MAX_OPEN:
                self._maps.popitem(last=False)
        return self._maps[k]

    def __getitem__(self, key: slice) -> np.ndarray:  # [hi - lo]
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError("sharded ids are read in contiguous slices only")
        lo, hi, _ = key.indices(len(self))
        parts = []
        k = bisect.bisect_right(self.offsets, lo) - 1
        while lo < hi:
            start, stop = self.offsets[k], self.offsets[k + 1]
            parts.append(self._map(k)[lo - start : min(hi, stop) - start])
            lo, k = min(hi, stop), k + 1
        if not parts:
            return np.empty(0, dtype=self.index.dtype)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def __getstate__(self) -> dict[str, Any]:  # DataLoader workers map the files themselves
        return {**self.__dict__, "_maps": OrderedDict()}


class ShardedCorpus:
    """A shards directory as the lm task's corpus: flat ids and a train/held-out split.

    The held-out split is the last ``val_fraction`` of the stream, moved forward to the next
    document start (the id after an end-of-text), exactly as :func:`~.lm_data.pack_corpus`
    splits a packed corpus; one document is split inside it.
    """

    def __init__(self, directory: str | os.PathLike, val_fraction: float) -> None:
        self.directory = Path(directory)
        self.index = read_index(self.directory)
        self.ids = ShardedIds(self.directory, self.index)
        self.eval_start = self._document_start(int(self.index.tokens * (1.0 - val_fraction)))

    def _document_start(self, cut: int) -> int:
        """The held-out split's start for ``cut`` (:func:`~.lm_data.held_out_start`), finding the
        first document start at or after it by scanning the shards in chunks."""
        total = self.index.tokens
        for lo in range(max(cut - 1, 0), total, SCAN_CHUNK):
            hits = np.flatnonzero(self.ids[lo : min(lo + SCAN_CHUNK, total)] == self.index.eot_id)
            if len(hits):
                return lm_data.held_out_start(cut, lo + int(hits[0]) + 1, total)
        return cut

    def split(self, name: str) -> tuple[int, int]:
        """``(start, stop)`` of the ``train``, ``eval`` or ``all`` ids (:func:`~.lm_data.split_range`)."""
        return lm_data.split_range(name, self.eval_start, self.index.tokens)

    def tokenizer(self) -> BPETokenizer:
        """The tokenizer the ids were made with; the index's vocabulary size and end-of-text id must be its."""
        tokenizer = lm_data.load_tokenizer(self.directory / TOKENIZER_DIR)
        recorded = (self.index.vocab_size, self.index.eot_id)
        actual = (tokenizer.vocab_size, tokenizer.token_to_id(lm_data.EOT))
        if recorded != actual:
            raise DataError(f"{self.directory / INDEX_FILE} records vocab_size {recorded[0]} and eot_id {recorded[1]}, "
                            f"but its tokenizer has {actual[0]} and {actual[1]}: the index was edited or belongs to "
                            "other shards; prepare the shards again")
        return tokenizer

    def check_tokenizer(self, tokenizer: BPETokenizer, name: str) -> None:
        """Refuse ``tokenizer`` (called ``name`` in the error) unless it is the shards' own: the
        same ids must mean the same tokens."""
        if tokenizer.files() != self.tokenizer().files():
            raise ConfigError(f"{name} is not the tokenizer the shards in {self.directory} were made with "
                              f"({self.directory / TOKENIZER_DIR}); use that one, or prepare the shards with "
                              "--tokenizer")
