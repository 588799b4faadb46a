"""Every command that reads a file, against every kind of bad file: missing, empty, binary,
not UTF-8, one enormous line, unreadable, a directory. Each is one line on stderr naming the
file, exit code 2, no traceback (docs/reliability.md, "Files")."""

import builtins
import io
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from tokformer.cli import main
from tokformer.engine import train
from tokformer.tokenizers.bpe import BPETokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

ENGINE = dict(steps=2, batch_size=8, eval_every=2, device="cpu", quiet=True)
WORDS = "the quick brown fox jumps over the lazy dog "
HUGE_LINE = WORDS * 25_000  # ~1 MB without a newline


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """A saved BPE tokenizer and tiny translate and classify runs to feed files to."""
    root = tmp_path_factory.mktemp("runs")
    BPETokenizer.train([WORDS * 50], 300).save(root / "tokenizer")
    small = dict(d_model=32, n_heads=2, train_size=64, eval_size=16)
    train("translate", run_dir=str(root / "translate"), encoder_layers=1, decoder_layers=1, **small, **ENGINE)
    train("classify", run_dir=str(root / "classify"), n_layers=1, **small, **ENGINE)
    return {"tokenizer": root / "tokenizer", "translate": root / "translate", "classify": root / "classify"}


# reader -> (file suffix, CLI arguments given the file, the run fixtures and a scratch dir)
READERS: dict[str, tuple[str, Callable[[Path, dict, Path], list[str]]]] = {
    "tokenizer train": (".txt", lambda f, r, tmp: ["tokenizer", "train", "--data", f, "--vocab-size", "300",
                                                   "--out", tmp / "tok", "--quiet"]),
    "tokenizer encode": (".txt", lambda f, r, tmp: ["tokenizer", "encode", "--tokenizer", r["tokenizer"],
                                                    "--file", f, "--quiet"]),
    "train lm": (".txt", lambda f, r, tmp: ["train", "lm", "-o", f"data={f}", "-o", "context_len=8",
                                            "-o", "d_model=16", "-o", "n_heads=2", "-o", "n_layers=1",
                                            "--steps", "1", "--batch-size", "2", "--quiet", "--run-dir", tmp / "r"]),
    "train translate": (".txt", lambda f, r, tmp: ["train", "translate", "-o", f"data={f}",
                                                   "-o", f"data_tgt={f}", "--quiet", "--run-dir", tmp / "r"]),
    "translate --file": (".txt", lambda f, r, tmp: ["translate", r["translate"], "--file", f, "--quiet"]),
    "config file": (".toml", lambda f, r, tmp: ["train", "-c", f, "--run-dir", tmp / "r"]),
    "predict image": (".png", lambda f, r, tmp: ["predict", r["classify"], f]),
    "graph manifest": (".csv", lambda f, r, tmp: ["train", "graph", "-o", f"data={f}", "--quiet",
                                                  "--run-dir", tmp / "r"]),
}

# fault -> how to make it at a path
FAULTS: dict[str, Callable[[Path], None]] = {
    "missing": lambda p: None,
    "empty": lambda p: p.write_bytes(b""),
    "binary": lambda p: p.write_bytes(bytes(range(256)) * 40),
    "not utf-8": lambda p: p.write_bytes("caf\xe9 cr\xe8me br\xfbl\xe9e\n".encode("latin-1")),
    "enormous line": lambda p: p.write_text(HUGE_LINE, encoding="utf-8"),
    "unreadable": lambda p: p.write_text(WORDS + "\n", encoding="utf-8"),  # made unreadable by the fixture below
    "directory": lambda p: p.mkdir(),
}

# (reader, fault) pairs that are not errors, with what must hold instead
SUCCEEDS = {
    ("tokenizer train", "enormous line"),  # trained on; pre-tokenization splits the line into words
    ("tokenizer encode", "enormous line"),  # encoded in linear time (tests/test_bpe.py has the pathological case)
    ("tokenizer encode", "empty"),  # no text, no ids
    ("train lm", "enormous line"),  # a corpus is one stream of tokens: lines do not matter
}
# what the message must say besides the file's name, where a fault has one specific cause
SAYS = {"missing": ("not", "no such"), "empty": ("empty", "no usable", "nothing", "header"),
        "directory": ("directory", "names no files"), "unreadable": ("permission",)}
NOT_APPLICABLE = {("predict image", "not utf-8"), ("predict image", "enormous line")}
CASES = [(r, f) for r in READERS for f in FAULTS if (r, f) not in NOT_APPLICABLE]


@pytest.fixture
def unreadable(monkeypatch):
    """Make ``path`` unreadable: chmod 000, or, for root (who reads anything), fail its opens."""

    def make(path: Path) -> None:
        os.chmod(path, 0)
        if os.geteuid() != 0:
            return
        real_open = builtins.open

        def guarded_open(file, *args, **kwargs):
            if isinstance(file, (str, os.PathLike)) and Path(file).resolve() == path.resolve():
                raise PermissionError(13, "Permission denied", str(file))
            return real_open(file, *args, **kwargs)

        monkeypatch.setattr(builtins, "open", guarded_open)
        monkeypatch.setattr(io, "open", guarded_open)

    return make


@pytest.mark.parametrize(("reader", "fault"), CASES, ids=[f"{r}-{f}" for r, f in CASES])
def test_bad_file(reader, fault, runs, tmp_path, unreadable):
    suffix, make_args = READERS[reader]
    path = tmp_path / f"input{suffix}"
    FAULTS[fault](path)
    if fault == "unreadable":
        unreadable(path)
    result = CliRunner().invoke(main, [str(a) for a in make_args(path, runs, tmp_path)])
    assert "Traceback" not in result.output and not isinstance(result.exception, AssertionError)
    if (reader, fault) in SUCCEEDS:
        assert result.exit_code == 0, result.output
        return
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert path.name in lines[0], lines[0]
    if fault in SAYS:
        assert any(word in lines[0].lower() for word in SAYS[fault]), lines[0]
