"""`tokformer data prepare lm` then `tokformer train lm --data SHARDS`: streaming, exact resume,
and one-line errors for bad input."""

import json
import shutil

import pytest
from click.testing import CliRunner
from safetensors.torch import load_file

from tokformer.cli import main
from tokformer.engine import train
from tokformer.store.steps import step_dir
from tokformer.tasks import lm_data, lm_shards
from tokformer.tokenizers.bpe import BPETokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

TEXT = "def add(a, b):\n    return a + b\n\n\nclass Point:\n    x = 0\n    y = 0\n"
MODEL = dict(context_len=16, d_model=16, n_heads=2, n_layers=1, val_fraction=0.1, batch_size=4, device="cpu",
             quiet=True)
PREPARE_FLAGS = ["--data", "--out", "--tokenizer", "--vocab-size", "--tokenizer-chars", "--data-seed",
                 "--shard-tokens", "--workers", "--overwrite", "--quiet"]


def invoke(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def assert_one_line_error(result, message: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0], result.output
    assert "Traceback" not in result.output


@pytest.fixture(scope="module")
def text_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("text")
    for i in range(12):
        (root / f"{i:02d}.py").write_text(TEXT.replace("Point", f"Point{i}") * 3, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def shards(text_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("shards") / "s"
    result = invoke("data", "prepare", "lm", "--data", text_dir, "--out", out, "--vocab-size", 300,
                    "--shard-tokens", 100, "--workers", 2, "--quiet")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("wrote ") and "documents in" in result.output
    return out


def test_every_prepare_option_is_a_documented_flag():
    result = invoke("data", "prepare", "lm", "--help")
    assert result.exit_code == 0
    for flag in PREPARE_FLAGS:
        assert flag in result.output, flag
    assert "lm" in invoke("data", "prepare", "--help").output and "prepare" in invoke("data", "--help").output


def test_training_streams_the_shards_without_packing_a_corpus(shards, tmp_path):
    run = tmp_path / "run"
    result = invoke("train", "lm", "--data", shards, "--context-len", 16, "--d-model", 16, "--n-heads", 2,
                    "--n-layers", 1, "--val-fraction", 0.1, "--batch-size", 4, "--steps", 2, "--eval-every", 2,
                    "--device", "cpu", "--quiet", "--run-dir", run)
    assert result.exit_code == 0, result.output
    assert not (run / "corpus").exists()  # nothing copied: the shards are read where they are
    assert BPETokenizer.load(run / "tokenizer").files() == BPETokenizer.load(shards / "tokenizer").files()
    assert json.loads((run / "best.json").read_text())["step"] == 2


def test_an_interrupted_run_on_shards_resumes_with_bit_identical_losses(shards, tmp_path):
    # 100-token shards and 16-token windows: many windows span two shards. Dropout draws from
    # the RNG every step, so exactness needs the data position and the RNG states restored.
    args = dict(steps=10, eval_every=5, keep_last=5, log_every=1, deterministic=True, dropout=0.1, **MODEL)
    full = train("lm", data=str(shards), run_dir=str(tmp_path / "full"), **args).run_dir
    cut = tmp_path / "cut"
    shutil.copytree(full, cut)
    shutil.rmtree(step_dir(cut, 10))  # as if the run had died after step 5's checkpoint
    assert train(resume=cut, quiet=True).step == 10

    def train_losses(run):
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        return {r["step"]: r["loss"] for r in records if r["split"] == "train"}

    losses = train_losses(full)
    assert sorted(losses) == list(range(1, 11)) and train_losses(cut) == losses
    a, b = load_file(step_dir(full, 10) / "model.safetensors"), load_file(step_dir(cut, 10) / "model.safetensors")
    assert all((a[k] == b[k]).all() for k in a)


def test_evaluate_accepts_shards_made_with_the_runs_tokenizer(shards, tmp_path):
    run = train("lm", data=str(shards), steps=2, eval_every=2, run_dir=str(tmp_path / "run"), **MODEL).run_dir
    result = invoke("evaluate", run, "--data", shards, "--json", "--quiet")
    assert result.exit_code == 0, result.output
    evaluation = json.loads(result.stdout)
    assert evaluation["data"] == str(shards) and evaluation["metrics"]["perplexity"] > 1


def test_prepare_refuses_bad_input_in_one_line(text_dir, shards, tmp_path):
    no_eot = tmp_path / "no-eot"
    BPETokenizer.train([TEXT], 270).save(no_eot)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "blank.txt").write_text("  \n")
    cases = {
        "missing dir": (["--data", tmp_path / "nowhere"], "is not a file, a folder or a glob"),
        "empty corpus": (["--data", tmp_path / "empty"], "holds no usable text"),
        "tokenizer without end-of-text": (["--data", text_dir, "--tokenizer", no_eot], "no <|endoftext|>"),
        "missing tokenizer": (["--data", text_dir, "--tokenizer", tmp_path / "nope"], "nope"),
        "existing shards": (["--data", text_dir, "--out", shards], "already holds shards; pass --overwrite"),
        "zero workers": (["--data", text_dir, "--workers", 0], "--workers"),
    }
    for name, (args, message) in cases.items():
        if "--out" not in args:
            args = [*args, "--out", tmp_path / "out"]
        assert_one_line_error(invoke("data", "prepare", "lm", "--quiet", *args), message)
        assert not (tmp_path / "out").exists(), name
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging left behind


def test_train_refuses_a_mismatched_tokenizer_or_damaged_shards_in_one_line(shards, tmp_path):
    other = tmp_path / "other"
    BPETokenizer.train([TEXT * 2 + "other words"], 290, special_tokens=[lm_data.EOT]).save(other)
    flags = ["--context-len", 16, "--d-model", 16, "--n-heads", 2, "--n-layers", 1, "--steps", 1, "--device", "cpu",
             "--quiet"]
    result = invoke("train", "lm", "--data", shards, "--tokenizer", other, *flags, "--run-dir", tmp_path / "r1")
    assert_one_line_error(result, "is not the tokenizer the shards in")
    damaged = tmp_path / "damaged"
    shutil.copytree(shards, damaged)
    (damaged / lm_shards.INDEX_FILE).write_text("{}")
    result = invoke("train", "lm", "--data", damaged, *flags, "--run-dir", tmp_path / "r2")
    assert_one_line_error(result, "is not a usable shard index")


def test_a_resumed_run_refuses_shards_remade_with_another_tokenizer(text_dir, tmp_path):
    shards = tmp_path / "s"
    lm_shards.prepare_lm(str(text_dir), shards, vocab_size=300, workers=1, show_progress=False)
    run = train("lm", data=str(shards), steps=2, eval_every=2, run_dir=str(tmp_path / "run"), **MODEL).run_dir
    lm_shards.prepare_lm(str(text_dir), shards, vocab_size=280, workers=1, overwrite=True, show_progress=False)
    result = invoke("train", "--resume", run, "--steps", 4, "--quiet")
    assert_one_line_error(result, "is not the tokenizer the shards in")


def test_a_resumed_run_refuses_shards_remade_from_other_text(text_dir, tmp_path):
    """Same tokenizer, more text: the window order would silently change, so resume says so."""
    text, shards = tmp_path / "text", tmp_path / "s"
    shutil.copytree(text_dir, text)
    lm_shards.prepare_lm(str(text), shards, vocab_size=300, workers=1, show_progress=False)
    run = train("lm", data=str(shards), steps=2, eval_every=2, run_dir=str(tmp_path / "run"), **MODEL).run_dir
    resumed = invoke("train", "--resume", run, "--steps", 3, "--quiet")  # the same shards: resumes
    assert resumed.exit_code == 0, resumed.output
    (text / "more.txt").write_text("def more(x):\n    return x + 1\n" * 50)
    lm_shards.prepare_lm(str(text), shards, tokenizer=str(shards / "tokenizer"), workers=1, overwrite=True,
                         show_progress=False)
    result = invoke("train", "--resume", run, "--steps", 4, "--quiet")
    assert_one_line_error(result, "was prepared again since")
