"""Parallel-data readers, their errors, length bucketing and batch layout of task translate."""

from __future__ import annotations

import json
from itertools import islice
from pathlib import Path

import pytest
import torch

from tokformer.errors import DataError
from tokformer.tasks.translate_data import (
    IGNORE_INDEX,
    TranslationDataset,
    collate_pairs,
    read_aligned,
    read_jsonl,
    read_pairs,
    read_tsv,
)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_three_formats_read_the_same_pairs(tmp_path: Path) -> None:
    tsv = write(tmp_path / "a.tsv", "one\teins\ntwo\tzwei\n")
    src, tgt = write(tmp_path / "a.en", "one\ntwo"), write(tmp_path / "a.de", "eins\r\nzwei\r\n")
    jsonl = write(tmp_path / "a.jsonl", '{"src": "one", "tgt": "eins", "id": 1}\n{"src": "two", "tgt": "zwei"}\n')
    expected = [("one", "eins"), ("two", "zwei")]
    for pairs in (read_tsv(tsv), read_aligned(src, tgt), read_jsonl(jsonl), read_pairs(tsv), read_pairs(jsonl),
                  read_pairs(src, tgt)):
        assert [(p.src, p.tgt) for p in pairs] == expected
    assert read_tsv(tsv)[1].origin == f"{tsv}:2"


@pytest.mark.parametrize(("name", "text", "message"), [
    ("no_tab.tsv", "one\teins\ntwo zwei\n", "no_tab.tsv:2: expected 'source<TAB>target', found no tab"),
    ("two_tabs.tsv", "one\teins\tx\n", "two_tabs.tsv:1: expected 'source<TAB>target', found 2 tabs"),
    ("empty_line.tsv", "one\teins\n\ntwo\tzwei\n", "empty_line.tsv:2: expected"),
    ("empty_side.tsv", "one\t \n", "empty_side.tsv:1: empty target"),
    ("bad.jsonl", '{"src": "one", "tgt": "eins"}\n{"src": "two"\n', "bad.jsonl:2: not valid JSON"),
    ("fields.jsonl", '{"source": "one", "tgt": "eins"}\n', 'fields.jsonl:1: expected an object with string fields'),
    ("blank.jsonl", '{"src": "one", "tgt": "eins"}\n\n', "blank.jsonl:2: empty line"),
    ("empty.tsv", "", "empty.tsv is empty"),
])
def test_malformed_files_name_file_and_line(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = write(tmp_path / name, text)
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace("{", r"\{")):
        read_pairs(path)


def test_jsonl_nested_too_deeply_or_holding_a_lone_surrogate_names_file_and_line(tmp_path: Path) -> None:
    """As vqa's JSONL does: JSON too deep for the parser and a ``\\ud800`` escape are this line's
    faults (exit 2), not an internal error or a tokenizer error that names no file."""
    good = '{"src": "three", "tgt": "drei"}\n'
    deep = write(tmp_path / "deep.jsonl", good + "[" * 100_000 + "\n")
    with pytest.raises(DataError) as info:
        read_pairs(deep)
    assert str(info.value) == f"{deep}:2: not valid JSON (JSON nested too deeply)"
    for side in ("src", "tgt"):
        record = json.dumps({"src": "three", "tgt": "drei", side: "\ud800"})  # written as the escape "\\ud800"
        lone = write(tmp_path / f"lone_{side}.jsonl", good + record + "\n")
        with pytest.raises(DataError) as info:
            read_pairs(lone)
        assert str(info.value) == (f'{lone}:2: "{side}" holds a lone surrogate (an unpaired \\ud800-\\udfff '
                                   "escape), which is not text")


def test_aligned_files_errors(tmp_path: Path) -> None:
    src, tgt = write(tmp_path / "x.en", "one\ntwo\nthree\n"), write(tmp_path / "x.de", "eins\nzwei\n")
    with pytest.raises(DataError, match=r"misaligned parallel files: .*x.en has 3 lines, .*x.de has 2"):
        read_aligned(src, tgt)
    write(tmp_path / "x.de", "eins\n\ndrei\n")
    with pytest.raises(DataError, match=r"x.de:2: empty target line"):
        read_aligned(src, tgt)
    with pytest.raises(DataError, match="no such file"):
        read_aligned(tmp_path / "missing.en", tgt)
    (tmp_path / "latin1.en").write_bytes(b"caf\xe9\n")
    with pytest.raises(DataError, match="not UTF-8"):
        read_tsv(tmp_path / "latin1.en")


def make_dataset(n: int = 200, pool: int = 4) -> TranslationDataset:
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 30, (n,), generator=g).tolist()
    return TranslationDataset([[1] * k for k in lengths], [[2] * (k // 2 + 1) for k in lengths], bucket_pool=pool)


def test_epoch_order_is_a_deterministic_permutation_that_buckets_lengths() -> None:
    data, batch = make_dataset(), 8
    order = data.epoch_order(torch.Generator().manual_seed(5), batch)
    assert torch.equal(order, data.epoch_order(torch.Generator().manual_seed(5), batch))
    assert sorted(order.tolist()) == list(range(len(data)))
    assert not torch.equal(order, data.epoch_order(torch.Generator().manual_seed(6), batch))
    full = len(data) // batch * batch
    spread = lambda perm: (data.lengths[perm[:full]].view(-1, batch).float().std(dim=1)).mean()  # noqa: E731
    assert spread(order) < 0.5 * spread(torch.randperm(len(data), generator=torch.Generator().manual_seed(5)))
    data.bucket_pool = 0
    assert sorted(data.epoch_order(torch.Generator().manual_seed(5), batch).tolist()) == list(range(len(data)))


def test_collate_shifts_the_target_right_and_masks_padding() -> None:
    batch = collate_pairs([([5, 6, 7], [8, 9]), ([5], [8, 9, 10])], pad_id=0, bos_id=1, eos_id=2)
    assert batch.src.ids.tolist() == [[5, 6, 7], [5, 0, 0]]
    assert batch.src.mask.tolist() == [[True, True, True], [True, False, False]]
    assert batch.tgt_in.ids.tolist() == [[1, 8, 9, 0], [1, 8, 9, 10]]  # <s> I love
    assert batch.labels.tolist() == [[8, 9, 2, IGNORE_INDEX], [8, 9, 10, 2]]  # I love you </s>
    assert batch.tgt_in.mask.tolist() == [[True, True, True, False], [True] * 4]


def test_engine_sampler_follows_the_bucketed_order_and_resumes_exactly() -> None:
    from tokformer.engine.data import StepSampler

    data = make_dataset(n=100, pool=3)
    full = StepSampler(len(data), micro_batch=4, world=2, rank=1, seed=7, order=data.epoch_order)
    batches = list(islice(full, 30))  # 12 global batches per epoch: crosses epochs
    resumed = StepSampler(len(data), micro_batch=4, world=2, rank=1, seed=7, start=17, order=data.epoch_order)
    assert list(islice(resumed, 13)) == batches[17:]
    order = data.epoch_order(torch.Generator().manual_seed(7 * 1_000_003), 8)
    assert batches[0] == order[4:8].tolist()  # rank 1 takes the second half of global batch 0
