"""The lock of an output folder (tokformer/store/lock.py), unit by unit: which files it may take over,
what it says of a holder it cannot name, and an unlinked lock file. Written to kill the mutants the
tests through the commands (tests/test_hostile_inputs.py, H5 and H39) let live."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tokformer.errors import ConfigError
from tokformer.store import lock


def _record_of_size(size: int) -> str:
    """A lock record, as a holder writes it, padded in its command to exactly ``size`` bytes."""
    record = {"pid": 1, "host": "h", "command": "", "since": "2026-12-05 09:00:00"}
    record["command"] = "x" * (size - len(json.dumps(record)))
    text = json.dumps(record)
    assert len(text.encode()) == size
    return text


def test_a_record_up_to_the_size_limit_is_taken_over_and_one_byte_more_is_refused(tmp_path: Path) -> None:
    (tmp_path / ".run.lock").write_text(_record_of_size(lock.MAX_RECORD_BYTES))
    with lock.hold(tmp_path / "run", "second"):
        pass
    (tmp_path / ".run.lock").write_text(_record_of_size(lock.MAX_RECORD_BYTES + 1))
    with pytest.raises(ConfigError, match="is not a tokformer lock file"), lock.hold(tmp_path / "run", "second"):
        pass
    assert len((tmp_path / ".run.lock").read_bytes()) == lock.MAX_RECORD_BYTES + 1  # left as it was


def test_a_json_file_with_other_keys_is_not_a_lock_record(tmp_path: Path) -> None:
    (tmp_path / ".run.lock").write_text(json.dumps({"pid": 1, "host": "h", "command": "c", "since": "t", "x": 1}))
    with pytest.raises(ConfigError, match="is not a tokformer lock file"), lock.hold(tmp_path / "run", "second"):
        pass


def test_a_lock_file_unlinked_after_it_was_opened_is_not_the_lock_file(tmp_path: Path) -> None:
    """A holder that releases unlinks its file: a file opened just before is no longer the one others open."""
    path = tmp_path / ".run.lock"
    path.write_text("")
    fd = os.open(path, os.O_RDWR)
    try:
        assert lock._same_file(fd, path)
        path.unlink()
        assert not lock._same_file(fd, path)
        path.write_text("")  # a new file by the same name, as the next holder makes it
        assert not lock._same_file(fd, path)
    finally:
        os.close(fd)


@pytest.mark.parametrize("content", ["", "[1]", "\"text\"", "3", "{not json"])
def test_a_holder_whose_record_cannot_be_read_is_another_process(tmp_path: Path, content: str) -> None:
    (tmp_path / ".run.lock").write_text(content)  # mid-write, or not a record
    assert lock._holder(tmp_path / ".run.lock") == "another process"


def test_a_holder_is_named_by_its_record(tmp_path: Path) -> None:
    record = {"pid": 7, "host": "node1", "command": "tokformer export", "since": "2026-12-05 09:00:00"}
    (tmp_path / ".run.lock").write_text(json.dumps(record))
    assert lock._holder(tmp_path / ".run.lock") == "tokformer export (pid 7 on node1, since 2026-12-05 09:00:00)"
