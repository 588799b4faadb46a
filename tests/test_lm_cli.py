"""`tokformer train lm` then `tokformer generate`, in process and as a real subprocess; bad input."""

import json
import math
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner

from tokformer.cli import main
from tokformer.errors import UsageError
from tokformer.layers import GatedFeedForward
from tokformer.tasks.lm import generate_text, load_lm, perplexity

CORPUS = "def add(a, b):\n    return a + b\n\n\nclass Point:\n    x = 0\n    y = 0\n"
TINY = ["-o", "vocab_size=300", "-o", "context_len=16", "-o", "d_model=16", "-o", "n_heads=2", "-o", "n_layers=1",
        "-o", "val_fraction=0.2", "--batch-size", "4", "--steps", "4", "--eval-every", "2", "--device", "cpu",
        "--quiet"]


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm")
    for i in range(12):
        (root / "docs").mkdir(exist_ok=True)
        (root / "docs" / f"{i:02d}.py").write_text(CORPUS.replace("Point", f"Point{i}") * 3)
    run_dir = root / "run"
    result = invoke("train", "lm", "-o", f"data={root / 'docs'}", *TINY, "--run-dir", str(run_dir))
    assert result.exit_code == 0, result.output
    return run_dir


def test_train_writes_tokenizer_and_memmapped_corpus(run):
    meta = json.loads((run / "corpus" / "corpus.json").read_text())
    assert meta["documents"] == 12 and meta["dtype"] == "uint16"
    assert (run / "corpus" / "corpus.bin").stat().st_size == 2 * meta["tokens"]
    assert (run / "tokenizer" / "tokenizer_config.json").is_file()
    scores = perplexity(run)
    assert scores["ppl"] > 1 and scores["unigram_ppl"] > 1 and scores["tokens"] > 0
    evaluated = json.loads(invoke("evaluate", str(run), "--json", "--quiet", "--device", "cpu").output)
    assert math.exp(evaluated["metrics"]["loss"]) == pytest.approx(scores["ppl"], rel=1e-4)  # eval loss = token NLL
    unigram = evaluated["baselines"]["unigram model of the training split (add-one smoothed token frequencies)"]
    assert unigram["perplexity"] == pytest.approx(scores["unigram_ppl"])


def test_generate_streams_and_matches_the_library(run):
    result = invoke("generate", str(run), "--prompt", "def", "-n", "8", "-t", "0")
    assert result.exit_code == 0, result.output
    expected = generate_text(run, "def", max_new_tokens=8, temperature=0)[0]
    assert result.output == "def" + expected + "\n"
    no_cache = invoke("generate", str(run), "--prompt", "def", "-n", "8", "-t", "0", "--no-cache")
    assert no_cache.output == result.output
    batch = invoke("generate", str(run), "-p", "def", "-p", "class", "-n", "5", "--seed", "1", "--top-k", "3")
    assert batch.exit_code == 0 and "--- prompt 2 ---\nclass" in batch.output


@pytest.mark.slow  # a fresh interpreter imports torch: tens of seconds on a loaded machine
def test_generate_in_a_real_subprocess(run):
    out = subprocess.run([sys.executable, "-m", "tokformer.cli", "generate", str(run), "-p", "x =", "-n", "5",
                          "--top-p", "0.9", "--stop", "\n"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("x =") and "\n" not in out.stdout[:-1]


def test_long_prompt_warns_in_one_line(run):
    result = CliRunner().invoke(main, ["generate", str(run), "-p", "a + b " * 50, "-n", "4"])
    assert result.exit_code == 0
    warning = "Warning: a prompt of 152 tokens is longer than the model's context of 16 tokens; keeping its last 16\n"
    assert result.stderr.count("\n") == 1 and result.stderr == warning


def test_bad_run_directories_are_one_line_errors(run, tmp_path):
    missing = invoke("generate", str(tmp_path / "nope"), "-p", "x")
    assert missing.exit_code == 2 and "is not a run directory" in missing.output
    other = tmp_path / "sort_run"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"task": {"name": "sort"}, "train": {}}))
    result = invoke("generate", str(other), "-p", "x")
    assert result.exit_code == 2 and "task 'sort', not of 'lm'" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    with pytest.raises(UsageError):
        load_lm(other)


def test_empty_corpus_is_a_one_line_error(tmp_path):
    (tmp_path / "empty.txt").write_text("   \n")
    result = invoke("train", "lm", "-o", f"data={tmp_path / 'empty.txt'}", *TINY, "--run-dir", str(tmp_path / "r"))
    assert result.exit_code == 2 and "no usable text" in result.output
    missing = invoke("train", "lm", "-o", f"data={tmp_path / 'nothing*.txt'}", *TINY, "--run-dir", str(tmp_path / "s"))
    assert missing.exit_code == 2 and "not a file, a folder or a glob" in missing.output


def test_train_a_llama_shaped_model_from_the_cli(tmp_path):
    """RoPE + RMSNorm + SwiGLU + grouped-query attention, no biases: every option reachable as a task option."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(6):
        (docs / f"{i}.py").write_text(CORPUS.replace("Point", f"P{i}") * 3)
    run_dir = tmp_path / "run"
    llama = ["-o", "position=rope", "-o", "norm=rms", "-o", "mlp=swiglu", "-o", "n_kv_heads=1", "-o", "bias=false",
             "-o", "activation=silu", "-o", "rope_theta=500000"]
    result = invoke("train", "lm", "-o", f"data={docs}", *TINY, "-o", "n_heads=4", *llama, "--run-dir", str(run_dir))
    assert result.exit_code == 0, result.output
    model = load_lm(run_dir).model
    block = model.encoder.blocks[0]
    assert model.embedder.position is None and model.encoder.rotary.theta == 500000
    assert isinstance(block.norm1, torch.nn.RMSNorm) and isinstance(block.mlp, GatedFeedForward)
    assert block.attn.n_kv_heads == 1 and block.attn.qkv.out_features == 16 + 2 * 4
    assert not any(name.endswith("bias") for name, _ in model.named_parameters())
    cached = invoke("generate", str(run_dir), "-p", "def", "-n", "8", "-t", "0")
    uncached = invoke("generate", str(run_dir), "-p", "def", "-n", "8", "-t", "0", "--no-cache")
    assert cached.exit_code == 0 and cached.output == uncached.output
