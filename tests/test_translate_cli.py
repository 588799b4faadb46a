"""`tokformer train translate` then `tokformer translate`, in process, and their one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from tokformer.cli import main
from tokformer.errors import ConfigError
from tokformer.tasks.numbers_de import english, german
from tokformer.tasks.translate import translate

pytestmark = pytest.mark.usefixtures("one_thread")


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


TINY = ["-o", "vocab_size=300", "-o", "d_model=32", "-o", "n_heads=2", "-o", "encoder_layers=1",
        "-o", "decoder_layers=1", "--steps", "4", "--eval-every", "4", "--batch-size", "8", "--warmup-steps", "1",
        "--device", "cpu", "--quiet"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli")
    (root / "train.tsv").write_text("".join(f"{english(n)}\t{german(n)}\n" for n in range(1, 60)), encoding="utf-8")
    (root / "eval.tsv").write_text("".join(f"{english(n)}\t{german(n)}\n" for n in (61, 62)), encoding="utf-8")
    result = invoke("train", "translate", "-o", f"data={root / 'train.tsv'}", "-o", f"eval_data={root / 'eval.tsv'}",
                    *TINY, "--run-dir", str(root / "run"))
    assert result.exit_code == 0, result.output
    assert "exact_match=" in result.output
    return root / "run"


def test_translate_a_sentence_a_file_and_the_held_out_split(run_dir: Path, tmp_path: Path) -> None:
    result = invoke("translate", str(run_dir), "twenty-one", "--beam-size", "2", "--length-penalty", "0.6")
    assert result.exit_code == 0, result.output
    assert len(result.output.splitlines()) == 1
    (tmp_path / "in.txt").write_text("one\ntwo hundred\nthirty-three\n", encoding="utf-8")
    result = invoke("translate", str(run_dir), "--file", str(tmp_path / "in.txt"), "--out", str(tmp_path / "o.txt"),
                    "-q")
    assert result.exit_code == 0, result.output
    assert len((tmp_path / "o.txt").read_text(encoding="utf-8").splitlines()) == 3
    result = invoke("translate", str(run_dir), "--file", str(tmp_path / "in.txt"), "--beam-size", "1", "-q")
    assert result.exit_code == 0 and len(result.output.splitlines()) == 3
    result = invoke("translate", str(run_dir), "--eval", "-q")
    assert result.exit_code == 0, result.output
    assert {line.split(":")[0] for line in result.output.splitlines()} == {"bleu", "chrf", "exact_match", "sentences"}


def test_translations_never_replace_their_input_and_replace_another_file_only_with_overwrite(run_dir: Path,
                                                                                            tmp_path: Path) -> None:
    source, out = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("one\ntwo\n", encoding="utf-8")
    link = tmp_path / "link.txt"
    link.symlink_to(source)
    for target in (source, link):  # the input itself, or another name of it
        result = invoke("translate", str(run_dir), "--file", str(source), "--out", str(target), "--overwrite", "-q")
        assert result.exit_code == 2 and result.output == (f"Error: --out {target} is the input {source}: writing "
                                                           "there would replace it; choose another file\n")
    assert source.read_text(encoding="utf-8") == "one\ntwo\n"
    out.write_text("mine", encoding="utf-8")
    result = invoke("translate", str(run_dir), "--file", str(source), "--out", str(out), "-q")
    assert result.exit_code == 2 and result.output == f"Error: --out {out} exists; pass --overwrite to replace it\n"
    assert out.read_text(encoding="utf-8") == "mine"
    result = invoke("translate", str(run_dir), "--file", str(source), "--out", str(out), "--overwrite", "-q")
    assert result.exit_code == 0, result.output
    assert len(out.read_text(encoding="utf-8").splitlines()) == 2
    result = invoke("translate", str(run_dir), "--file", str(source), "--out", str(tmp_path), "--overwrite", "-q")
    assert result.exit_code == 2 and "is a folder or another non-file" in result.output


def test_bad_input_is_one_line_naming_file_and_line(run_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "holes.txt").write_text("one\n\ntwo\n", encoding="utf-8")
    result = invoke("translate", str(run_dir), "--file", str(tmp_path / "holes.txt"))
    assert result.exit_code == 2
    assert result.output.strip().endswith("holes.txt:2: empty line; give one sentence per line")
    assert "Traceback" not in result.output
    result = invoke("translate", str(run_dir))
    assert result.exit_code == 2 and "exactly one of SENTENCE, --file and --eval" in result.output
    result = invoke("translate", str(run_dir), " ".join(["one"] * 80))
    assert result.exit_code == 2 and "more than the model's max_len" in result.output
    (tmp_path / "a.en").write_text("one\ntwo\n", encoding="utf-8")
    (tmp_path / "a.de").write_text("eins\n", encoding="utf-8")
    result = invoke("train", "translate", "-o", f"data={tmp_path / 'a.en'}", "-o", f"data_tgt={tmp_path / 'a.de'}",
                    *TINY, "--run-dir", str(tmp_path / "bad"))
    assert result.exit_code == 2
    assert "misaligned parallel files" in result.output and "a.en has 2 lines" in result.output
    (tmp_path / "x.tsv").write_text("one\teins\ntwo zwei\n", encoding="utf-8")
    result = invoke("train", "translate", "-o", f"data={tmp_path / 'x.tsv'}", *TINY, "--run-dir", str(tmp_path / "b"))
    assert result.exit_code == 2 and "x.tsv:2: expected 'source<TAB>target', found no tab" in result.output


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--beam-size", "1025", "Invalid value for '--beam-size': 1025 is not in the range 1<=x<=1024."),
    ("--length-penalty", "400", "Invalid value for '--length-penalty': 400.0 is not in the range -10.0<=x<=10.0."),
    ("--length-penalty", "-1000", "Invalid value for '--length-penalty': -1000.0 is not in the range "
                                  "-10.0<=x<=10.0."),
    ("--length-penalty", "nan", "Invalid value for '--length-penalty': 'nan' is not a finite number."),
])
def test_beam_size_and_length_penalty_flags_are_ranged(run_dir: Path, flag: str, value: str, message: str) -> None:
    """Before: a beam of 100,000 allocated 4.5 GB and ended in an allocator error (exit 1); a length
    penalty of 400 or -1000 overflowed or divided by zero once an output was a few tokens long. (Only
    the first beam past the cap is tried: should the cap go, 100,000 would exhaust the test machine.)"""
    result = invoke("translate", str(run_dir), "three", flag, value)
    assert result.exit_code == 2 and result.output.startswith(f"Error: {message} See ")
    assert len(result.output.splitlines()) == 1


@pytest.mark.parametrize(("option", "message"), [
    ("beam_size=1025", "beam_size must be in [1, 1024], got 1025"),
    ("length_penalty=400", "length_penalty must be in [-10, 10], got 400.0"),
    ("length_penalty=-1000", "length_penalty must be in [-10, 10], got -1000.0"),
])
def test_out_of_range_decoding_options_are_refused_before_a_run_starts(run_dir: Path, tmp_path: Path, option: str,
                                                                        message: str) -> None:
    """As a task option the run's decoding failed at its first evaluation, losing the run; through the
    library (the run's default overridden per call) it failed mid-decoding."""
    result = invoke("train", "translate", "-o", option, *TINY, "--run-dir", str(tmp_path / "run"))
    assert result.exit_code == 2 and result.output == f"Error: {message}\n"
    assert not (tmp_path / "run").exists()
    name, value = option.split("=")
    with pytest.raises(ConfigError) as info:
        translate(run_dir, ["three"], **{name: float(value) if name == "length_penalty" else int(value)})
    assert str(info.value) == message


@pytest.mark.parametrize("error", [
    RuntimeError("[enforce fail at alloc_cpu.cpp:127] data. DefaultCPUAllocator: not enough memory: you tried to "
                 "allocate 819200000 bytes."),
    RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried "
                 "to allocate 819200000 bytes. Error code 12 (Cannot allocate memory)"),
    torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 79.19 GiB"
                           "\nof which 1.2 GiB is free."),
], ids=["cpu", "cpu-older-torch", "cuda"])
def test_an_allocator_failure_is_out_of_memory_not_an_internal_error(run_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     error: RuntimeError) -> None:
    """torch's allocators raise RuntimeError, not MemoryError: the one line says what MemoryError's says."""
    def allocate(*args: object, **kwargs: object) -> None:
        raise error

    monkeypatch.setattr("tokformer.tasks.translate.translate", allocate)
    result = invoke("translate", str(run_dir), "three")
    assert result.exit_code == 1
    assert result.output == f"Error: out of memory: {' '.join(str(error).split())}; ask for less (data, batch, model)\n"


def test_the_flags_bounds_are_the_decoders() -> None:
    """The CLI writes the bounds out (importing beam_search would load torch for --help): they must agree."""
    from tokformer.beam_search import MAX_BEAM_SIZE, MAX_LENGTH_PENALTY

    params = {p.name: p.type for p in main.commands["translate"].params}
    assert (params["beam_size"].min, params["beam_size"].max) == (1, MAX_BEAM_SIZE)
    assert (params["length_penalty"].min, params["length_penalty"].max) == (-MAX_LENGTH_PENALTY, MAX_LENGTH_PENALTY)
