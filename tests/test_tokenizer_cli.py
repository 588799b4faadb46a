"""`tokformer tokenizer train|encode|decode`: CliRunner for behaviour, one real subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tokformer.cli import main
from tokformer.tokenizers import load_tokenizer

TEXT = "the cat sat on the mat. Grüße, 세계! 🙂\n" * 40


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


@pytest.fixture
def trained(tmp_path: Path, corpus: Path) -> Path:
    out = tmp_path / "tok"
    result = CliRunner().invoke(
        main,
        ["tokenizer", "train", "--data", str(corpus), "--vocab-size", "300", "--out", str(out),
         "--special-token", "<|endoftext|>", "--pattern", "cl100k", "-q"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return out


def test_train_encode_decode_round_trip(trained: Path):
    tokenizer = load_tokenizer(trained)
    assert 256 < tokenizer.vocab_size <= 300 and "<|endoftext|>" in tokenizer.special_tokens
    runner = CliRunner()
    encoded = runner.invoke(main, ["tokenizer", "encode", "--tokenizer", str(trained), "Grüße, cat<|endoftext|>"])
    assert encoded.exit_code == 0, encoded.output
    ids = [int(word) for word in encoded.output.split()]
    assert ids == tokenizer.encode("Grüße, cat<|endoftext|>")
    from_args = runner.invoke(main, ["tokenizer", "decode", "--tokenizer", str(trained), *map(str, ids)])
    from_stdin = runner.invoke(main, ["tokenizer", "decode", "--tokenizer", str(trained)], input=encoded.output)
    assert from_args.output == from_stdin.output == "Grüße, cat<|endoftext|>\n"  # a line, as every command prints
    exact = runner.invoke(main, ["tokenizer", "decode", "--tokenizer", str(trained), "--no-newline", *map(str, ids)])
    assert exact.output == "Grüße, cat<|endoftext|>"
    special = runner.invoke(
        main, ["tokenizer", "encode", "--tokenizer", str(trained), "--allow-special", "a<|endoftext|>"]
    )
    assert str(tokenizer.token_to_id("<|endoftext|>")) in special.output.split()


def test_encode_file(trained: Path, corpus: Path):
    result = CliRunner().invoke(main, ["tokenizer", "encode", "--tokenizer", str(trained), "--file", str(corpus), "-q"])
    assert result.exit_code == 0
    assert [int(w) for w in result.output.split()] == load_tokenizer(trained).encode(TEXT)


def _bad_inputs(tmp_path: Path, corpus: Path, trained: Path) -> list[tuple[list[str], str]]:
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("café".encode("latin-1"))
    binary = tmp_path / "blob.bin"
    binary.write_bytes(b"\x00\x01\x02abc")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "tokenizer_config.json").write_text('{"type": "bpe", "config": {}}')
    (broken / "tokenizer.json").write_text('{"model": {"vocab": ')
    train = ["tokenizer", "train", "--out", str(tmp_path / "o"), "--vocab-size"]
    return [
        ([*train, "300", "--data", str(empty)], "holds only whitespace or nothing"),
        (["tokenizer", "train", "--out", str(corpus), "--vocab-size", "300", "--data", str(corpus)],
         "is a file, not a directory to save the tokenizer in"),
        ([*train, "300", "--data", str(latin1)], "not UTF-8"),
        ([*train, "300", "--data", str(binary)], "looks binary"),
        ([*train, "300", "--data", str(tmp_path / "missing.txt")], "no such file"),
        ([*train, "257", "--data", str(corpus), "--special-token", "<a>", "--special-token", "<b>"], "below 256"),
        ([*train, "300", "--data", str(corpus), "--pattern", "gtp2"], "unknown pattern name 'gtp2'"),
        (["tokenizer", "encode", "--tokenizer", str(broken), "hi"], "corrupt JSON file"),
        (["tokenizer", "encode", "--tokenizer", str(tmp_path), "hi"], "not a saved tokenizer"),
        (["tokenizer", "encode", "--tokenizer", str(trained)], "exactly one of TEXT and --file"),
        (["tokenizer", "decode", "--tokenizer", str(trained), "1", "x"], "not a token id: 'x'"),
        (["tokenizer", "decode", "--tokenizer", str(trained), "99999"], "unknown token id 99999"),
    ]


def test_bad_input_is_one_line_exit_2(tmp_path: Path, corpus: Path, trained: Path):
    runner = CliRunner()
    for args, message in _bad_inputs(tmp_path, corpus, trained):
        result = runner.invoke(main, args)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output, (args, result.output)
        assert "Traceback" not in result.output
        assert result.output.strip().splitlines()[-1].startswith("Error: ")


def one_line_exit_2(args: list[str]) -> str:
    """The CLI's output for ``args``: exit 2, one ``Error:`` line and nothing else."""
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("Error: ") and result.output.count("\n") == 1, result.output
    return result.output.strip()


@pytest.mark.parametrize("name", ["tokenizer_config.json", "tokenizer.json"])
def test_a_pipe_in_place_of_a_tokenizer_file_is_one_line_exit_2_not_waited_on(trained: Path, named_pipe,
                                                                              name: str) -> None:
    (trained / name).unlink()
    named_pipe(trained / name)
    line = one_line_exit_2(["tokenizer", "encode", "--tokenizer", str(trained), "hello"])
    assert line == f"Error: {trained / name} is not a regular file (a pipe, socket or device); give a file"


@pytest.mark.parametrize(("name", "corrupt"), [("tokenizer_config.json", "corrupt tokenizer config"),
                                                ("tokenizer.json", "corrupt JSON file")])
def test_a_tokenizer_file_nested_too_deeply_is_the_error_of_corrupt_json(trained: Path, name: str,
                                                                         corrupt: str) -> None:
    """files.loads raises a plain ValueError for it, which was not caught: an internal error, exit 1."""
    (trained / name).write_text('{"a":' * 50_000 + "1" + "}" * 50_000)
    line = one_line_exit_2(["tokenizer", "encode", "--tokenizer", str(trained), "hello"])
    assert line == f"Error: {corrupt} {trained / name}: JSON nested too deeply"


def _cli(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tokformer.cli", "tokenizer", *args],
        input=stdin, capture_output=True, text=True, cwd=cwd, check=False,
    )  # fmt: skip


def test_real_subprocess_reports_one_line_and_exit_2(tmp_path: Path, corpus: Path):
    bad = _cli("train", "--data", str(corpus), "--vocab-size", "10", "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == ["Error: vocab size 10 is below 256 bytes + 1 special tokens = 257"]


@pytest.mark.slow
def test_real_subprocess_round_trip(tmp_path: Path, corpus: Path):
    """Three interpreter starts (each imports torch): slow on a loaded machine."""
    out = tmp_path / "tok"
    train = _cli("train", "--data", str(corpus), "--vocab-size", "280", "--out", str(out), "-q", cwd=tmp_path)
    assert train.returncode == 0, train.stderr
    encode = _cli("encode", "--tokenizer", str(out), "héllo", cwd=tmp_path)
    decoded = _cli("decode", "--tokenizer", str(out), cwd=tmp_path, stdin=encode.stdout)
    assert decoded.stdout == "héllo\n"  # a line, as every command prints


def test_a_tokenizer_trained_without_special_tokens_named_has_the_one_lm_needs(tmp_path: Path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat " * 50, encoding="utf-8")
    runner = CliRunner()
    made = runner.invoke(main, ["tokenizer", "train", "--data", str(corpus), "--vocab-size", "280", "--out",
                                str(tmp_path / "tok"), "-q"])
    assert made.exit_code == 0, made.output
    assert list(load_tokenizer(tmp_path / "tok").special_tokens) == ["<|endoftext|>"]
    bare = runner.invoke(main, ["tokenizer", "train", "--data", str(corpus), "--vocab-size", "280", "--out",
                                str(tmp_path / "bare"), "--no-special-tokens", "-q"])
    assert bare.exit_code == 0 and not load_tokenizer(tmp_path / "bare").special_tokens


def test_training_into_a_hugging_face_tokenizer_folder_is_refused_and_leaves_it_as_it_was(tmp_path: Path,
                                                                                        corpus: Path):
    """A BPE saves tokenizer.json and tokenizer_config.json, the names a Hugging Face folder uses: saving
    there overwrote the user's files, --overwrite or not."""
    folder = tmp_path / "gpt2"
    folder.mkdir()
    theirs = {"tokenizer.json": '{"model": {"type": "BPE"}}', "tokenizer_config.json": '{"model_max_length": 1024}',
              "vocab.json": "{}"}
    for name, text in theirs.items():
        (folder / name).write_text(text)
    for extra in ([], ["--overwrite"]):
        result = CliRunner().invoke(main, ["tokenizer", "train", "--data", str(corpus), "--vocab-size", "300",
                                           "--out", str(folder), "-q", *extra])
        assert result.exit_code == 2 and "which is no tokenizer tokformer saved" in result.output, result.output
    assert {p.name: p.read_text() for p in folder.iterdir()} == theirs
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "gpt2"]  # nothing staged is left


def test_a_saved_tokenizer_is_replaced_only_with_overwrite_and_whole(tmp_path: Path, corpus: Path, trained: Path):
    before = {p.name: p.read_bytes() for p in trained.iterdir()}
    again = ["tokenizer", "train", "--data", str(corpus), "--vocab-size", "300", "--out", str(trained), "-q",
             "--pattern", "gpt2"]  # the fixture's is cl100k
    result = CliRunner().invoke(main, again)
    assert result.exit_code == 2 and "already holds a tokenizer; pass --overwrite" in result.output, result.output
    assert {p.name: p.read_bytes() for p in trained.iterdir()} == before
    assert CliRunner().invoke(main, [*again, "--overwrite"]).exit_code == 0
    after = {p.name: p.read_bytes() for p in trained.iterdir()}
    assert after.keys() == before.keys() and after["tokenizer.json"] != before["tokenizer.json"]
    assert load_tokenizer(trained).vocab_size > 256  # the new one loads: it was written whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "tok"]
