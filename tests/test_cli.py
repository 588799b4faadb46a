"""The click CLI end to end (in process): help, training, evaluation, one-line errors."""

import dataclasses
import json

import pytest
from click.testing import CliRunner

from tokformer.cli import main
from tokformer.runtime.config import TrainConfig

pytestmark = pytest.mark.usefixtures("one_thread")


TINY = ["-o", "seq_len=6", "-o", "train_size=128", "-o", "eval_size=32", "-o", "d_model=16", "-o", "n_heads=2",
        "-o", "n_layers=1", "--batch-size", "16", "--device", "cpu", "--quiet"]


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def test_every_command_documents_every_option_and_default():
    for command in ([], ["train"], ["evaluate"], ["tasks"]):
        result = invoke(*command, "--help")
        assert result.exit_code == 0, result.output
    train_help = invoke("train", "--help").output
    for fld in dataclasses.fields(TrainConfig):
        assert "--" + fld.name.replace("_", "-") in train_help
    assert "[default: 0.001]" in train_help and "--resume" in train_help and "--set" in train_help
    assert "[default: best]" in invoke("evaluate", "--help").output


def test_tasks_lists_sort_and_its_options():
    assert "sort" in invoke("tasks").output
    options = invoke("tasks", "sort").output
    assert "seq_len" in options and "default 8" in options


def test_train_then_evaluate(tmp_path):
    run = tmp_path / "run"
    result = invoke("train", "sort", *TINY, "--steps", "4", "--eval-every", "2", "--run-dir", str(run))
    assert result.exit_code == 0, result.output
    assert "done: 4 steps" in result.output
    saved = json.loads((run / "config.json").read_text())
    assert saved["task"]["d_model"] == 16 and saved["train"]["steps"] == 4
    evaluated = invoke("evaluate", str(run), "--json", "--quiet", "--device", "cpu")
    assert evaluated.exit_code == 0, evaluated.output
    report = json.loads(evaluated.output)
    assert set(report) == {"data", "metrics", "baselines"} and report["data"] == "the held-out split"
    assert set(report["metrics"]) == {"loss", "accuracy", "seq_accuracy"}
    assert set(report["baselines"]) == {"identity (copy the input)"}
    assert set(report["baselines"]["identity (copy the input)"]) == {"accuracy", "seq_accuracy"}


def test_config_file_with_flags_winning(tmp_path):
    config = tmp_path / "sort.toml"
    config.write_text('[task]\nname = "sort"\nseq_len = 5\n[train]\nsteps = 3\nlr = 0.01\n')
    run = tmp_path / "run"
    result = invoke("train", "-c", str(config), *TINY, "--lr", "0.002", "--run-dir", str(run))
    assert result.exit_code == 0, result.output
    saved = json.loads((run / "config.json").read_text())
    assert saved["train"]["lr"] == 0.002 and saved["train"]["steps"] == 3
    assert saved["task"]["seq_len"] == 6  # -o beats the file


def _exists(tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "config.json").write_text("{}")
    return ["train", "sort", *TINY, "--run-dir", str(tmp_path / "taken")]


BAD_INPUT = {
    "missing config": (lambda p: ["train", "sort", "-c", str(p / "nope.toml")], "cannot read config file"),
    "malformed config": (lambda p: ["train", "-c", str(_write(p / "bad.yaml", "task: [oops"))], "malformed"),
    "unknown key": (lambda p: ["train", "sort", "-o", "seq_lenn=4"], "Did you mean 'seq_len'"),
    "unknown key in file": (lambda p: ["train", "-c", str(_write(p / "c.toml", '[train]\nsetps = 3\n')), "sort"],
                            "unknown train option 'setps'"),
    "wrong type": (lambda p: ["train", "sort", "--lr", "fast"], "train.lr: expected a number"),
    "heads do not divide": (lambda p: ["train", "sort", "-o", "d_model=30", "-o", "n_heads=4"],
                            "not divisible by n_heads"),
    "zero size": (lambda p: ["train", "sort", "-o", "seq_len=0"], "seq_len must be positive"),
    "negative steps": (lambda p: ["train", "sort", "--steps", "-5"], "steps must be positive"),
    "run dir exists": (_exists, "already exists"),
    "unknown task": (lambda p: ["train", "srot"], "unknown task 'srot'. Did you mean 'sort'?"),
    "no task": (lambda p: ["train"], "no task given"),
    "not a run dir": (lambda p: ["evaluate", str(p)], "not a run directory"),
    "resume not a run dir": (lambda p: ["train", "--resume", str(p)], "not a run directory"),
    "bad device": (lambda p: ["train", "sort", "--device", "toaster"], "not a device"),
    "unknown flag": (lambda p: ["train", "sort", "--stepz", "3"], "No such option '--stepz'"),
    "unknown command": (lambda p: ["trian"], "No such command 'trian'. Did you mean 'train'?"),
    "missing argument": (lambda p: ["predict"], "Missing argument 'RUN_DIR'"),
    "flag out of range": (lambda p: ["predict", str(p), "x.png", "--top-k", "0"], "0 is not in the range x>=1"),
    "non-finite number": (lambda p: ["generate", str(p), "--temperature", "nan"], "'nan' is not a finite number"),
    "negative temperature": (lambda p: ["generate", str(p), "-t", "-1"], "-1.0 is not in the range x>=0.0"),
    "top-k below 1": (lambda p: ["generate", str(p), "--top-k", "0"], "0 is not in the range x>=1"),
    "top-p of nothing": (lambda p: ["generate", str(p), "--top-p", "0"], "0.0 is not in the range 0.0<x<=1.0"),
    "top-p over 1": (lambda p: ["generate", str(p), "--top-p", "1.5"], "1.5 is not in the range 0.0<x<=1.0"),
    "no new tokens": (lambda p: ["generate", str(p), "-n", "0"], "0 is not in the range x>=1"),
    # a shell passes bytes that are not UTF-8 (bash's $'\xff'); Python holds them as lone surrogates
    "stop text not UTF-8": (lambda p: ["generate", str(p), "--stop", "a\udcff"],
                            "Invalid value for '--stop': not UTF-8 text: byte 0xff at character 1"),
    "sentence not UTF-8": (lambda p: ["translate", str(p), "\udcfe"],
                           "Invalid value for '[SENTENCE]': not UTF-8 text: byte 0xfe at character 0"),
    "question not UTF-8": (lambda p: ["vqa", "attention", str(p), "x.png", "how many?", "\udcff"],
                           "Invalid value for 'QUESTIONS...': not UTF-8 text: byte 0xff"),
    "non-finite config value": (lambda p: ["train", "sort", "--lr", "inf"], "train.lr: 'inf' is not a finite number"),
    "resume and overwrite": (lambda p: ["train", "--resume", str(p), "--overwrite"], "give one of them"),
    "conflicting translate inputs": (lambda p: ["translate", str(p), "hi", "--eval"], "exactly one of SENTENCE"),
}


def _write(path, text):
    path.write_text(text)
    return path


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_is_one_line_exit_2(tmp_path, case):
    make_args, needle = BAD_INPUT[case]
    result = invoke(*make_args(tmp_path))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert needle in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_runtime_failure_is_one_line_exit_1(tmp_path):
    import test_engine_train  # noqa: F401  (registers the test-explode task)

    result = invoke("train", "test-explode", "--steps", "10", "--warmup-steps", "2", "--batch-size", "8", "--device",
                    "cpu", "--quiet", "--run-dir", str(tmp_path / "r"))
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert result.output.startswith("Error: loss became nan")
    assert len(result.output.strip().splitlines()) == 1


def test_debug_shows_the_traceback(tmp_path):
    result = invoke("--debug", "train", "srot")
    assert result.exit_code != 0 and result.exception is not None
