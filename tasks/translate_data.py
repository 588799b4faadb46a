"""Parallel text for task ``translate``: readers, the token dataset, length bucketing, batches.

Three formats, each read whole into :class:`Pair` s that remember where they came from, so
every later error (a sentence too long for the model, say) can name the file and line:

- TSV: ``source<TAB>target`` per line;
- two aligned plain-text files, line ``i`` of one translating line ``i`` of the other;
- JSONL: ``{"src": ..., "tgt": ...}`` per line.

Empty lines are errors, not skipped: in two aligned files a silently dropped line shifts
every later pair, and a TSV or JSONL file with holes is more likely broken than sparse.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor
from torch.utils.data import Dataset

from tokformer import files
from tokformer.batch import TokenBatch
from tokformer.errors import DataError
from tokformer.files import read_lines
from tokformer.tokenizers.base import pad_ids

IGNORE_INDEX = -100  # label of padding positions: F.cross_entropy skips them


@dataclass(frozen=True)
class Pair:
    """One sentence pair and its origin (``"file:line"``) for error messages."""

    src: str
    tgt: str
    origin: str


def _nonempty(text: str, where: str, what: str) -> str:
    text = text.strip()
    if not text:
        raise DataError(f"{where}: empty {what}; every line must hold a sentence pair")
    return text


def _pairs_by_line(
    path: str | Path, parse: Callable[[str, str], tuple[str, str]], names: tuple[str, str]
) -> list[Pair]:
    """One pair per line of ``path``: ``parse(line, where)`` gives its two raw sides.

    The one-pair-per-line formats (TSV, JSONL) share this loop so that every pair's origin,
    and every error about a line, names it the same way: ``file:line``. ``names`` are the
    two sides' names in the empty-side error.
    """
    path = Path(path)
    pairs = []
    for number, line in enumerate(read_lines(path), start=1):
        where = f"{path}:{number}"
        src, tgt = parse(line, where)
        pairs.append(Pair(_nonempty(src, where, names[0]), _nonempty(tgt, where, names[1]), where))
    return pairs


def read_tsv(path: str | Path) -> list[Pair]:
    """``source<TAB>target`` lines; exactly one tab per line."""
    return _pairs_by_line(path, _tsv_sides, ("source", "target"))


def _tsv_sides(line: str, where: str) -> tuple[str, str]:
    fields = line.split("\t")
    if len(fields) != 2:
        found = "no tab" if len(fields) == 1 else f"{len(fields) - 1} tabs"
        raise DataError(f"{where}: expected 'source<TAB>target', found {found}")
    return fields[0], fields[1]


def read_aligned(src_path: str | Path, tgt_path: str | Path) -> list[Pair]:
    """Two files with one sentence per line, line ``i`` of each forming pair ``i``."""
    src_path, tgt_path = Path(src_path), Path(tgt_path)
    src_lines, tgt_lines = read_lines(src_path), read_lines(tgt_path)
    if len(src_lines) != len(tgt_lines):
        raise DataError(
            f"misaligned parallel files: {src_path} has {len(src_lines)} lines, {tgt_path} has {len(tgt_lines)}"
        )
    pairs = []
    for number, (src, tgt) in enumerate(zip(src_lines, tgt_lines, strict=True), start=1):
        pairs.append(Pair(_nonempty(src, f"{src_path}:{number}", "source line"),
                          _nonempty(tgt, f"{tgt_path}:{number}", "target line"), f"{src_path}:{number}"))
    return pairs


def read_jsonl(path: str | Path) -> list[Pair]:
    """One JSON object ``{"src": str, "tgt": str}`` per line (other keys are ignored)."""
    return _pairs_by_line(path, _jsonl_sides, ("src", "tgt"))


def _jsonl_sides(line: str, where: str) -> tuple[str, str]:
    record = files.json_line(line, where)
    if not isinstance(record, dict) or not isinstance(record.get("src"), str) \
            or not isinstance(record.get("tgt"), str):
        raise DataError(f'{where}: expected an object with string fields "src" and "tgt"')
    for name in ("src", "tgt"):
        files.check_text(record[name], where, name)
    return record["src"], record["tgt"]


def read_pairs(path: str | Path, tgt_path: str | Path | None = None) -> list[Pair]:
    """Parallel data in any supported format: two files if ``tgt_path`` is given, else
    JSONL for ``.jsonl``/``.json`` and TSV for anything else."""
    if tgt_path is not None:
        return read_aligned(path, tgt_path)
    if Path(path).suffix.lower() in (".jsonl", ".json"):
        return read_jsonl(path)
    return read_tsv(path)


class TranslationDataset(Dataset):
    """Token-id pairs; items are ``(source ids, target ids)`` without special tokens.

    ``epoch_order`` is the engine's bucketing hook: the epoch's data order, so that each
    global batch holds sentences of similar length (less padding, faster steps).
    """

    def __init__(self, src: list[list[int]], tgt: list[list[int]], bucket_pool: int = 50) -> None:
        self.src, self.tgt, self.bucket_pool = src, tgt, bucket_pool
        self.lengths = torch.tensor([len(s) + len(t) for s, t in zip(src, tgt, strict=True)])  # [n]

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, i: int) -> tuple[list[int], list[int]]:
        return self.src[i], self.tgt[i]

    def epoch_order(self, generator: torch.Generator, batch: int) -> Tensor:  # [n] a permutation
        """Shuffle, sort pools of ``bucket_pool`` batches by length, cut them into batches,
        shuffle the batches. A pure function of the generator's state, so resuming at
        batch ``k`` of an epoch sees the same order. The partial batch, which the engine
        drops, stays last; ``bucket_pool=0`` means no bucketing (a plain shuffle)."""
        perm = torch.randperm(len(self), generator=generator)
        if self.bucket_pool <= 0:
            return perm
        pool = batch * self.bucket_pool
        batches = []
        for lo in range(0, len(perm), pool):
            chunk = perm[lo : lo + pool]
            chunk = chunk[torch.sort(self.lengths[chunk], stable=True).indices]
            batches.extend(chunk.split(batch))
        full = [b for b in batches if len(b) == batch]
        rest = [b for b in batches if len(b) < batch]
        shuffled = [full[i] for i in torch.randperm(len(full), generator=generator).tolist()]
        return torch.cat(shuffled + rest)


@dataclass
class TranslationBatch:
    """A padded batch. ``tgt_in`` is the target shifted right (``<s> I love``),
    ``labels`` the target followed by ``</s>`` (``I love you </s>``), padding = IGNORE_INDEX."""

    src: TokenBatch  # [B, M]
    tgt_in: TokenBatch  # [B, N]
    labels: Tensor  # [B, N]

    def to(self, device: torch.device | str) -> TranslationBatch:
        return TranslationBatch(self.src.to(device), self.tgt_in.to(device), self.labels.to(device))


def collate_pairs(samples: Sequence[tuple[list[int], list[int]]], pad_id: int, bos_id: int,
                  eos_id: int) -> TranslationBatch:
    """Pad source and target sides separately (each to its own longest sentence)."""
    src = pad_ids([s for s, _ in samples], pad_id=pad_id)
    tgt_in = pad_ids([[bos_id, *t] for _, t in samples], pad_id=pad_id)
    labels = pad_ids([[*t, eos_id] for _, t in samples], pad_id=IGNORE_INDEX).ids  # [B, N]
    return TranslationBatch(src, tgt_in, labels)
