"""What tokformer/files.py's mutation run found unchecked: the working directory named for a relative
``~`` path, the wording of read errors other readers raise, the line and column of a bad byte right
after a newline, each of the characters that make a file name leave its folder, where a quoted value
is cut, and how files split into lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokformer import files
from tokformer.errors import DataError, UsageError
from tokformer.store.run_dir import ENGINE_FILES


def test_a_relative_path_is_named_with_where_it_was_looked_for(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert files.where("data/x.jsonl") == (f"data/x.jsonl (looked for {tmp_path / 'data' / 'x.jsonl'}: "
                                          f"working directory {tmp_path})")
    assert files.where("~/x.jsonl") == "~/x.jsonl"  # home-relative is absolute once expanded


def test_errors_of_other_readers_are_worded_by_kind() -> None:
    """``files.reading`` wraps readers of other libraries: their decoding and I/O errors read like ours."""
    try:
        b"ab\xffc".decode("utf-8")
    except UnicodeDecodeError as error:
        assert str(files.file_error("t.txt", error)) == "t.txt is not UTF-8 text (invalid byte at offset 2)"
    assert str(files.file_error("t.txt", OSError(5, "Input/output error"))) == "cannot read t.txt: Input/output error"
    assert str(files.file_error("t.txt", OSError("disk gone"))) == "cannot read t.txt: disk gone"


@pytest.mark.parametrize(("data", "line", "column"), [
    (b"\n\xff", 2, 1),  # first byte a newline: counting must start at byte 0
    (b"\xff", 1, 1),
    (b"ab\n\ncd\xff\n", 3, 3),
])
def test_the_bad_byte_is_placed_by_line_and_column(tmp_path, data, line, column) -> None:
    path = tmp_path / "t.txt"
    path.write_bytes(data)
    with pytest.raises(DataError) as raised:
        files.read_text(path)
    assert str(raised.value) == f"{path}:{line} is not UTF-8 text (invalid byte 0xff at column {column})"


@pytest.mark.parametrize("name", ["a\\b.png", "a\0b.png", "..", "/abs.png"])
def test_each_way_out_of_the_folder_is_refused_on_its_own(tmp_path, name) -> None:
    with pytest.raises(DataError, match="points outside"):
        files.inside(tmp_path, name, "index.json")


def test_a_name_of_up_to_4096_bytes_is_a_path_and_a_longer_one_is_refused_before_the_file_system(tmp_path) -> None:
    """Resolving a name costs time in the square of its length: PATH_MAX bytes are the most a path may be.
    The bytes count, not the characters ("é" is two)."""
    longest = "/".join(["d" * 255] * 16)[:4094] + "é"  # 4096 bytes, 4095 characters
    assert files.inside(tmp_path, longest, "index.json") == tmp_path / longest
    with pytest.raises(DataError, match="is longer than 4096 bytes"):
        files.inside(tmp_path, longest + "x", "index.json")


def test_a_quoted_value_is_cut_after_80_characters() -> None:
    assert files.shown("x" * 78) == repr("x" * 78)  # 80 characters with the quotes: whole
    assert files.shown("x" * 79) == f"{repr('x' * 79)[:80]}... (81 characters)"


@pytest.mark.parametrize(("data", "lines"), [
    (b"a\nb\n", ["a", "b"]),  # the final newline ends the last line
    (b"a\r\nb", ["a", "b"]),  # CRLF and no final newline
    (b"a\n\nb\n\n", ["a", "", "b", ""]),  # blank lines are lines (the caller names them)
    (b"\n", [""]),
])
def test_files_split_into_lines_as_editors_show_them(tmp_path, data, lines) -> None:
    path = tmp_path / "t.txt"
    path.write_bytes(data)
    assert files.read_lines(path) == lines


def test_an_empty_file_has_no_lines_and_says_so(tmp_path) -> None:
    (tmp_path / "empty.txt").write_bytes(b"")
    with pytest.raises(DataError, match=f"^{tmp_path / 'empty.txt'} is empty$"):
        files.read_lines(tmp_path / "empty.txt")


def test_an_output_file_may_be_new_or_replaced_when_asked_and_never_an_input(tmp_path) -> None:
    new, mine, source = tmp_path / "new.txt", tmp_path / "mine.txt", tmp_path / "in.txt"
    mine.write_text("mine")
    source.write_text("data")
    assert files.check_output_file(str(new), overwrite=False, inputs=[source]) == new
    assert files.check_output_file(mine, overwrite=True, inputs=[source, tmp_path / "missing.txt"]) == mine
    with pytest.raises(UsageError, match=rf"^--out {mine} exists; pass --overwrite to replace it$"):
        files.check_output_file(mine, overwrite=False)
    with pytest.raises(UsageError, match=rf"^-o {tmp_path} is a folder or another non-file; give the path of a file "
                                         "to write$"):
        files.check_output_file(tmp_path, overwrite=True, flag="-o")
    (tmp_path / "hard.txt").hardlink_to(source)
    for name in ("in.txt", "hard.txt"):  # the input by its own name or another one
        with pytest.raises(UsageError, match=rf"^--out {tmp_path / name} is the input {source}: writing there would "
                                             "replace it; choose another file$"):
            files.check_output_file(tmp_path / name, overwrite=True, inputs=[tmp_path / "missing.txt", source])
    assert mine.read_text() == "mine" and source.read_text() == "data"
    assert files.check_output_file(tmp_path / "sub" / "deeper" / "x.txt", overwrite=False).parent.name == "deeper"
    for under in (mine / "x.txt", mine / "sub" / "x.txt"):  # a file where a folder would have to be made
        with pytest.raises(UsageError, match=rf"^--out {under}: {mine} is a file, not a folder to write in; choose "
                                             "another path$"):
            files.check_output_file(under, overwrite=True)  # it was `File exists: mine.txt` when written


OWNED = (*ENGINE_FILES, "tokenizer/tokenizer.json", "corpus/corpus.bin", "classes.json")


def test_the_users_entries_in_a_run_are_listed_with_folders_marked(tmp_path: Path) -> None:
    (tmp_path / "analysis").mkdir()
    (tmp_path / "thesis.txt").write_text("x")
    (tmp_path / "checkpoints").mkdir()  # the engine's
    (tmp_path / "tokenizer").mkdir()  # the task's
    assert files.foreign_entries(tmp_path, OWNED) == ["analysis/", "thesis.txt"]


def make(root: Path, *paths: str) -> None:
    """Files (and, ending in ``/``, folders) under ``root``."""
    for path in paths:
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.mkdir() if path.endswith("/") else target.write_text("x")


def test_what_tokformer_writes_in_a_run_is_not_foreign(tmp_path: Path) -> None:
    make(tmp_path, "config.json", "best.json", "metrics.jsonl", "classes.json", "tokenizer/tokenizer.json",
         "checkpoints/step-00000002/model.safetensors", "checkpoints/step-00000002/state.json",
         "checkpoints/step-00000002/state.safetensors", "checkpoints/step-00000004/shard-00001-of-00002.safetensors",
         "checkpoints/step-00000004/manifest.json", "checkpoints/.tmp-step-00000006-k2j4/model.safetensors",
         "checkpoints/.tmp-step-00000006-k2j4/deeper/anything", "checkpoints/.tmp-step-00000008-x9/",
         "plots/loss.png", "plots/confusion.png",
         "tensorboard/events.out.tfevents.1700000000.host.1.0", "corpus/corpus.bin",
         ".metrics.jsonl.k2j4x9.jsonl", "plots/.loss.png.k2j4x9.png", "tokenizer/.tokenizer.json.a1.json")
    assert files.foreign_entries(tmp_path, OWNED) == []


def test_the_users_files_inside_tokformers_folders_are_foreign(tmp_path: Path) -> None:
    """``--overwrite`` deletes the whole run: notes the user put in its plots or tokenizer folder with it."""
    make(tmp_path, "plots/loss.png", "plots/my_analysis/notes.md", "plots/notes.md", "tokenizer/tokenizer.json",
         "tokenizer/my_notes.txt", "checkpoints/README", "checkpoints/step-00000002/model.safetensors",
         "checkpoints/.tmp-step-00000004-k2j4",  # a file named like a half-written checkpoint's folder
         "checkpoints/step-00000002/notes.txt", "checkpoints/step-00000002/extra/", "corpus/mine.txt",
         "tensorboard/mine.txt", ".thesis.txt.bak", "tokenizer/sub/tokenizer.json", "classes.json/")
    assert files.foreign_entries(tmp_path, OWNED) == [
        ".thesis.txt.bak", "checkpoints/.tmp-step-00000004-k2j4", "checkpoints/README",
        "checkpoints/step-00000002/extra/",
        "checkpoints/step-00000002/notes.txt", "classes.json/", "corpus/mine.txt", "plots/my_analysis/",
        "plots/notes.md", "tensorboard/mine.txt", "tokenizer/my_notes.txt", "tokenizer/sub/"]


def test_a_link_inside_a_run_is_foreign_unless_it_is_a_file_of_ours(tmp_path: Path) -> None:
    make(tmp_path / "elsewhere", "kept.txt")
    (tmp_path / "run" / "plots").mkdir(parents=True)
    (tmp_path / "run" / "plots" / "outside").symlink_to(tmp_path / "elsewhere")  # a folder: never walked into
    (tmp_path / "run" / "plots" / "loss.png").symlink_to(tmp_path / "elsewhere" / "kept.txt")
    assert files.foreign_entries(tmp_path / "run", OWNED) == ["plots/outside/"]


def test_some_of_shows_the_first_three_names_and_marks_more() -> None:
    assert files.some_of(["a", "b"]) == "a, b"
    assert files.some_of(["a", "b", "c"]) == "a, b, c"
    assert files.some_of(["a", "b", "c", "d"]) == "a, b, c ..."
    assert files.some_of(["a", "b"], shown=1) == "a ..."


def test_a_data_file_of_the_wrong_size_says_what_is_there(tmp_path) -> None:
    (tmp_path / "ids.bin").write_bytes(b"\0" * 6)
    (tmp_path / "folder").mkdir()
    assert files.wrong_size(tmp_path / "ids.bin", 6) is None
    assert files.wrong_size(tmp_path / "ids.bin", 8) == "6 bytes"
    assert files.wrong_size(tmp_path / "nothing.bin", 0) == "missing"  # not "0 bytes": there is no file
    assert files.wrong_size(tmp_path / "folder", 4096) == "missing"  # a folder holds no ids, whatever its size


def test_a_jsonl_line_is_its_json_value_or_one_error_naming_where() -> None:
    assert files.json_line(' {"a": [1]} ', "d.jsonl:3") == {"a": [1]}
    for line, why in (("  ", "empty line; every line must hold a JSON object"),
                      ('{"a": }', "not valid JSON (Expecting value)"),
                      ("[" * 100_000, "not valid JSON (JSON nested too deeply)")):
        with pytest.raises(DataError) as info:
            files.json_line(line, "d.jsonl:3")
        assert str(info.value) == f"d.jsonl:3: {why}"


def test_a_field_holding_a_lone_surrogate_is_named_with_its_line() -> None:
    files.check_text("héllo 😀", "d.jsonl:2", "src")  # any text passes
    with pytest.raises(DataError) as info:
        files.check_text("a\ud800b", "d.jsonl:2", "src")
    assert str(info.value) == ('d.jsonl:2: "src" holds a lone surrogate (an unpaired \\ud800-\\udfff escape), '
                               "which is not text")
