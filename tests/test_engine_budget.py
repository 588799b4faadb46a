"""Budgets that fit the data: --epochs, the overfitting warning, early stopping (and its resume)."""

import json
import logging
import shutil
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn

from tokformer.engine import StepOutput, Task, register_task, train
from tokformer.engine.progress import LOGGER
from tokformer.engine.watch import Watch
from tokformer.errors import ConfigError
from tokformer.store.steps import list_checkpoints, step_dir
from tokformer.tasks.classify import ClassifyConfig, ClassifyTask
from tokformer.tasks.graph import GraphConfig, GraphTask
from tokformer.tasks.lm import LMConfig, LMTask
from tokformer.tasks.sort import SortConfig, SortTask
from tokformer.tasks.translate import TranslateConfig, TranslateTask

pytestmark = pytest.mark.usefixtures("one_thread")


@dataclass
class NoiseConfig:
    samples: int = 64
    dim: int = 16
    hidden: int = 256
    user: bool = False


@register_task("test-noise")
class NoiseTask(Task):
    """Random labels: the model memorises its training set, and its held-out loss can only rise."""

    Config = NoiseConfig

    def _data(self, seed: int) -> list[tuple[torch.Tensor, int]]:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(self.config.samples, self.config.dim, generator=g)
        y = torch.randint(0, 2, (self.config.samples,), generator=g)
        return [(row, int(label)) for row, label in zip(x, y, strict=True)]

    def train_dataset(self):
        return self._data(0)

    def eval_dataset(self):
        return self._data(1)

    @property
    def user_data(self) -> bool:
        return self.config.user

    def collate(self, samples, train):
        return torch.stack([s[0] for s in samples]), torch.tensor([s[1] for s in samples])

    def build_model(self) -> nn.Module:
        c = self.config
        return nn.Sequential(nn.Linear(c.dim, c.hidden), nn.ReLU(), nn.Linear(c.hidden, 2))

    def step(self, model, batch) -> StepOutput:
        x, y = batch
        return StepOutput(loss=F.cross_entropy(model(x), y), count=len(y))


NOISE = dict(batch_size=16, lr=3e-2, warmup_steps=1, eval_every=2, log_every=2, device="cpu", deterministic=True,
             keep_last=100)


def eval_losses(run_dir) -> list[tuple[int, float]]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in records if r["split"] == "eval"]


# -- epochs ------------------------------------------------------------------------------------

SORT = dict(seq_len=6, train_size=64, eval_size=16, d_model=16, n_heads=2, n_layers=1, batch_size=16, warmup_steps=1,
            device="cpu")


@pytest.mark.parametrize(("epochs", "steps"), [(2, 8), (1.1, 5), (0.1, 1)])
def test_epochs_set_the_steps(tmp_path, epochs, steps):
    result = train("sort", quiet=True, epochs=epochs, run_dir=str(tmp_path / "r"), **SORT)  # 64 samples / 16
    assert result.step == steps == max(list_checkpoints(result.run_dir))


def test_steps_and_epochs_at_once_are_refused():
    with pytest.raises(ConfigError, match=r"^give --steps or --epochs, not both$"):
        train("sort", quiet=True, steps=3, epochs=1, **SORT)


def test_resume_keeps_the_epoch_budget_and_steps_replace_it(tmp_path):
    run = train("sort", quiet=True, epochs=1, run_dir=str(tmp_path / "r"), **SORT).run_dir
    assert train(resume=run, quiet=True).step == 4  # not the default 1000 steps
    assert train(resume=run, quiet=True, epochs=2).step == 8
    assert train(resume=run, quiet=True, steps=10).step == 10
    assert json.loads((run / "config.json").read_text())["train"]["epochs"] is None


# -- the overfitting warning and early stopping -----------------------------------------------


def test_watch_warns_once_after_three_rises_and_counts_stale_evaluations():
    watch = Watch(patience=2)
    losses = [1.0, 0.8, 0.9, 1.0, 1.1, 1.2, 0.7]
    messages = [watch.update(10 * (i + 1), loss, improved=loss < min(losses[:i], default=9))
                for i, loss in enumerate(losses)]
    assert messages[:4] == [None] * 4 and messages[5:] == [None, None]
    assert messages[4] == ("held-out loss has risen for 3 evaluations since step 20 (best 0.8 at step 20): "
                           "the model is overfitting; see --early-stop")
    assert watch.stale == 0 and watch.rises == 0 and not watch.should_stop
    watch.update(80, 0.9, improved=False)
    assert not watch.should_stop
    watch.update(90, 0.9, improved=False)
    assert watch.should_stop and Watch.restore(2, watch.state()) == watch


def test_overfitting_warning_names_the_rise(tmp_path, caplog):
    logger = logging.getLogger(LOGGER)
    logger.addHandler(caplog.handler)
    try:
        result = train("test-noise", quiet=True, steps=30, early_stop=0, run_dir=str(tmp_path / "r"), **NOISE)
    finally:
        logger.removeHandler(caplog.handler)
    assert result.step == 30 and not result.stopped_early
    losses = eval_losses(result.run_dir)
    # where the logged losses first rose three evaluations in a row
    i = next(i for i in range(3, len(losses)) if all(losses[j][1] > losses[j - 1][1] for j in range(i - 2, i + 1)))
    low_step, low = min(losses[: i + 1], key=lambda s: s[1])
    warnings = [r.getMessage() for r in caplog.records if r.getMessage().startswith("held-out loss has risen")]
    assert warnings[0] == (f"held-out loss has risen for 3 evaluations since step {losses[i - 3][0]} "
                           f"(best {low:.4g} at step {low_step}): the model is overfitting; see --early-stop")


def test_early_stop_stops_and_keeps_the_best_checkpoint(tmp_path):
    result = train("test-noise", quiet=True, steps=200, early_stop=2, run_dir=str(tmp_path / "r"), **NOISE)
    assert result.stopped_early
    assert result.step == result.best["step"] + 2 * NOISE["eval_every"] < 200
    losses = dict(eval_losses(result.run_dir))
    assert result.best["value"] == min(losses.values()) == losses[result.best["step"]]
    assert json.loads((result.run_dir / "best.json").read_text()) == result.best
    assert result.best["step"] in list_checkpoints(result.run_dir)
    assert result.report is not None and "best checkpoint (step" in result.report.data


@pytest.mark.parametrize(("user", "stops"), [(True, True), (False, False)])
def test_early_stop_is_on_by_default_for_user_data_only(tmp_path, user, stops):
    result = train("test-noise", quiet=True, steps=60, run_dir=str(tmp_path / "r"), user=user, **NOISE)
    assert result.stopped_early is stops
    assert (result.step == result.best["step"] + 3 * NOISE["eval_every"]) if stops else result.step == 60


def test_explicit_early_stop_wins_over_the_default(tmp_path):
    result = train("test-noise", quiet=True, steps=40, early_stop=0, user=True, run_dir=str(tmp_path / "r"), **NOISE)
    assert result.step == 40 and not result.stopped_early


@pytest.mark.parametrize(("task", "config", "user"), [
    (LMTask, LMConfig(), False), (LMTask, LMConfig(data="notes/"), True),
    (ClassifyTask, ClassifyConfig(), False), (ClassifyTask, ClassifyConfig(data="photos/"), True),
    (TranslateTask, TranslateConfig(), False), (TranslateTask, TranslateConfig(data="pairs.tsv"), True),
    (GraphTask, GraphConfig(), False), (GraphTask, GraphConfig(data="cycles"), False),
    (GraphTask, GraphConfig(data="graphs/"), True), (SortTask, SortConfig(), False),
])
def test_tasks_say_whether_the_data_are_the_users(task, config, user):
    assert task(config).user_data is user


def test_patience_state_survives_resume_bitwise(tmp_path):
    args = dict(quiet=True, steps=200, early_stop=3, **NOISE)
    full = train("test-noise", run_dir=str(tmp_path / "full"), **args)
    assert full.stopped_early
    best, stop = full.best["step"], full.step
    cut = tmp_path / "cut"
    shutil.copytree(full.run_dir, cut)
    resume_at = best + NOISE["eval_every"]  # one evaluation without improvement already counted
    for step in list_checkpoints(cut):
        if step > resume_at:
            shutil.rmtree(step_dir(cut, step))
    resumed = train(resume=cut, quiet=True)
    assert resumed.stopped_early and resumed.step == stop and resumed.best == full.best
    a, b = (load_file(step_dir(r, stop) / "model.safetensors") for r in (full.run_dir, cut))
    assert all(torch.equal(a[k], b[k]) for k in a)
