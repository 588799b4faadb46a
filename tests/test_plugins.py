"""One registry behaviour for tasks and tokenizers: a broken plug-in is skipped with the same
warning and, when asked for by name, refused with the same error."""

from __future__ import annotations

import logging
import types

import pytest

from tokformer.errors import ConfigError
from tokformer.files import read_bytes, read_text
from tokformer.runtime import registry as task_registry
from tokformer.tokenizers import registry as tokenizer_registry
from tokformer.tokenizers.base import TokenizerError


def _broken(name: str) -> types.SimpleNamespace:
    def fail() -> None:
        raise ImportError("No module named 'missing_dependency'")

    return types.SimpleNamespace(name=name, value="broken_pkg:Thing", load=fail)


@pytest.mark.parametrize(("module", "lookup", "error", "kind"), [
    (task_registry, task_registry.get_task, ConfigError, "task"),
    (tokenizer_registry, tokenizer_registry.get_tokenizer_class, TokenizerError, "tokenizer"),
])
def test_a_broken_plugin_is_skipped_and_named_the_same_way(module, lookup, error, kind, monkeypatch, caplog):
    point = _broken(f"broken-{kind}")
    monkeypatch.setattr(module, "entry_points", lambda group: [point] if group == module.ENTRY_POINT_GROUP else [])
    with caplog.at_level(logging.WARNING), pytest.raises(error) as raised:
        lookup(f"broken-{kind}")
    assert str(raised.value) == (f"{kind} 'broken-{kind}' comes from a plug-in that failed to import "
                                 "(ImportError: No module named 'missing_dependency'); fix or uninstall that package")
    assert (f"{kind} plug-in 'broken-{kind}' failed to import and is skipped: "
            "ImportError: No module named 'missing_dependency'") in caplog.text
    lookup({"task": "sort", "tokenizer": "bpe"}[kind])  # the built-ins still work


@pytest.mark.parametrize(("lookup", "error", "kind", "typo", "known"), [
    (task_registry.get_task, ConfigError, "task", "srot", "sort"),
    (tokenizer_registry.get_tokenizer_class, TokenizerError, "tokenizer", "bpee", "bpe"),
])
def test_unknown_names_get_the_same_message(lookup, error, kind, typo, known):
    with pytest.raises(error, match=rf"^unknown {kind} '{typo}'\. Did you mean '{known}'\? Known {kind}s: .*{known}"):
        lookup(typo)


def test_file_errors_are_one_data_error_naming_the_file(tmp_path, monkeypatch):
    from tokformer.errors import DataError

    latin = tmp_path / "latin.txt"
    latin.write_bytes("caf\xe9".encode("latin-1"))
    later = tmp_path / "later.jsonl"  # the bad byte on line 3, after a byte-order mark and a CRLF line
    later.write_bytes(b"\xef\xbb\xbf{}\r\n{}\n{\"a\": \"\xff\"}\n")
    locked = tmp_path / "locked.txt"
    locked.write_text("x")
    real = type(locked).read_bytes
    monkeypatch.setattr(type(locked), "read_bytes",
                        lambda self: (_ for _ in ()).throw(PermissionError(13, "Permission denied"))
                        if self.name == "locked.txt" else real(self))
    cases = {tmp_path / "missing.txt": f"{tmp_path / 'missing.txt'}: no such file",
             tmp_path: f"{tmp_path} is a directory, not a file",
             locked: f"cannot read {locked}: permission denied",
             latin: f"{latin}:1 is not UTF-8 text (invalid byte 0xe9 at column 4)",
             later: f"{later}:3 is not UTF-8 text (invalid byte 0xff at column 8)"}
    for path, message in cases.items():
        with pytest.raises(DataError) as raised:
            read_text(path)
        assert str(raised.value) == message
    assert read_bytes(latin) == b"caf\xe9"


def test_json_files_name_the_file_when_not_json(tmp_path):
    from tokformer.errors import DataError
    from tokformer.files import read_json

    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text('{"a": [1, 2]}')
    bad.write_text("{oops")
    assert read_json(good) == {"a": [1, 2]}
    with pytest.raises(DataError, match=r"bad\.json is not valid JSON: Expecting property name"):
        read_json(bad)
    with pytest.raises(DataError, match="no such file"):
        read_json(tmp_path / "missing.json")
