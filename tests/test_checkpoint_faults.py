"""Damaged, foreign and unwritable checkpoints: each is a one-line error naming the file, and
nothing that was saved before is lost (docs/reliability.md, "Checkpoints and runs")."""

import errno
import json
import shutil

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from tokformer.cli import main
from tokformer.engine import evaluate, load_run, train
from tokformer.errors import CheckpointError
from tokformer.store import checkpoints, sharded, steps, training_state, weights
from tokformer.store.steps import list_checkpoints, step_dir

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = dict(seq_len=6, train_size=256, eval_size=64, d_model=32, n_heads=2, n_layers=1, batch_size=16,
            warmup_steps=3, log_every=2, eval_every=4, keep_last=5, device="cpu", deterministic=True)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A 12-step sort run with checkpoints at steps 4, 8 and 12, on one thread like the tests that
    resume it (a module fixture is set up before the per-test ``one_thread``; thread counts change
    the floating-point summation order, and the resume tests compare bitwise)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train("sort", quiet=True, steps=12, run_dir=str(tmp_path_factory.mktemp("runs") / "run"),
                     **TINY).run_dir
    finally:
        torch.set_num_threads(threads)


def copy_run(run, tmp_path, name="copy"):
    return shutil.copytree(run, tmp_path / name)


def weights_of(run, step):
    return load_file(step_dir(run, step) / "model.safetensors")


def truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def garbage(path):
    path.write_bytes(b"\xff" * 8 + b"not a safetensors file at all")


def bad_header(path):
    data = path.read_bytes()
    path.write_bytes(data[:8] + b"{oops" + data[13:])


DAMAGE = {"truncated": truncate, "garbage": garbage, "bad header": bad_header}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_weights_are_a_one_line_error_naming_the_file(finished, tmp_path, damage):
    run = copy_run(finished, tmp_path)
    target = step_dir(run, 12) / "model.safetensors"
    DAMAGE[damage](target)
    result = CliRunner().invoke(main, ["evaluate", str(run), "--checkpoint", "12", "--quiet"])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    assert f"checkpoint file {target} is damaged" in result.output


def test_damaged_training_state_is_named_too(finished, tmp_path):
    run = copy_run(finished, tmp_path)
    (step_dir(run, 12) / "state.json").write_text("{\"step\": 12, ")
    with pytest.raises(CheckpointError, match="step-00000012 is damaged"):
        training_state.load_training_state(step_dir(run, 12))


def test_resume_skips_a_damaged_latest_checkpoint_and_stays_exact(finished, tmp_path, caplog):
    run = copy_run(finished, tmp_path)
    truncate(step_dir(run, 12) / "model.safetensors")
    (step_dir(run, 8) / "state.json").write_text("not json")  # the one before is damaged too
    assert train(resume=run, quiet=True).step == 12
    assert "resuming from the checkpoint before it" in caplog.text
    for key, value in weights_of(finished, 12).items():  # redone from step 4, bitwise
        assert torch.equal(weights_of(run, 12)[key], value), key


def test_resume_with_every_checkpoint_damaged_is_an_error(finished, tmp_path):
    run = copy_run(finished, tmp_path)
    for step in list_checkpoints(run):
        garbage(step_dir(run, step) / "model.safetensors")
    result = CliRunner().invoke(main, ["train", "--resume", str(run), "--quiet"])
    *warnings, error = result.output.strip().splitlines()
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert len(warnings) == 2 and all("resuming from the checkpoint before it" in w for w in warnings)
    assert error.startswith("Error: checkpoint file") and "step-00000004/model.safetensors is damaged" in error


def test_checkpoint_of_another_model_is_refused_naming_the_mismatch(finished, tmp_path):
    other = train("sort", quiet=True, steps=4, run_dir=str(tmp_path / "wide"), **{**TINY, "d_model": 48}).run_dir
    run = copy_run(finished, tmp_path)
    shutil.rmtree(step_dir(run, 12))
    shutil.copytree(step_dir(other, 4), step_dir(run, 12))  # a foreign checkpoint dropped into the run
    with pytest.raises(CheckpointError, match=r"does not fit the model .*shape: .*\(48,\) vs \(32,\)"):
        load_run(run, checkpoint="12")
    assert evaluate(run, checkpoint="8", quiet=True).metrics["accuracy"] >= 0  # the run's own checkpoints still load


def test_checkpoint_with_a_mismatched_tokenizer_is_refused(finished, tmp_path):
    run = copy_run(finished, tmp_path)
    vocab_file = run / "tokenizer" / "vocab.json"
    vocab = json.loads(vocab_file.read_text())  # {token: id}
    vocab_file.write_text(json.dumps({**vocab, "a": len(vocab), "b": len(vocab) + 1}))  # a tokenizer of another run
    result = CliRunner().invoke(main, ["evaluate", str(run), "--quiet"])
    assert result.exit_code == 1, result.output
    assert "was trained with another tokenizer" in result.output and len(result.output.splitlines()) == 1
    with pytest.raises(CheckpointError, match="another tokenizer"):
        train(resume=run, quiet=True, steps=14)


@pytest.mark.parametrize(("strategy", "writes_before"), [("ddp", 4), ("fsdp", 2)])
def test_full_disk_during_a_checkpoint_write_keeps_the_previous_one(tmp_path, monkeypatch, strategy, writes_before):
    """The third save (step 12) runs out of space half-way through its weights: ``model.safetensors``
    (ddp: two files per checkpoint) or the process's shard (fsdp: one file per checkpoint)."""
    # the modules that write safetensors files: whole checkpoints write the weights and the training state
    modules = (weights, training_state) if strategy == "ddp" else (sharded,)
    real_saves, calls = {module: module.save_file for module in modules}, []

    def save_until_the_disk_fills(tensors, path, metadata=None):
        calls.append(path)
        if len(calls) == writes_before + 1:
            path.write_bytes(b"\0" * 100)
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real_saves[modules[0]](tensors, path, metadata=metadata)

    for module in modules:
        monkeypatch.setattr(module, "save_file", save_until_the_disk_fills)
    run = tmp_path / "run"
    with pytest.raises(CheckpointError, match="checkpoint of step 12 .*No space left on device.*intact"):
        train("sort", quiet=True, steps=12, run_dir=str(run), strategy=strategy, **TINY)
    assert list_checkpoints(run) == [4, 8]
    assert not list((run / steps.CHECKPOINTS).glob(".tmp-*")), "the partial write is cleaned up"
    _, model = load_run(run, checkpoint="latest")  # the previous checkpoint loads
    assert all(torch.isfinite(p).all() for p in model.parameters())

    for module, real_save in real_saves.items():  # space freed: resume finishes the run
        monkeypatch.setattr(module, "save_file", real_save)
    assert train(resume=run, quiet=True).step == 12


@pytest.mark.parametrize(("command", "message"), [
    (["translate", "{run}", "eins"], "is a 'SortTask' model, not a translate model"),
    (["generate", "{run}", "--prompt", "hi"], "is a run of task 'sort', not of 'lm'"),
    (["predict", "{run}", "image.png"], "'image.png': the model sorts 1 to"),  # sort reads digits, not images
])
def test_a_run_of_another_task_is_refused_by_each_command(finished, command, message):
    result = CliRunner().invoke(main, [part.format(run=finished) for part in command])
    assert result.exit_code == 2 and message in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1


# Sharded checkpoints (--strategy fsdp): a missing shard, a shard of another step, no manifest, a full disk.
# One process writes one shard; the checks are per shard, the same for any number (two processes, and
# resuming on another number of them: test_engine_fsdp.py).


@pytest.fixture(scope="module")
def sharded_run(tmp_path_factory):
    """``finished`` again with --strategy fsdp: checkpoints 4, 8 and 12, each a manifest and a shard."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train("sort", quiet=True, steps=12, run_dir=str(tmp_path_factory.mktemp("runs") / "sharded"),
                     strategy="fsdp", **TINY).run_dir
    finally:
        torch.set_num_threads(threads)


SHARD = "shard-00000-of-00001.safetensors"


def test_a_missing_shard_is_a_one_line_error_and_resume_falls_back_to_the_checkpoint_before(sharded_run, tmp_path,
                                                                                           caplog):
    run = copy_run(sharded_run, tmp_path)
    (step_dir(run, 12) / SHARD).unlink()
    result = CliRunner().invoke(main, ["evaluate", str(run), "--checkpoint", "12", "--quiet"])
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1, result.output
    assert f"checkpoint {step_dir(run, 12)} is incomplete: shard {SHARD} is missing" in result.output
    assert train(resume=run, quiet=True).step == 12
    assert "is missing" in caplog.text and "resuming from the checkpoint before it" in caplog.text
    resumed, straight = (checkpoints.load_model_state(step_dir(r, 12)) for r in (run, sharded_run))
    assert all(torch.equal(resumed[k], straight[k]) for k in straight), "redone from step 8, bitwise"


def test_a_shard_from_another_step_is_refused_naming_it(sharded_run, tmp_path):
    run = copy_run(sharded_run, tmp_path)
    shutil.copy(step_dir(run, 8) / SHARD, step_dir(run, 12) / SHARD)
    expected = rf"{SHARD} is a shard of step 8 \(1 process\), not of step 12 \(1 process\): copied"
    with pytest.raises(CheckpointError, match=expected):
        load_run(run, checkpoint="12")
    assert train(resume=run, quiet=True).step == 12  # resume skips it, as any damaged checkpoint


def test_a_sharded_checkpoint_without_its_manifest_is_incomplete(sharded_run, tmp_path):
    run = copy_run(sharded_run, tmp_path)
    (step_dir(run, 12) / "manifest.json").unlink()
    with pytest.raises(CheckpointError, match=r"step-00000012 is incomplete: no manifest.json \(it is written last"):
        load_run(run, checkpoint="latest")


