"""Text corpora for the ``lm`` task: find the files, train or load the BPE, pack the documents,
keep the ids on disk.

A corpus is a list of documents (one per file). Each is encoded and followed by an
end-of-text id, and the packed stream is appended to a flat binary file of uint16 ids
(uint32 when the vocabulary needs it) that is then opened as a ``numpy.memmap``: the
process holds one document at a time while encoding and none while training, so memory
does not grow with the corpus. Training and evaluation windows of ``context_len + 1`` ids
are slices of that map.

The default corpus (``data="stdlib"``) is the Python standard library's own source:
real, varied text (code, docstrings, comments) present on every machine that runs
tokformer, picked deterministically so the same Python version always gives the same
corpus.
"""

from __future__ import annotations

import glob
import json
import logging
import math
import sysconfig
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from tokformer import files
from tokformer.engine import LOGGER, write_text_atomic
from tokformer.errors import ConfigError, DataError
from tokformer.files import read_bytes, where
from tokformer.tokenizers.bpe import BPETokenizer

STDLIB = "stdlib"
EOT = "<|endoftext|>"  # follows every document; generation starts after it and stops at it
# Defaults shared by the lm task's options and `tokformer data prepare lm`: one corpus, one tokenizer.
STDLIB_BYTES = 3_000_000
VOCAB_SIZE = 1024
TOKENIZER_CHARS = 2_000_000
DATA_SEED = 1234
# Test suites are huge and repetitive; the rest are demos or vendored code, not "the stdlib".
STDLIB_SKIP = {"test", "tests", "site-packages", "__pycache__", "idlelib", "lib2to3", "turtledemo", "ensurepip"}
STDLIB_STRIDE = 3  # every third file of the sorted list: many modules, not just a-c
log = logging.getLogger(LOGGER)
CORPUS_FILE = "corpus.bin"
META_FILE = "corpus.json"


def stdlib_files(max_bytes: int) -> list[Path]:
    """Every ``STDLIB_STRIDE``-th ``.py`` file of the running Python's stdlib, sorted, until
    ``max_bytes`` are taken: deterministic for a given Python version."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(
        p for p in root.rglob("*.py") if not STDLIB_SKIP & set(p.relative_to(root).parts) and p.is_file()
    )
    chosen, total = [], 0
    for path in files[::STDLIB_STRIDE]:
        if total >= max_bytes:
            break
        chosen.append(path)
        total += path.stat().st_size
    return chosen


def resolve_sources(spec: str, stdlib_bytes: int) -> list[Path]:
    """The files named by ``spec``: ``stdlib``, or comma-separated files, folders (all files
    below, recursively) and glob patterns. Sorted within each item, duplicates dropped."""
    if spec.strip() == STDLIB:
        return stdlib_files(stdlib_bytes)
    found: dict[Path, None] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        path = Path(item).expanduser()
        if path.is_dir():
            matches = sorted(p for p in path.rglob("*") if p.is_file())
        elif path.is_file():
            matches = [path]
        else:
            matches = sorted(Path(p) for p in glob.glob(str(path), recursive=True) if Path(p).is_file())
            if not matches:
                raise DataError(f"corpus source {where(item)} is not a file, a folder or a glob matching any file")
        found.update(dict.fromkeys(matches))
    if not found:
        raise DataError(f"the corpus '{spec}' names no files")
    return list(found)


def read_document(path: Path) -> str | None:
    """The file's text, or None for binary or non-UTF-8 files and files of whitespace only
    (:func:`iter_documents` says how many it skipped); DataError if it cannot be read at all."""
    data = read_bytes(path)
    if b"\x00" in data:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if text.strip() else None


def iter_documents(paths: Iterable[Path]) -> Iterator[str]:
    """Usable documents of ``paths``, one file read at a time; once every file is read, a warning
    counts the files skipped as binary, not UTF-8 or whitespace only (nothing is dropped silently)."""
    skipped, used = [], 0
    for path in paths:
        text = read_document(path)
        if text is None:
            skipped.append(path)
        else:
            used += 1
            yield text
    warn_skipped(skipped, used)


def warn_skipped(skipped: list[Path], used: int) -> None:
    """One warning line counting the files :func:`read_document` refused, when some were used
    (none used: the caller's error about the whole corpus says it)."""
    if skipped and used:
        log.warning("skipped %d file(s) that are binary, not UTF-8 or whitespace only, e.g. %s",
                    len(skipped), skipped[0])


def load_tokenizer(directory: str | Path) -> BPETokenizer:
    """A saved BPE tokenizer that can separate documents (it has the :data:`EOT` special token)."""
    tokenizer = BPETokenizer.load(directory)
    if EOT not in tokenizer.special_tokens:
        raise ConfigError(f"tokenizer {directory} has no {EOT} special token to separate documents")
    return tokenizer


def train_tokenizer(paths: Iterable[Path], vocab_size: int, chars: int, source: str,
                    max_length: int = 1024) -> BPETokenizer:
    """A BPE of ``vocab_size`` tokens (:data:`EOT` included) trained on the first documents of
    ``paths``, up to ``chars`` characters: a sample is enough to learn the frequent merges, and
    the whole corpus may not fit in memory. ``source`` names the corpus in the error."""
    texts, budget = [], chars
    for text in iter_documents(paths):
        texts.append(text[:budget])
        budget -= len(texts[-1])
        if budget <= 0:
            break
    if not texts:
        raise DataError(f"the corpus '{source}' holds no usable text (empty, whitespace-only or binary files)")
    log.info("training a BPE of up to %d tokens on %d characters", vocab_size, sum(map(len, texts)))
    tokenizer = BPETokenizer.train(texts, vocab_size, special_tokens=[EOT], max_length=max_length)
    fewer = (f" (fewer than the {vocab_size} asked for: the {sum(map(len, texts))} characters hold no more pairs "
             "to merge; give more text or raise tokenizer_chars)") if tokenizer.vocab_size < vocab_size else ""
    log.info("learned a %d-token BPE%s", tokenizer.vocab_size, fewer)
    return tokenizer


ID_DTYPES = ("uint16", "uint32")  # what token_dtype gives: the only dtypes a corpus or shard record may name


def token_dtype(vocab_size: int) -> np.dtype:
    """The narrowest unsigned type holding every id: halves the file for vocabularies <= 65536."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


def held_out_start(cut: int, next_start: int | None, total: int) -> int:
    """Where the held-out split of ``total`` ids begins: the first document start at or after
    ``cut`` (``next_start``), so no document is split between the two; ``cut`` itself when no
    document starts there or only the final end-of-text would be held out."""
    return next_start if next_start is not None and next_start < total - 1 else cut


def split_range(name: str, eval_start: int, total: int) -> tuple[int, int]:
    """``(start, stop)`` of the ``train``, ``eval`` or ``all`` ids (``all``: a corpus packed only
    to be evaluated on, ``tokformer evaluate --data``)."""
    return {"train": (0, eval_start), "eval": (eval_start, total), "all": (0, total)}[name]


@dataclass
class CorpusMeta:
    """What ``corpus.json`` records about ``corpus.bin``.

    Attributes:
        dtype: numpy dtype name of the ids.
        tokens: ids in the file (end-of-text separators included).
        documents: documents packed.
        eval_start: first id of the held-out split (the split is at a document boundary
            when the corpus has more than one document).
        sources: the files read, in packing order.
    """

    dtype: str
    tokens: int
    documents: int
    eval_start: int
    sources: list[str]


def pack_corpus(
    documents: Iterable[str],
    encode: Any,
    eot_id: int,
    vocab_size: int,
    directory: Path,
    val_fraction: float,
    sources: list[str],
) -> CorpusMeta:
    """Encode each document, append it and an end-of-text id to ``directory/corpus.bin``.

    ``encode`` maps text to ids. The held-out split is the tail ``val_fraction`` of the
    ids, moved forward to the next document start so no document is split between the
    two (unless the corpus is a single document).
    """
    dtype = token_dtype(vocab_size)
    directory.mkdir(parents=True, exist_ok=True)
    starts: list[int] = []
    total = 0
    with (directory / CORPUS_FILE).open("wb") as f:
        for text in documents:
            ids = np.asarray(encode(text), dtype=np.int64)
            if not len(ids):
                continue
            starts.append(total)
            np.append(ids, eot_id).astype(dtype).tofile(f)
            total += len(ids) + 1
    if total == 0:
        raise DataError("the corpus holds no usable text (empty, whitespace-only or binary files)")
    cut = int(total * (1.0 - val_fraction))
    eval_start = held_out_start(cut, next((s for s in starts if s >= cut), None), total)
    meta = CorpusMeta(dtype=dtype.name, tokens=total, documents=len(starts), eval_start=eval_start, sources=sources)
    write_text_atomic(directory / META_FILE, json.dumps(asdict(meta), indent=1) + "\n")  # last: marks the corpus done
    return meta


def read_meta(directory: Path) -> CorpusMeta:
    """``directory``'s corpus record, checked against ``corpus.bin`` beside it: a run's corpus is
    memory-mapped by what the record says, so a record edited or damaged (a count that is no count, a
    dtype that is not one we write, more ids than the file holds, a split past its end) is a DataError
    naming it here, not a numpy error deep inside training or an empty held-out split."""
    record = directory / META_FILE

    def corrupt(why: str) -> DataError:
        return DataError(f"{record} is not a usable corpus record ({why}); train the run again")

    try:
        meta = CorpusMeta(**files.read_json(record))
    except TypeError as err:
        raise corrupt(f"unexpected fields: {err}") from None
    counts = (meta.tokens, meta.documents, meta.eval_start)
    if not all(type(n) is int and n >= 0 for n in counts):
        raise corrupt("a count that is not a non-negative integer")
    if meta.dtype not in ID_DTYPES:
        raise corrupt(f"dtype {files.shown(meta.dtype)}")
    if not isinstance(meta.sources, list) or not all(isinstance(s, str) for s in meta.sources):
        raise corrupt("sources that are not a list of file names")
    if not meta.documents <= meta.tokens or not meta.eval_start <= meta.tokens:
        raise corrupt(f"{meta.documents} documents and a held-out split from id {meta.eval_start} "
                      f"in {meta.tokens} ids")
    found = files.wrong_size(files.regular(directory / CORPUS_FILE), meta.tokens * np.dtype(meta.dtype).itemsize)
    if found is not None:
        raise corrupt(f"{CORPUS_FILE} should hold {meta.tokens} {meta.dtype} ids, found {found}")
    return meta


class Corpus(Protocol):
    """What windows and the unigram baseline read: ids sliced by position, and the splits.
    :class:`TokenCorpus` (one file) and :class:`~.lm_shards.ShardedCorpus` (shards) are both."""

    @property
    def ids(self) -> Any:  # [tokens]; ids[lo:hi] is a numpy array
        ...

    def split(self, name: str) -> tuple[int, int]:
        ...


class TokenCorpus:
    """The packed ids of a corpus directory, memory-mapped read-only on first use.

    The map is opened lazily and dropped when pickled, so DataLoader workers each map the
    file themselves instead of receiving a copy of it.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.meta = read_meta(self.directory)
        self._ids: np.ndarray | None = None

    @property
    def ids(self) -> np.ndarray:  # [tokens]
        if self._ids is None:
            self._ids = np.memmap(self.directory / CORPUS_FILE, dtype=self.meta.dtype, mode="r",
                                  shape=(self.meta.tokens,))
        return self._ids

    def split(self, name: str) -> tuple[int, int]:
        """``(start, stop)`` of the ``train``, ``eval`` or ``all`` ids (:func:`split_range`)."""
        return split_range(name, self.meta.eval_start, self.meta.tokens)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_ids": None}


class WindowDataset(Dataset):
    """Windows of ``context_len + 1`` ids from one split: inputs are the first
    ``context_len``, targets the last ``context_len`` (the same ids shifted by one).

    Window ``i`` starts at ``start + i * context_len``, so consecutive windows share one id
    and every id of the split is a target exactly once (evaluation counts each token once;
    training gets them in the engine's shuffled order).
    """

    def __init__(self, corpus: Corpus, split: str, context_len: int) -> None:
        self.corpus, self.context_len = corpus, context_len
        self.start, stop = corpus.split(split)
        self.length = max(0, (stop - self.start - 1) // context_len)
        if self.length == 0:
            raise DataError(
                f"the {split} split has {stop - self.start} tokens, too few for one window of "
                f"{context_len + 1}; use more text, a smaller context_len or another val_fraction"
            )

    def __len__(self) -> int:
        return self.length

    @property
    def target_range(self) -> tuple[int, int]:
        """``(start, stop)`` of the corpus ids this dataset's windows predict."""
        return self.start + 1, self.start + 1 + self.length * self.context_len

    def __getitem__(self, i: int) -> Tensor:  # [context_len + 1] int64
        lo = self.start + i * self.context_len
        return torch.from_numpy(self.corpus.ids[lo : lo + self.context_len + 1].astype(np.int64))


def unigram_perplexity(corpus: Corpus, vocab_size: int, targets: tuple[int, int], chunk: int = 1 << 22,
                       scored: Corpus | None = None) -> float:
    """Perplexity on the ids ``targets`` (start, stop) of ``scored`` (default: ``corpus``) of the
    add-one-smoothed unigram model of ``corpus``'s train split: the baseline a language model
    must beat by using context at all. Counts are accumulated chunk by chunk, so memory stays
    O(vocab)."""
    counts = np.ones(vocab_size, dtype=np.float64)
    lo, hi = corpus.split("train")
    for s in range(lo, hi, chunk):
        part = np.asarray(corpus.ids[s : min(s + chunk, hi)])
        if part.size and int(part.max()) >= vocab_size:
            raise DataError(f"the corpus holds token id {int(part.max())}, past the tokenizer's vocabulary of "
                            f"{vocab_size}: its files are damaged or were made with another tokenizer")
        counts += np.bincount(part, minlength=vocab_size)
    log_p = np.log(counts / counts.sum())
    nll, n = 0.0, 0
    lo, hi = targets
    ids = (scored or corpus).ids
    for s in range(lo, hi, chunk):
        part = np.asarray(ids[s : min(s + chunk, hi)], dtype=np.int64)
        nll -= float(log_p[part].sum())
        n += len(part)
    return math.exp(nll / max(n, 1))
