"""Corpus reading, packing with separators, the memory-mapped id file and the unigram baseline."""

import json
import math
import pickle
import re

import numpy as np
import pytest

from tokformer.errors import DataError
from tokformer.tasks import lm_data

EOT = 0


def encode(text: str) -> list[int]:  # a stand-in tokenizer: one id per character, ids >= 1
    return [ord(c) for c in text]


def pack(tmp_path, docs, val_fraction=0.25, vocab=1000):
    return lm_data.pack_corpus(iter(docs), encode, EOT, vocab, tmp_path / "c", val_fraction, [])


def test_documents_are_packed_with_end_of_text_separators(tmp_path):
    meta = pack(tmp_path, ["ab", "", "cde", "fg"])  # the empty document is dropped
    corpus = lm_data.TokenCorpus(tmp_path / "c")
    assert corpus.ids.tolist() == [97, 98, 0, 99, 100, 101, 0, 102, 103, 0]
    assert meta.documents == 3 and meta.tokens == 10
    assert meta.eval_start == 7  # tail 25% starts inside "cde": moved to the next document start


def test_a_corpus_whose_packing_failed_half_way_is_not_taken_for_a_packed_one(tmp_path, fill_disk):
    """meta.json is written last and marks a packed corpus (a run's setup reuses one that has it): a full
    disk while it is written must leave none, so the next setup packs again instead of failing to read it."""
    fill_disk()
    with pytest.raises(OSError, match="No space left"):
        pack(tmp_path, ["ab", "cde"])
    assert not (tmp_path / "c" / lm_data.META_FILE).exists()
    assert [p.name for p in (tmp_path / "c").iterdir()] == [lm_data.CORPUS_FILE], "no temporary file is left"


@pytest.mark.parametrize("edit, why", [
    ({"tokens": 100}, "should hold 100 uint16 ids, found 24 bytes"),  # more ids than the file: numpy's mmap error
    ({"tokens": 11}, "should hold 11 uint16 ids, found 24 bytes"),
    ({"tokens": -5}, "not a non-negative integer"),
    ({"tokens": "10"}, "not a non-negative integer"),  # a TypeError in the split arithmetic
    ({"documents": 1.5}, "not a non-negative integer"),
    ({"eval_start": 13}, "held-out split from id 13 in 12 ids"),  # an empty held-out split
    ({"eval_start": -3}, "not a non-negative integer"),  # windows of another length: a torch.stack error
    ({"dtype": "float64"}, "dtype 'float64'"),  # 8-byte ids of no vocabulary
    ({"dtype": "nope"}, "dtype 'nope'"),  # numpy's 'data type not understood'
    ({"sources": "a.txt"}, "sources that are not a list"),
    ({"extra": 1}, "unexpected fields"),
])
def test_a_damaged_corpus_record_is_named_before_the_ids_are_mapped(tmp_path, edit, why):
    """A run's corpus is memory-mapped by what corpus.json says; an edited or damaged record was a numpy or
    torch error deep inside `evaluate` or a resumed `train` (`internal error: ValueError: mmap length is
    greater than file size`), or an empty split. Now one DataError naming the record and what is wrong."""
    pack(tmp_path, ["ab", "cde", "fghi"])
    record = tmp_path / "c" / lm_data.META_FILE
    record.write_text(json.dumps({**json.loads(record.read_text()), **edit}))
    with pytest.raises(DataError, match=f"{record} is not a usable corpus record .*{re.escape(why)}"):
        lm_data.TokenCorpus(tmp_path / "c")


def test_a_corpus_record_that_is_no_object_or_ids_that_are_no_file_are_named(tmp_path, named_pipe):
    pack(tmp_path, ["ab", "cde"])
    record, ids = tmp_path / "c" / lm_data.META_FILE, tmp_path / "c" / lm_data.CORPUS_FILE
    kept = record.read_text()
    record.write_text("[1, 2]")
    with pytest.raises(DataError, match="not a usable corpus record .*unexpected fields"):
        lm_data.TokenCorpus(tmp_path / "c")
    record.write_text(kept)
    ids.unlink()
    with pytest.raises(DataError, match="corpus.bin should hold 7 uint16 ids, found missing"):
        lm_data.TokenCorpus(tmp_path / "c")
    named_pipe(ids)  # a FIFO in place of the ids: refused, not mapped (numpy cannot map one)
    with pytest.raises(DataError, match=f"{ids} is not a regular file"):
        lm_data.TokenCorpus(tmp_path / "c")
    record.unlink()
    named_pipe(record)  # read with Path.read_text, it blocked for good
    with pytest.raises(DataError, match=f"{record} is not a regular file"):
        lm_data.TokenCorpus(tmp_path / "c")


def test_single_document_is_split_inside_it(tmp_path):
    meta = pack(tmp_path, ["abcdefghij"], val_fraction=0.2)
    assert meta.eval_start == int(11 * 0.8)


def test_ids_use_the_narrowest_dtype(tmp_path):
    assert lm_data.token_dtype(65536) == np.uint16 and lm_data.token_dtype(65537) == np.uint32
    pack(tmp_path, ["hi"], vocab=100_000)
    assert lm_data.TokenCorpus(tmp_path / "c").ids.dtype == np.uint32
    assert (tmp_path / "c" / lm_data.CORPUS_FILE).stat().st_size == 3 * 4


def test_memmap_round_trips_and_pickles_without_its_data(tmp_path):
    docs = ["x" * 50, "hello world", "ünïcödé"]
    pack(tmp_path, docs)
    corpus = lm_data.TokenCorpus(tmp_path / "c")
    expected = [i for d in docs for i in [*encode(d), EOT]]
    assert isinstance(corpus.ids, np.memmap) and corpus.ids.tolist() == expected
    clone = pickle.loads(pickle.dumps(corpus))
    assert clone._ids is None and len(pickle.dumps(corpus)) < 1000
    assert clone.ids.tolist() == expected


def test_windows_are_inputs_and_targets_shifted_by_one(tmp_path):
    pack(tmp_path, ["abcdefghijklmnopqrstuvwxyz"], val_fraction=0.3)
    corpus = lm_data.TokenCorpus(tmp_path / "c")
    train = lm_data.WindowDataset(corpus, "train", context_len=4)
    ids = corpus.ids.tolist()
    assert len(train) == (corpus.meta.eval_start - 1) // 4
    assert train[0].tolist() == ids[0:5] and train[1].tolist() == ids[4:9]  # each id a target once
    evals = lm_data.WindowDataset(corpus, "eval", context_len=4)
    assert evals[0].tolist() == ids[corpus.meta.eval_start : corpus.meta.eval_start + 5]
    with pytest.raises(DataError, match="too few"):
        lm_data.WindowDataset(corpus, "eval", context_len=64)


def test_unigram_perplexity_known_answer(tmp_path):
    # train ids: a a b (eot) ; add-one counts over vocab {0, 97, 98} plus the rest at 1.
    pack(tmp_path, ["aab", "ab"], val_fraction=0.4)
    corpus = lm_data.TokenCorpus(tmp_path / "c")
    assert corpus.meta.eval_start == 4
    vocab = 100
    counts = np.ones(vocab)
    np.add.at(counts, [97, 97, 98, 0], 1)
    p = counts / counts.sum()
    targets = [98, 0]  # eval ids are a b eot; the first is never a target
    expected = math.exp(-np.mean(np.log(p[targets])))
    assert lm_data.unigram_perplexity(corpus, vocab, (5, 7)) == pytest.approx(expected)


def test_sources_files_folders_globs(tmp_path):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "b.txt").write_text("bee")
    (tmp_path / "d" / "sub" / "a.txt").write_text("ay")
    (tmp_path / "one.md").write_text("one")
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01\x02")
    found = lm_data.resolve_sources(f"{tmp_path / 'd'}, {tmp_path / '*.md'},{tmp_path / 'one.md'}", 0)
    assert found == [tmp_path / "d" / "b.txt", tmp_path / "d" / "sub" / "a.txt", tmp_path / "one.md"]
    docs = list(lm_data.iter_documents([tmp_path / "blob.bin", tmp_path / "one.md"]))
    assert docs == ["one"]  # binary files are skipped
    with pytest.raises(DataError, match="not a file"):
        lm_data.resolve_sources(str(tmp_path / "missing*.txt"), 0)


def test_empty_or_unusable_corpus_is_a_clear_error(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blank.txt").write_text("  \n\t")
    (tmp_path / "blob.bin").write_bytes(b"\x00\xff")
    docs = lm_data.iter_documents(lm_data.resolve_sources(str(tmp_path), 0))
    with pytest.raises(DataError, match="no usable text"):
        pack(tmp_path, docs)


def test_stdlib_corpus_is_deterministic_and_sized():
    files = lm_data.stdlib_files(200_000)
    assert files == sorted(files) and files  # a sorted walk: the same files on every call
    total = sum(f.stat().st_size for f in files)
    assert total >= 200_000 and total - files[-1].stat().st_size < 200_000
    assert all(f.suffix == ".py" and "test" not in f.parts for f in files)


def test_unusable_files_are_skipped_with_a_count(tmp_path, caplog):
    good, binary = tmp_path / "good.py", tmp_path / "blob.bin"
    good.write_text("x = 1\n")
    binary.write_bytes(b"\x00\x01\x02")
    with caplog.at_level("WARNING", logger="tokformer"):
        assert list(lm_data.iter_documents([good, binary])) == ["x = 1\n"]
    assert "skipped 1 file(s) that are binary, not UTF-8 or whitespace only" in caplog.text
    assert "blob.bin" in caplog.text
