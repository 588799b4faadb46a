"""Writing and reading LM shards (tasks/lm_shards.py), unit by unit: the boundaries of what a writer
accepts, its progress bar and lock, the index's dtypes and refusals, the read-only memory maps and
how many stay open, slicing, and where the held-out split starts. Written to kill the mutants that
tests/test_lm_shards.py let live."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tokformer.errors import ConfigError, DataError
from tokformer.tasks import lm_data, lm_shards
from tokformer.tokenizers.bpe import BPETokenizer

TEXT = "def add(a, b):\n    return a + b\n"


@pytest.fixture(scope="module")
def bpe() -> BPETokenizer:
    return BPETokenizer.train([TEXT * 4], 270, special_tokens=[lm_data.EOT])


def _index(folder: Path) -> dict:
    return json.loads((folder / lm_shards.INDEX_FILE).read_text())


def _edit_index(folder: Path, **changes) -> None:
    (folder / lm_shards.INDEX_FILE).write_text(json.dumps({**_index(folder), **changes}))


def test_a_shard_may_hold_one_id_and_none_is_refused(tmp_path: Path, bpe: BPETokenizer) -> None:
    index = lm_shards.write_shards([[1, 2]], tmp_path / "s", bpe, shard_tokens=1)
    assert [s.tokens for s in index.shards] == [1, 1, 1]  # two ids and the end-of-text
    with pytest.raises(ConfigError, match="shard_tokens must be positive, got 0"):
        lm_shards.write_shards([[1]], tmp_path / "t", bpe, shard_tokens=0)


def test_ids_from_zero_to_the_last_of_the_vocabulary_are_written_and_one_past_it_is_refused(
        tmp_path: Path, bpe: BPETokenizer) -> None:
    last = bpe.vocab_size - 1
    lm_shards.write_shards([[0, last]], tmp_path / "s", bpe)
    assert lm_shards.ShardedCorpus(tmp_path / "s", 0.5).ids[:2].tolist() == [0, last]
    with pytest.raises(DataError, match=f"holds id {bpe.vocab_size}, outside the tokenizer's vocabulary"):
        lm_shards.write_shards([[0, bpe.vocab_size]], tmp_path / "t", bpe)


def test_write_shards_is_quiet_unless_asked_and_its_bar_counts_ids(tmp_path: Path, bpe: BPETokenizer,
                                                                     capfd: pytest.CaptureFixture) -> None:
    lm_shards.write_shards([[1] * 999, [2] * 500], tmp_path / "quiet", bpe)
    assert capfd.readouterr().err == ""
    lm_shards.write_shards([[1] * 999, [2] * 500], tmp_path / "shown", bpe, show_progress=True)
    err = capfd.readouterr().err
    assert "writing shards: " in err and "1.50ktok " in err  # 1,499 ids, SI-scaled (the end-of-texts not counted)


def test_write_shards_holds_the_folders_lock_under_its_own_name(tmp_path: Path, bpe: BPETokenizer) -> None:
    seen: list[str] = []

    def documents():
        yield [1, 2]
        seen.append(json.loads((tmp_path / ".s.lock").read_text())["command"])

    lm_shards.write_shards(documents(), tmp_path / "s", bpe)
    assert seen == ["tokformer write_shards"] and not (tmp_path / ".s.lock").exists()


def test_a_refused_index_says_how_to_mend_it(tmp_path: Path, bpe: BPETokenizer) -> None:
    lm_shards.write_shards([[1, 2, 3]], tmp_path / "s", bpe)
    _edit_index(tmp_path / "s", version=99)
    with pytest.raises(DataError, match=r"; prepare the shards again \(tokformer data prepare lm\)$"):
        lm_shards.read_index(tmp_path / "s")


def test_shards_of_32_bit_ids_read_back(tmp_path: Path, bpe: BPETokenizer) -> None:
    """A vocabulary over 65,536 ids is stored as uint32 (its BPE is too slow to train here, so the
    shards are rewritten as 32-bit ids)."""
    lm_shards.write_shards([[1, 2, 3]], tmp_path / "s", bpe)
    ids = np.fromfile(tmp_path / "s" / "shard-00000.bin", dtype="<u2").astype("<u4")
    ids.tofile(tmp_path / "s" / "shard-00000.bin")
    _edit_index(tmp_path / "s", dtype="uint32")
    corpus = lm_shards.ShardedCorpus(tmp_path / "s", 0.5)
    assert corpus.ids[:4].tolist() == ids.tolist() and corpus.ids[:4].dtype == np.dtype("<u4")


@pytest.mark.parametrize(("changes", "message"), [
    ({"tokens": 5}, "its shards do not add up to its 5 tokens"),
    ({"shards": [], "tokens": 0}, "its shards do not add up to its 0 tokens"),
])
def test_an_index_whose_shards_do_not_add_up_is_refused(tmp_path: Path, bpe: BPETokenizer, changes: dict,
                                                        message: str) -> None:
    lm_shards.write_shards([[1, 2, 3]], tmp_path / "s", bpe)
    _edit_index(tmp_path / "s", **changes)
    with pytest.raises(DataError, match=message):
        lm_shards.read_index(tmp_path / "s")


def test_a_shard_named_outside_its_folder_is_refused_naming_the_index(tmp_path: Path, bpe: BPETokenizer) -> None:
    lm_shards.write_shards([[1, 2, 3]], tmp_path / "s", bpe)
    _edit_index(tmp_path / "s", shards=[{"file": "../x.bin", "tokens": 4}])
    with pytest.raises(DataError, match=r"shards\.json: shard file: '\.\./x\.bin' points outside"):
        lm_shards.read_index(tmp_path / "s")


def test_shards_are_mapped_read_only(tmp_path: Path, bpe: BPETokenizer) -> None:
    """A reader's bug cannot change the corpus (and a read-only copy of it can be read)."""
    lm_shards.write_shards([[1, 2, 3]], tmp_path / "s", bpe)
    ids = lm_shards.ShardedCorpus(tmp_path / "s", 0.5).ids
    assert ids._map(0).flags.writeable is False


def test_at_most_max_open_shards_stay_mapped_the_least_recently_used_closing_first(
        tmp_path: Path, bpe: BPETokenizer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lm_shards, "MAX_OPEN", 2)
    lm_shards.write_shards([[1, 2, 3, 4, 5]], tmp_path / "s", bpe, shard_tokens=2)  # 3 shards
    ids = lm_shards.ShardedCorpus(tmp_path / "s", 0.5).ids
    assert ids[0:6].tolist() == [1, 2, 3, 4, 5, bpe.token_to_id(lm_data.EOT)]  # maps 0, 1, 2 in turn
    assert list(ids._maps) == [1, 2]
    ids[2:3]  # shard 1 used again: shard 2 is now the least recently used
    ids[0:1]
    assert list(ids._maps) == [1, 0]


def test_sharded_ids_take_contiguous_slices_only(tmp_path: Path, bpe: BPETokenizer) -> None:
    lm_shards.write_shards([[1, 2, 3, 4, 5]], tmp_path / "s", bpe, shard_tokens=4)
    ids = lm_shards.ShardedCorpus(tmp_path / "s", 0.5).ids
    assert ids[1:5:1].tolist() == [2, 3, 4, 5]
    for key in (3, slice(0, 4, 2)):
        with pytest.raises(TypeError, match="contiguous slices only"):
            ids[key]


def test_a_slice_within_one_shard_is_a_view_of_its_map_and_an_empty_one_keeps_the_dtype(
        tmp_path: Path, bpe: BPETokenizer) -> None:
    lm_shards.write_shards([[1, 2, 3, 4, 5]], tmp_path / "s", bpe, shard_tokens=4)
    ids = lm_shards.ShardedCorpus(tmp_path / "s", 0.5).ids
    assert np.shares_memory(ids[1:3], ids._map(0))  # no copy of the ids a window reads
    assert ids[3:3].dtype == np.dtype("uint16") and ids[3:3].size == 0


def test_the_held_out_split_starts_at_a_document_that_begins_right_at_the_cut(
        tmp_path: Path, bpe: BPETokenizer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Documents of two ids and an end-of-text: with 30 ids and val_fraction 0.2 the cut is 24, where a
    document begins (the end-of-text before it is id 23). Scanned in chunks of 4 ids, as a corpus
    bigger than one chunk is."""
    monkeypatch.setattr(lm_shards, "SCAN_CHUNK", 4)
    lm_shards.write_shards([[1, 2]] * 10, tmp_path / "s", bpe, shard_tokens=7)
    assert lm_shards.ShardedCorpus(tmp_path / "s", 0.2).eval_start == 24
    lm_shards.write_shards([[1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2]] * 3, tmp_path / "t", bpe, shard_tokens=7)
    assert lm_shards.ShardedCorpus(tmp_path / "t", 0.2).eval_start == 36  # 39 ids, cut 31: two chunks on
