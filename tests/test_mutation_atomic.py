"""Atomic writes (tokformer/atomic.py), unit by unit: what each write makes durable, in which
order, and what a failure leaves. Written to kill the mutants that the tests through the callers
(checkpoints, model folders, exports) let live: those see the finished folder, never the fsyncs
before its rename nor the clean-up after a failure."""

from __future__ import annotations

import json
import locale
import os
import stat
from pathlib import Path

import pytest

from tokformer import atomic


@pytest.fixture
def durable(monkeypatch) -> list[tuple[str, str]]:
    """The fsyncs and renames of the test, in order: ``("fsync", path)`` and ``("replace", target)``."""
    events: list[tuple[str, str]] = []
    fsync, replace = os.fsync, os.replace

    def recorded_fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        fsync(fd)

    def recorded_replace(src, dst) -> None:
        replace(src, dst)
        events.append(("replace", str(Path(dst).resolve())))

    monkeypatch.setattr(atomic.os, "fsync", recorded_fsync)
    monkeypatch.setattr(atomic.os, "replace", recorded_replace)
    return events


@pytest.fixture
def umask_022():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_text_write_syncs_the_file_before_the_rename_and_the_folder_after(tmp_path, durable) -> None:
    target = tmp_path / "out.txt"
    atomic.write_text_atomic(target, "héllo\n")
    assert target.read_bytes() == "héllo\n".encode()
    (kind, synced), replaced, folder = durable
    assert kind == "fsync" and Path(synced).name.startswith(".out.txt.")  # the temporary, before the rename
    assert Path(synced).parent == tmp_path.resolve()  # beside the target: a rename across file systems fails
    assert replaced == ("replace", str(target.resolve()))
    assert folder == ("fsync", str(tmp_path.resolve()))
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_a_text_write_is_utf_8_whatever_the_locale(tmp_path) -> None:
    """Under the C locale Python's default text encoding is ASCII: a plain write of "é" fails there."""
    before = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        assert locale.getpreferredencoding(False).lower() not in ("utf-8", "utf8")  # the test means something here
        atomic.write_text_atomic(tmp_path / "out.txt", "héllo")
    finally:
        locale.setlocale(locale.LC_CTYPE, before)
    assert (tmp_path / "out.txt").read_bytes() == "héllo".encode()


def test_an_interrupt_just_after_the_rename_surfaces_as_itself(tmp_path, monkeypatch) -> None:
    """The clean-up of a failed write must not fail in turn when the temporary is already renamed."""
    replace = os.replace

    def renamed_then_interrupted(src, dst) -> None:
        replace(src, dst)
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic.os, "replace", renamed_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic.write_text_atomic(tmp_path / "out.txt", "new")
    assert (tmp_path / "out.txt").read_text() == "new" and len(list(tmp_path.iterdir())) == 1


def test_a_json_write_is_the_indented_dump(tmp_path) -> None:
    data = {"b": [1, 2], "a": {"x": None}}
    atomic.write_json_atomic(tmp_path / "d.json", data)
    assert (tmp_path / "d.json").read_text(encoding="utf-8") == json.dumps(data, indent=2)


def test_a_failed_text_write_leaves_no_temporary_and_reraises(tmp_path, monkeypatch) -> None:
    def refused(src, dst) -> None:
        raise PermissionError("refused")

    monkeypatch.setattr(atomic.os, "replace", refused)
    with pytest.raises(PermissionError, match="refused"):
        atomic.write_text_atomic(tmp_path / "out.txt", "x")
    assert list(tmp_path.iterdir()) == []


def test_fsync_tree_syncs_every_file_and_folder_below_the_root_and_the_root(tmp_path, durable) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    for name in ("top.txt", "a/one.txt", "a/b/two.txt"):
        (tmp_path / name).write_text(name)
    atomic.fsync_tree(tmp_path)
    synced = [path for kind, path in durable if kind == "fsync"]
    expected = {tmp_path / "top.txt", tmp_path / "a/one.txt", tmp_path / "a/b/two.txt",
                tmp_path, tmp_path / "a", tmp_path / "a/b"}
    assert sorted(synced) == sorted(str(p.resolve()) for p in expected)
    # bottom up: a folder after its files and sub-folders, the root last
    assert synced[-1] == str(tmp_path.resolve())
    assert synced.index(str((tmp_path / "a").resolve())) > synced.index(str((tmp_path / "a/b").resolve()))


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_usual_permissions_are_a_plain_write_s_and_the_umask_is_left_as_it_was(tmp_path, umask) -> None:
    (tmp_path / "d").mkdir(mode=0o700)
    (tmp_path / "f").write_text("x")
    os.chmod(tmp_path / "f", 0o600)
    previous = os.umask(umask)
    try:
        atomic.usual_permissions(tmp_path / "d")
        atomic.usual_permissions(tmp_path / "f")
        assert os.umask(umask) == umask
    finally:
        os.umask(previous)
    assert _mode(tmp_path / "d") == 0o777 & ~umask
    assert _mode(tmp_path / "f") == 0o666 & ~umask


def test_shareable_opens_every_folder_and_file_below_it(tmp_path, umask_022) -> None:
    (tmp_path / "out" / "sub").mkdir(parents=True)
    for path in (tmp_path / "out", tmp_path / "out" / "sub"):
        os.chmod(path, 0o700)
    for name in ("out/a", "out/sub/b"):
        (tmp_path / name).write_text("x")
        os.chmod(tmp_path / name, 0o600)
    atomic.shareable(tmp_path / "out")
    assert [_mode(tmp_path / n) for n in ("out", "out/sub", "out/a", "out/sub/b")] == [0o755, 0o755, 0o644, 0o644]


def test_a_staged_folder_appears_whole_synced_and_shareable_after_the_block(tmp_path, durable, umask_022) -> None:
    out = tmp_path / "new" / "model"  # its parent is made too
    with atomic.staged_folder(out) as tmp:
        assert tmp.parent == out.parent and tmp.name.startswith(".model.tmp-") and not out.exists()
        (tmp / "weights.bin").write_bytes(b"w")
        (tmp / "sub").mkdir()
        (tmp / "sub" / "config.json").write_text("{}")
    assert (out / "weights.bin").read_bytes() == b"w" and (out / "sub" / "config.json").read_text() == "{}"
    assert [p.name for p in out.parent.iterdir()] == ["model"]
    assert [_mode(p) for p in (out, out / "sub", out / "weights.bin")] == [0o755, 0o755, 0o644]
    rename = durable.index(("replace", str(out.resolve())))
    before = [path for kind, path in durable[:rename] if kind == "fsync"]
    assert {Path(p).name for p in before} == {"weights.bin", "config.json", "sub", tmp.name}
    assert durable[rename + 1:] == [("fsync", str(out.parent.resolve()))]


def test_a_staged_folder_may_replace_an_empty_folder_only(tmp_path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with atomic.staged_folder(empty) as tmp:
        (tmp / "a").write_text("a")
    assert [p.name for p in empty.iterdir()] == ["a"]

    full = tmp_path / "full"
    full.mkdir()
    (full / "theirs").write_text("keep")
    with pytest.raises(OSError), atomic.staged_folder(full) as tmp:
        (tmp / "a").write_text("a")
    assert [p.name for p in full.iterdir()] == ["theirs"] and (full / "theirs").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "full"]  # the temporary is gone


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()])
def test_an_error_in_the_block_removes_the_staged_folder_and_leaves_the_target_as_it_was(tmp_path, error) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(type(error)), atomic.staged_folder(out) as tmp:
        (tmp / "half").write_text("half")
        raise error
    assert out.is_dir() and list(out.iterdir()) == []
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_staging_folders_are_an_outputs_own_by_their_whole_name(tmp_path: Path) -> None:
    """mkdtemp's eight characters after ``.NAME.tmp-``, nothing more or less, under NAME taken literally."""
    out = tmp_path / "m[12]"
    own = [tmp_path / ".m[12].tmp-abcd_123", tmp_path / ".m[12].tmp-zz99xx00"]
    others = [tmp_path / name for name in (".m1.tmp-abcd_123", ".m[12].tmp-notes", ".m[12].tmp-abcd_1234",
                                           ".m[12].tmp-ABCD_123", "m[12].tmp-abcd_123", ".m[12].tmpXabcd_123")]
    for folder in own + others:
        folder.mkdir()
    assert atomic.staging_folders(out) == own
    assert atomic.staging_folders(tmp_path / "missing" / "m") == []
    with atomic.staged_folder(tmp_path / "new") as tmp:
        assert atomic.staging_folders(tmp_path / "new") == [tmp]


def test_write_atomic_fills_a_fresh_temporary_beside_the_target_with_its_suffix(tmp_path, umask_022) -> None:
    """Its name is new (mkstemp), so a user's file is never taken for it; its suffix is the target's, which
    writers that pick a format by suffix (matplotlib's savefig) need; the result reads as a plain write's."""
    (tmp_path / ".fig.png.partial.png").write_text("a user's")  # the name the figure writer used before
    seen: list[Path] = []

    def write(tmp: Path) -> None:
        seen.append(tmp)
        assert tmp.exists() and tmp.stat().st_size == 0
        tmp.write_bytes(b"png")
        os.chmod(tmp, 0o600)  # as safetensors leaves its files

    atomic.write_atomic(tmp_path / "fig.png", write)
    (tmp,) = seen
    assert tmp.parent == tmp_path and tmp.name.startswith(".fig.png.") and tmp.suffix == ".png"
    assert (tmp_path / "fig.png").read_bytes() == b"png" and _mode(tmp_path / "fig.png") == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == [".fig.png.partial.png", "fig.png"]
    assert (tmp_path / ".fig.png.partial.png").read_text() == "a user's"


@pytest.mark.parametrize("where", ["rename", "write"])
def test_an_os_error_on_the_temporary_names_the_target(tmp_path, where: str) -> None:
    """The user named the target; a message naming ``.out.txt.k2j4.txt`` points at a file that is gone."""
    target = tmp_path / "out.txt"
    if where == "rename":  # a folder stands where the file goes
        target.mkdir()

    def write(tmp: Path) -> None:
        if where == "write":
            raise OSError(28, "No space left on device", str(tmp))
        tmp.write_text("x")

    with pytest.raises(OSError) as raised:
        atomic.write_atomic(target, write)
    assert raised.value.filename == str(target) and raised.value.errno == (21 if where == "rename" else 28)
    assert type(raised.value) is (IsADirectoryError if where == "rename" else OSError)
    assert [p.name for p in tmp_path.iterdir()] == (["out.txt"] if where == "rename" else [])


def test_write_atomic_leaves_the_old_file_when_the_writer_fails(tmp_path) -> None:
    (tmp_path / "out.bin").write_bytes(b"old")

    def half(tmp: Path) -> None:
        tmp.write_bytes(b"ha")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic.write_atomic(tmp_path / "out.bin", half)
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"] and (tmp_path / "out.bin").read_bytes() == b"old"


def test_a_replacing_staged_folder_moves_the_older_one_to_a_fresh_name_and_deletes_it_after(tmp_path,
                                                                                           durable) -> None:
    out = tmp_path / "shards"
    out.mkdir()
    (out / "old.bin").write_text("old")
    (tmp_path / ".shards.old").mkdir()  # a user's folder by the name the shards writer used before
    with atomic.staged_folder(out, replace=True) as tmp:
        (tmp / "new.bin").write_text("new")
    assert [p.name for p in out.iterdir()] == ["new.bin"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".shards.old", "shards"]
    moved, renamed, trashed = (target for kind, target in durable if kind == "replace")
    assert Path(moved).name.startswith(".shards.old-") and len(Path(moved).name) == len(".shards.old-") + 8
    assert renamed == str(out.resolve())  # the older folder went first, onto its fresh name
    assert Path(trashed).name.startswith(".shards.tmp-"), "deleted under a staging name, never as .old-"


def test_an_interrupt_between_the_two_renames_of_a_replacement_brings_the_older_folder_back(tmp_path,
                                                                                         monkeypatch) -> None:
    out = tmp_path / "shards"
    out.mkdir()
    (out / "old.bin").write_text("old")
    replace, calls = os.replace, []

    def interrupted_before_the_second(src, dst) -> None:
        calls.append(dst)
        if len(calls) == 2:  # the new folder's rename
            raise KeyboardInterrupt
        replace(src, dst)

    monkeypatch.setattr(atomic.os, "replace", interrupted_before_the_second)
    with pytest.raises(KeyboardInterrupt), atomic.staged_folder(out, replace=True) as tmp:
        (tmp / "new.bin").write_text("new")
    assert [p.name for p in tmp_path.iterdir()] == ["shards"] and (out / "old.bin").read_text() == "old"


def test_an_error_after_the_two_renames_of_a_replacement_keeps_the_new_folder(tmp_path, monkeypatch) -> None:
    out = tmp_path / "shards"
    out.mkdir()
    (out / "old.bin").write_text("old")
    sync = atomic.fsync_dir

    def parent_sync_fails(path: Path) -> None:
        if Path(path) == tmp_path:  # the last step: making the renames durable
            raise OSError("fsync failed")
        sync(path)

    monkeypatch.setattr(atomic, "fsync_dir", parent_sync_fails)
    with pytest.raises(OSError, match="fsync failed"), atomic.staged_folder(out, replace=True) as tmp:
        (tmp / "new.bin").write_text("new")
    assert [p.name for p in tmp_path.iterdir()] == ["shards"] and [p.name for p in out.iterdir()] == ["new.bin"]


def test_a_replacement_killed_between_its_renames_is_undone_and_one_killed_after_them_finished(tmp_path) -> None:
    """What a SIGKILL leaves (no except clause runs): the next holder of the folder's lock repairs it."""
    out, older = tmp_path / "shards", tmp_path / ".shards.old-ab_12cd3"
    older.mkdir()
    (older / "old.bin").write_text("old")
    (tmp_path / ".shards.old-notmine").mkdir()  # not a name mkdtemp makes
    atomic.recover_replaced(out)  # killed between the renames: the older folder comes back
    assert (out / "old.bin").read_text() == "old" and not older.exists()
    older.mkdir()
    (older / "older.bin").write_text("older")
    atomic.recover_replaced(out)  # killed after them: the new one stands, the older one goes
    assert [p.name for p in out.iterdir()] == ["old.bin"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".shards.old-notmine", "shards"]


def test_a_replacing_staged_folder_that_fails_leaves_the_older_one_in_place(tmp_path) -> None:
    out = tmp_path / "shards"
    out.mkdir()
    (out / "old.bin").write_text("old")
    with pytest.raises(RuntimeError), atomic.staged_folder(out, replace=True) as tmp:
        (tmp / "new.bin").write_text("new")
        raise RuntimeError("stopped")
    assert [p.name for p in tmp_path.iterdir()] == ["shards"] and (out / "old.bin").read_text() == "old"


def test_a_staged_folder_makes_every_missing_parent(tmp_path) -> None:
    out = tmp_path / "a" / "b" / "model"
    with atomic.staged_folder(out) as tmp:
        (tmp / "w").write_text("w")
    assert (out / "w").read_text() == "w"


@pytest.mark.parametrize("replace", [False, True])
def test_a_staged_folder_through_a_link_builds_the_folder_it_leads_to_and_keeps_the_link(tmp_path, replace) -> None:
    (tmp_path / "real").mkdir()
    if replace:
        (tmp_path / "real" / "old.txt").write_text("older")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with atomic.staged_folder(tmp_path / "link", replace=replace) as tmp:
        (tmp / "new.txt").write_text("new")
    assert (tmp_path / "link").is_symlink() and os.readlink(tmp_path / "link") == str(tmp_path / "real")
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]


def test_an_atomic_write_into_a_missing_folder_raises_its_own_error(tmp_path) -> None:
    """The temporary cannot be made: the error is the OS's, not one of the clean-up's."""
    with pytest.raises(FileNotFoundError):
        atomic.write_text_atomic(tmp_path / "missing" / "out.txt", "new")
    assert list(tmp_path.iterdir()) == []


def test_a_replacement_whose_trash_folder_cannot_be_made_raises_that_error_and_keeps_the_new_folder(
        tmp_path, monkeypatch) -> None:
    """The older folder is deleted from a fresh staging folder (the third mkdtemp of a replacement); one that
    cannot be made ends in the OS's error, not one of the clean-up's, with the new folder in place."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "v").write_text("old")
    real, calls = atomic.tempfile.mkdtemp, []

    def full_at_the_third(*args, **kwargs):
        calls.append(kwargs.get("prefix"))
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(atomic.tempfile, "mkdtemp", full_at_the_third)
    with pytest.raises(OSError, match="No space left on device"), atomic.staged_folder(out, replace=True) as folder:
        (folder / "v").write_text("new")
    assert (out / "v").read_text() == "new" and calls[2] == ".out.tmp-"
