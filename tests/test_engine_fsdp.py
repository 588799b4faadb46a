"""`--strategy fsdp` (FSDP2, tokformer.engine.fsdp) and `--activation-checkpointing` (tokformer.engine.recompute).

The units and the policy are checked in this process, in a one-process gloo group; training
is compared with DDP under torchrun with 2 CPU processes (gloo), as tests/test_engine_distributed.py
does for DDP itself, and the sharded checkpoints of those runs resume exactly, on 2 processes, on 1,
and from 1 on 2. The checkpoint format alone is in test_engine_sharded_checkpoint.py.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from tiny import torchrun_cli, torchrun_sort
from torch.distributed.fsdp import FSDPModule

from tokformer.batch import TokenBatch
from tokformer.config import TransformerConfig
from tokformer.embedding import Embedder
from tokformer.engine import fsdp, load_run, train
from tokformer.engine.progress import LOGGER
from tokformer.engine.recompute import checkpoint_activations, transformer_blocks
from tokformer.errors import CheckpointError, ConfigError
from tokformer.runtime.distributed import Dist
from tokformer.seq2seq import Seq2Seq
from tokformer.store import checkpoints, steps, weights
from tokformer.tasks.sort import SortConfig, SortModel

pytestmark = pytest.mark.usefixtures("one_thread")

TASK = dict(seq_len=6, train_size=256, eval_size=30, d_model=16, n_heads=2, n_layers=2)
ENGINE = dict(batch_size=16, grad_accum=2, warmup_steps=2, log_every=1, eval_every=10, device="cpu")
STEPS = 20


def torchrun(run: Path, *extra: str, steps: int = STEPS) -> subprocess.CompletedProcess:
    """`tokformer train sort` with 2 CPU processes (gloo), deterministic, one thread each."""
    return torchrun_sort(run, TASK, ENGINE, "--deterministic", *extra, steps=steps)


def train_losses(run: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if r["split"] == "train"}


@pytest.fixture
def one_process_group() -> Dist:
    """A gloo process group of this process alone: enough for fully_shard to build its mesh."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield Dist(0, 1, 0, torch.device("cpu"))
    finally:
        dist.destroy_process_group()


def seq2seq() -> Seq2Seq:
    """An encoder-decoder with its output layer tied to the target embedding (like translate's)."""
    cfg = TransformerConfig(d_model=16, n_heads=2, n_layers=2, d_ff=32)
    return Seq2Seq(Embedder(16, vocab_size=20), Embedder(16, vocab_size=20), cfg, cfg, 20)


def ids(batch: int, length: int) -> TokenBatch:
    tokens = torch.randint(0, 10, (batch, length))
    return TokenBatch(ids=tokens, mask=torch.ones_like(tokens, dtype=torch.bool),
                      positions=torch.arange(length).expand_as(tokens))


def test_each_transformer_block_and_then_the_root_is_an_fsdp_unit(one_process_group):
    model = seq2seq()
    names = list(model.state_dict())
    assert fsdp.shard_model(model, one_process_group, "fp32") == 5  # 2 encoder + 2 decoder blocks + the root
    units = [name for name, module in model.named_modules() if isinstance(module, FSDPModule)]
    assert units == ["", "encoder.blocks.0", "encoder.blocks.1", "decoder.blocks.0", "decoder.blocks.1"]
    assert list(model.state_dict()) == names, "parameter names, hence checkpoints, are the model's own"
    assert model.head.weight is model.tgt_embedder.tokens.weight, "tied weights stay one parameter"
    with warnings.catch_warnings(record=True) as caught:
        loss = model(ids(3, 5), ids(3, 4)).float().pow(2).mean()
    assert not [w for w in caught if "returned a view tensor" in str(w.message)], "the root's logits are no concern"
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_precision_sets_the_fsdp_mixed_precision_policy():
    assert fsdp.mixed_precision("fp32").param_dtype is None, "fp32 weights and communication by default"
    bf16 = fsdp.mixed_precision("bf16")
    assert (bf16.param_dtype, bf16.reduce_dtype) == (torch.bfloat16, torch.float32)


def test_a_sharded_model_is_refused_by_save_pretrained_with_one_line(one_process_group, tmp_path):
    model = SortModel(SortConfig(**{k: TASK[k] for k in ("seq_len", "d_model", "n_heads", "n_layers")}))
    fsdp.shard_model(model, one_process_group, "fp32")
    with pytest.raises(ConfigError, match="sharded over processes .*tokformer export RUN_DIR"):
        weights.save_model_state(model.state_dict(), tmp_path)


def test_checkpointed_blocks_recompute_in_backward_and_keep_their_names():
    model = SortModel(SortConfig(seq_len=6, d_model=16, n_heads=2, n_layers=2))
    names = list(model.state_dict())
    calls = []
    for block in transformer_blocks(model):
        block.mlp.register_forward_pre_hook(lambda *_: calls.append(1))  # recomputing stops once it has all it needs
    model(ids(2, 6)).sum().backward()
    assert len(calls) == 2, "one MLP forward per block"
    calls.clear()
    assert checkpoint_activations(model) == 2
    model(ids(2, 6)).sum().backward()
    assert len(calls) == 4, "backward ran each block's forward again"
    assert list(model.state_dict()) == names
    calls.clear()
    with torch.no_grad():
        model(ids(2, 6))
    assert len(calls) == 2, "nothing to recompute without gradients"


def test_activation_checkpointing_leaves_the_losses_unchanged(tmp_path):
    """With dropout, so the recomputation must replay the forward's random masks."""
    settings = dict(quiet=True, steps=6, deterministic=True, **{**TASK, "n_layers": 1}, **ENGINE, dropout=0.1)
    plain = train("sort", run_dir=str(tmp_path / "plain"), **settings)
    recomputed = train("sort", run_dir=str(tmp_path / "ac"), activation_checkpointing=True, **settings)
    assert len(train_losses(plain.run_dir)) == 6
    assert train_losses(recomputed.run_dir) == train_losses(plain.run_dir)
    one, two = (checkpoints.load_model_state(steps.step_dir(r.run_dir, 6)) for r in (plain, recomputed))
    assert all(torch.equal(one[k], two[k]) for k in one)


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("ddp") / "run"
    torchrun(run)
    return run


@pytest.fixture(scope="module")
def fsdp_run(tmp_path_factory) -> Path:
    """20 steps with 2 processes under --strategy fsdp; checkpoints at steps 10 and 20."""
    run = tmp_path_factory.mktemp("fsdp") / "run"
    done = torchrun(run, "--strategy", "fsdp")
    assert done.stdout.count(f"done: {STEPS} steps") == 1, "only rank 0 reports"
    return run


@pytest.mark.slow  # two torchrun jobs, ~15 s each on 2 loaded CPU cores
@pytest.mark.skipif(not dist.is_gloo_available(), reason="needs the gloo backend")
def test_fsdp_losses_match_ddp_for_20_steps(ddp_run, fsdp_run):
    ddp, sharded = train_losses(ddp_run), train_losses(fsdp_run)
    assert sorted(sharded) == list(range(1, STEPS + 1))
    for step, loss in ddp.items():
        assert abs(sharded[step] - loss) <= 1e-5, step
    one, two = (checkpoints.load_model_state(steps.step_dir(r, STEPS)) for r in (ddp_run, fsdp_run))
    for key in one:
        torch.testing.assert_close(two[key], one[key], atol=1e-5, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.skipif(not dist.is_gloo_available(), reason="needs the gloo backend")
def test_fsdp_with_activation_checkpointing_matches_ddp(ddp_run, tmp_path):
    run = tmp_path / "ac"
    torchrun(run, "--strategy", "fsdp", "--activation-checkpointing")
    ddp, recomputed = train_losses(ddp_run), train_losses(run)
    assert len(recomputed) == STEPS
    for step, loss in ddp.items():
        assert abs(recomputed[step] - loss) <= 1e-5, step


@pytest.mark.slow
@pytest.mark.skipif(not dist.is_gloo_available(), reason="needs the gloo backend")
@pytest.mark.slow  # a torchrun job of its own
def test_a_ddp_run_resumes_under_fsdp_with_the_same_losses(ddp_run, tmp_path):
    """Two processes: DDP's whole checkpoint at step 10 becomes sharded weights and AdamW state."""
    run = shutil.copytree(ddp_run, tmp_path / "run")
    shutil.rmtree(steps.step_dir(run, STEPS))
    torchrun_cli("train", "--resume", str(run), "--strategy", "fsdp", "--quiet")  # a changed option: --resume
    resumed, straight = train_losses(run), train_losses(ddp_run)
    assert resumed.keys() == straight.keys()
    assert all(abs(resumed[k] - straight[k]) <= 1e-5 for k in straight), "losses after a DDP -> FSDP resume"


def test_fsdp_resume_under_torchrun_is_bitwise_exact(fsdp_run, tmp_path):
    run = shutil.copytree(fsdp_run, tmp_path / "run")
    shutil.rmtree(steps.step_dir(run, STEPS))  # killed after step 10's checkpoint: rerun the command
    torchrun(run, "--strategy", "fsdp")
    assert train_losses(run) == train_losses(fsdp_run), "losses after the resume, bit for bit"
    resumed, straight = (checkpoints.load_model_state(steps.step_dir(r, STEPS)) for r in (run, fsdp_run))
    assert resumed.keys() == straight.keys() and all(torch.equal(resumed[k], straight[k]) for k in resumed)


@pytest.mark.slow
@pytest.mark.skipif(not dist.is_gloo_available(), reason="needs the gloo backend")
def test_a_checkpoint_of_two_processes_resumes_on_one(fsdp_run, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    run = shutil.copytree(fsdp_run, tmp_path / "run")
    shutil.rmtree(steps.step_dir(run, STEPS))
    assert train(resume=run, quiet=True).step == STEPS
    assert "RNG states of 2 processes, this run has 1" in caplog.text
    resumed, straight = (checkpoints.load_model_state(steps.step_dir(r, STEPS)) for r in (run, fsdp_run))
    for key in straight:  # the same global batches (sort has no dropout): equal up to summation order
        torch.testing.assert_close(resumed[key], straight[key], atol=1e-6, rtol=1e-5)
    assert sorted(p.name for p in steps.step_dir(run, STEPS).glob("shard-*")) == ["shard-00000-of-00001.safetensors"]


@pytest.mark.slow
@pytest.mark.skipif(not dist.is_gloo_available(), reason="needs the gloo backend")
def test_a_checkpoint_of_one_process_resumes_on_two(fsdp_run, tmp_path):
    run = tmp_path / "run"
    train("sort", quiet=True, steps=STEPS, run_dir=str(run), strategy="fsdp", deterministic=True, **TASK, **ENGINE)
    shutil.rmtree(steps.step_dir(run, STEPS))  # stopped after step 10's checkpoint
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "tokformer.cli", "train", "--resume", str(run), "--quiet"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(list(steps.step_dir(run, STEPS).glob("shard-*"))) == 2
    straight_losses = train_losses(fsdp_run)
    assert train_losses(run) == pytest.approx(straight_losses, abs=1e-6), "1 process, then 2, as 2 all along"
    resumed, straight = (checkpoints.load_model_state(steps.step_dir(r, STEPS)) for r in (run, fsdp_run))
    for key in straight:  # one process sums gradients in another order than two; AdamW divides each update by
        # its gradient's running norm, so a weight whose gradient is near zero carries that rounding further (1.6e-6
        # measured on an AMD EPYC, 1.5e-7 on the machine before): equal to 1e-5, the losses above to 1e-6
        torch.testing.assert_close(resumed[key], straight[key], atol=1e-5, rtol=1e-5)


@pytest.mark.slow  # the fixture's torchrun job; the test itself runs in this process
def test_a_missing_shard_of_two_names_it_and_resume_falls_back(fsdp_run, tmp_path, caplog):
    run = shutil.copytree(fsdp_run, tmp_path / "run")
    (steps.step_dir(run, STEPS) / "shard-00001-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match="incomplete: shard shard-00001-of-00002.safetensors is missing "
                                              r"\(2 processes wrote it\)"):
        load_run(run, checkpoint="latest")
    assert train(resume=run, quiet=True).step == STEPS
    assert "resuming from the checkpoint before it" in caplog.text


def test_the_strategy_flags_are_documented_and_a_bad_value_is_one_line():
    from click.testing import CliRunner

    from tokformer.cli import main

    shown = CliRunner().invoke(main, ["train", "sort", "--help"]).output
    assert "--strategy [ddp|fsdp]" in shown and "--activation-checkpointing / --no-activation-checkpointing" in shown
    result = CliRunner().invoke(main, ["train", "sort", "--strategy", "zero", "--steps", "1"])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert "train.strategy: expected one of ddp, fsdp, got 'zero'" in result.output


def test_a_sharded_checkpoint_stores_buffers_that_are_views_of_one_memory(one_process_group, tmp_path):
    """Buffers stay whole under FSDP; two that are views of one memory (a table and one of its rows) were
    handed to safetensors as they were, which refuses shared memory, and the checkpoint failed."""
    from tokformer.store import sharded

    model = SortModel(SortConfig(**{k: TASK[k] for k in ("seq_len", "d_model", "n_heads", "n_layers")}))
    table = torch.randn(4, 3)
    model.register_buffer("table", table)
    model.register_buffer("table_row", table[1])
    fsdp.shard_model(model, one_process_group, "fp32")
    optimizer = torch.optim.AdamW(model.parameters())
    sharded.save_checkpoint(tmp_path, 1, model, optimizer, {"step": 1}, one_process_group)
    state = sharded.load_model_state(steps.step_dir(tmp_path, 1))
    assert torch.equal(state["table"], table) and torch.equal(state["table_row"], table[1])
