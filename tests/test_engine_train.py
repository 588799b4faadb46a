"""The training loop through the library API, in process: run directory, features, failures."""

import functools
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch.utils.data import Dataset

import tokformer
from tokformer.engine import StepOutput, Task, evaluate, load_run, register_task, train
from tokformer.engine.metrics import METRICS_FILE, MetricLog
from tokformer.errors import ConfigError, DataError, TrainingError
from tokformer.store.steps import list_checkpoints, step_dir
from tokformer.tasks.sort import SortConfig, SortTask

pytestmark = pytest.mark.usefixtures("one_thread")


TINY = dict(seq_len=6, train_size=256, eval_size=64, d_model=32, n_heads=2, n_layers=1, batch_size=16,
            warmup_steps=3, log_every=2, device="cpu")


def weights(run_dir, step):
    return load_file(step_dir(run_dir, step) / "model.safetensors")


def assert_same_weights(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_library_api_is_exported():
    assert tokformer.train is train and tokformer.evaluate is evaluate


def test_run_directory_layout(tmp_path):
    run = tmp_path / "run"
    result = train("sort", quiet=True, steps=12, eval_every=4, keep_last=1, run_dir=str(run), **TINY)
    assert result.step == 12 and not result.interrupted
    saved = json.loads((run / "config.json").read_text())
    assert saved["task"] == {"name": "sort", **vars(SortConfig(seq_len=6, train_size=256, eval_size=64, d_model=32,
                                                              n_heads=2, n_layers=1))}
    assert saved["train"]["steps"] == 12 and saved["train"]["run_dir"] == str(run)
    assert (run / "tokenizer" / "vocab.json").exists()
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["split"] == "eval"] == [4, 8, 12]
    assert {"loss", "accuracy", "lr", "grad_norm", "samples_per_s"} <= set(records[0])
    assert {p.name for p in (run / "plots").iterdir()} >= {"loss.png", "accuracy.png"}
    best = json.loads((run / "best.json").read_text())
    assert set(list_checkpoints(run)) == {12, best["step"]}  # keep_last=1, plus the best
    assert result.best == best


def test_existing_run_dir_of_another_config_is_refused_unless_overwrite(tmp_path):
    run = tmp_path / "run"
    train("sort", quiet=True, steps=2, run_dir=str(run), **TINY)
    with pytest.raises(ConfigError, match=r"already exists with another config: train\.steps=3 \(the run has 2\); "
                                          r"rerun its command .*--overwrite"):
        train("sort", quiet=True, steps=3, run_dir=str(run), **TINY)
    assert train("sort", quiet=True, overwrite=True, steps=3, run_dir=str(run), **TINY).step == 3


def test_a_run_refused_for_bad_data_leaves_no_run_directory(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(DataError, match="fewer than one batch"):
        train("sort", quiet=True, steps=2, run_dir=str(run), **{**TINY, "train_size": 4})
    assert not run.exists()
    assert train("sort", quiet=True, steps=2, run_dir=str(run), **TINY).step == 2  # no --overwrite needed


def test_a_full_disk_while_a_resumed_run_cuts_back_its_metrics_keeps_them_all(tmp_path, fill_disk):
    """A resumed run forgets the records past its checkpoint by rewriting metrics.jsonl: that rewrite
    failing half-way must not cost the run the records before."""
    log = MetricLog(tmp_path)
    for step in (1, 2, 3):
        log.write("train", step, {"loss": 1.0 / step})
    before = (tmp_path / METRICS_FILE).read_bytes()
    fill_disk()
    with pytest.raises(OSError, match="No space left"):
        log.truncate_after(2)
    assert (tmp_path / METRICS_FILE).read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [METRICS_FILE], "no temporary file is left"


def test_a_failed_run_leaves_the_empty_folder_the_user_made_for_it(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir(mode=0o750)
    with pytest.raises(DataError, match="fewer than one batch"):
        train("sort", quiet=True, steps=2, run_dir=str(run), **{**TINY, "train_size": 4})
    assert run.is_dir() and not any(run.iterdir()), "the user's folder is kept, as empty as it was"
    assert run.stat().st_mode & 0o777 == 0o750  # the same folder, not a new one
    monkeypatch.chdir(tmp_path)  # the default run directory is made by tokformer, so a failure removes it
    with pytest.raises(DataError, match="fewer than one batch"):
        train("sort", quiet=True, steps=2, **{**TINY, "train_size": 4})
    assert not any((tmp_path / "runs").iterdir())


# dropout draws from torch's RNG every step: exactness needs the RNG state restored too
CUT_RUN = dict(quiet=True, steps=12, eval_every=4, keep_last=5, deterministic=True, dropout=0.1, **TINY)


def cut_after_step_4(tmp_path: Path) -> tuple[Path, Path]:
    """A finished 12-step run and a copy of it as if it had died right after step 4's checkpoint."""
    full = train("sort", run_dir=str(tmp_path / "full"), **CUT_RUN).run_dir
    cut = tmp_path / "cut"
    shutil.copytree(full, cut)
    for step in (8, 12):
        shutil.rmtree(step_dir(cut, step))
    return full, cut


def test_resume_after_losing_later_checkpoints_is_bitwise_exact(tmp_path):
    full, cut = cut_after_step_4(tmp_path)
    result = train(resume=cut, quiet=True)
    assert result.step == 12
    assert_same_weights(weights(full, 12), weights(cut, 12))
    records = [json.loads(line) for line in (cut / "metrics.jsonl").read_text().splitlines()]
    keys = [(r["split"], r["step"]) for r in records]
    assert len(keys) == len(set(keys)), "steps redone after resume are logged once"


def test_resume_with_gradient_accumulation_continues_the_data_stream_exactly(tmp_path, monkeypatch):
    """With grad_accum=2 each step eats 2 micro-batches: a run resumed after step 2 must go on at micro-batch 4."""
    monkeypatch.setattr("tokformer.engine.trainer.plot_metrics", lambda run_dir: None)  # most of the time, not needed
    run = {**CUT_RUN, "steps": 4, "eval_every": 2, "eval_size": 16, "d_model": 16, "grad_accum": 2}
    full = train("sort", run_dir=str(tmp_path / "full"), **run).run_dir
    cut = tmp_path / "cut"
    shutil.copytree(full, cut)
    shutil.rmtree(step_dir(cut, 4))  # as if it had died right after step 2's checkpoint
    assert train(resume=cut, quiet=True).step == 4
    a, b = weights(full, 4), weights(cut, 4)
    differ = [k for k in a if not torch.equal(a[k], b[k])]
    assert not differ, (f"resumed grad_accum=2 run ends with other weights than the uninterrupted one ({differ}): "
                        "the data stream did not continue where step 2 left it")


def test_rerunning_the_command_of_a_run_with_checkpoints_resumes_it_exactly(tmp_path):
    full, cut = cut_after_step_4(tmp_path)  # as if the job had been preempted after step 4's checkpoint
    config = json.loads((cut / "config.json").read_text())
    config["train"]["run_dir"] = str(cut)
    (cut / "config.json").write_text(json.dumps(config))
    result = train("sort", run_dir=str(cut), **CUT_RUN)  # the same command, no --resume: a scheduler's requeue
    assert result.step == 12
    assert_same_weights(weights(full, 12), weights(cut, 12))


def test_rerunning_a_run_made_before_newer_options_existed_resumes_it(tmp_path):
    """Its config.json lacks options added since (here strategy, activation_checkpointing): they
    count at their defaults, so the requeued command continues it instead of refusing it."""
    run = train("sort", quiet=True, steps=4, eval_every=2, run_dir=str(tmp_path / "r"), **TINY).run_dir
    config = json.loads((run / "config.json").read_text())
    for key in ("strategy", "activation_checkpointing"):
        del config["train"][key]
    (run / "config.json").write_text(json.dumps(config))
    shutil.rmtree(step_dir(run, 4))
    assert train("sort", quiet=True, steps=4, eval_every=2, run_dir=str(run), **TINY).step == 4
    assert list_checkpoints(run) == [2, 4]


def test_rerunning_with_another_config_is_refused_naming_the_keys(tmp_path):
    run = train("sort", quiet=True, steps=2, run_dir=str(tmp_path / "r"), **TINY).run_dir
    with pytest.raises(ConfigError, match=r"^run directory \S+ already exists with another config: task\.d_model=16 "
                                          r"\(the run has 32\); train\.lr=0\.002 \(the run has 0\.001\); rerun"):
        train("sort", quiet=True, steps=2, run_dir=str(run), **{**TINY, "d_model": 16, "lr": 0.002})


def test_a_run_that_died_before_its_first_checkpoint_starts_again_in_its_directory(tmp_path):
    run = train("sort", quiet=True, steps=2, run_dir=str(tmp_path / "r"), **TINY).run_dir
    shutil.rmtree(run / "checkpoints")
    (run / "best.json").unlink()
    result = train("sort", quiet=True, steps=2, run_dir=str(run), **TINY)
    assert result.step == 2 and list_checkpoints(run) == [2]


def test_a_folder_with_a_runs_config_and_files_of_its_own_is_refused_not_emptied(tmp_path):
    """Found by a hostile probe: `cp run/config.json myexp/ && tokformer train -c myexp/config.json --run-dir
    myexp` deleted the user's notes and data there, because a same-config folder without a checkpoint was
    taken for a run that died early and started again from empty."""
    run = train("sort", quiet=True, steps=2, run_dir=str(tmp_path / "r"), **TINY).run_dir
    mine = tmp_path / "myexp"
    (mine / "data").mkdir(parents=True)
    (mine / "notes.txt").write_text("precious")
    (mine / "data" / "x.csv").write_text("1,2")
    config = json.loads((run / "config.json").read_text())
    config["train"]["run_dir"] = str(mine)
    (mine / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=r"holds this run's config\.json but no checkpoint, and data/, notes\.txt, "
                                          r"which tokformer did not write"):
        train("sort", quiet=True, steps=2, run_dir=str(mine), **TINY)
    assert sorted(p.name for p in mine.iterdir()) == ["config.json", "data", "notes.txt"]
    assert (mine / "notes.txt").read_text() == "precious" and (mine / "data" / "x.csv").exists()


def test_resume_refuses_to_change_the_task_and_leaves_the_run_as_it_was(tmp_path):
    run = train("sort", quiet=True, steps=4, eval_every=4, run_dir=str(tmp_path / "r"), **TINY).run_dir
    before = (run / "config.json").read_text()
    with pytest.raises(ConfigError, match=r"cannot change d_model=64 \(the run has 32\)"):
        train(resume=run, quiet=True, d_model=64)
    assert (run / "config.json").read_text() == before


def test_resume_can_extend_training(tmp_path):
    run = train("sort", quiet=True, steps=4, eval_every=4, run_dir=str(tmp_path / "r"), **TINY).run_dir
    assert train(resume=run, quiet=True, steps=6).step == 6
    assert json.loads((run / "config.json").read_text())["train"]["steps"] == 6


def test_grad_accumulation_matches_the_full_batch(tmp_path):
    one = train("sort", quiet=True, steps=3, run_dir=str(tmp_path / "a"), **TINY).run_dir
    acc = train("sort", quiet=True, steps=3, grad_accum=4, run_dir=str(tmp_path / "b"), **TINY).run_dir
    a, b = weights(one, 3), weights(acc, 3)
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-5, rtol=1e-4)


def test_batch_must_split_over_accumulation(tmp_path):
    with pytest.raises(ConfigError, match="divisible"):
        train("sort", quiet=True, steps=1, grad_accum=3, run_dir=str(tmp_path / "r"), **TINY)


def test_bf16_autocast_runs_on_cpu(tmp_path):
    bf16 = train("sort", quiet=True, steps=2, precision="bf16", run_dir=str(tmp_path / "bf16"), **TINY).metrics
    fp32 = train("sort", quiet=True, steps=2, precision="fp32", run_dir=str(tmp_path / "fp32"), **TINY).metrics
    # autocast really ran (bf16 keeps 8 mantissa bits, so the numbers change) and trained the same model
    assert bf16["loss"] != fp32["loss"]
    assert bf16["loss"] == pytest.approx(fp32["loss"], rel=0.02)


@pytest.mark.slow
def test_compiled_model_saves_plain_keys(tmp_path, monkeypatch):
    # The `_orig_mod.` prefix comes from compile's wrapper module whatever the backend; the
    # eager backend skips inductor's C++ build, which takes minutes on a small CPU.
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    result = train("sort", quiet=True, steps=1, compile=True, run_dir=str(tmp_path / "r"),
                   **{**TINY, "eval_size": 16})
    keys = weights(result.run_dir, 1).keys()
    plain = SortTask(SortConfig(seq_len=6, d_model=32, n_heads=2, n_layers=1)).build_model().state_dict()
    assert set(keys) == set(plain)
    assert not any("_orig_mod" in k or k.startswith("module.") for k in keys)


def test_evaluate_and_load_run(tmp_path):
    result = train("sort", quiet=True, steps=6, eval_every=3, run_dir=str(tmp_path / "r"), **TINY)
    latest = evaluate(result.run_dir, checkpoint="latest", device="cpu", quiet=True)
    assert latest.metrics == pytest.approx(result.metrics)
    task, model = load_run(result.run_dir, "latest")
    assert not model.training
    assert len(task.predict(model, [[3, 1, 2, 0, 5, 4]])[0]) == 6


class Exploding(Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor([float(i)])


@dataclass
class ExplodingConfig:
    good_steps: int = 3


@register_task("test-explode")
class ExplodingTask(Task):
    """Loss turns NaN after ``good_steps`` optimizer steps."""

    Config = ExplodingConfig

    def build_model(self) -> torch.nn.Module:
        model = torch.nn.Linear(1, 1)
        model.register_buffer("calls", torch.zeros(()))
        return model

    def train_dataset(self) -> Dataset:
        return Exploding()

    def collate(self, samples, train):
        return torch.stack(samples)

    def step(self, model, batch) -> StepOutput:
        model.calls += 1
        loss = model(batch).pow(2).mean()
        if model.calls > self.config.good_steps:
            loss = loss * float("nan")
        return StepOutput(loss=loss, count=len(batch))


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path):
    run = tmp_path / "r"
    with pytest.raises(TrainingError, match="loss became nan at step 4.*last good checkpoint is step 2"):
        train("test-explode", quiet=True, steps=10, eval_every=2, batch_size=8, device="cpu", run_dir=str(run))
    assert list_checkpoints(run) == [2]
    assert all(torch.isfinite(t).all() for t in weights(run, 2).values())
