"""The built-in `sort` task: deterministic data, wiring through the core, and it learns."""

import pytest
import torch

from tokformer.batch import TokenBatch
from tokformer.engine import get_task, train
from tokformer.errors import ConfigError
from tokformer.runtime.config import build_dataclass
from tokformer.tasks.sort import SortConfig, SortTask, make_sequences

pytestmark = pytest.mark.usefixtures("one_thread")


def test_registered_by_name():
    assert get_task("sort") is SortTask


def test_data_is_a_function_of_the_seed():
    assert torch.equal(make_sequences(50, 7, 10, seed=3), make_sequences(50, 7, 10, seed=3))
    assert not torch.equal(make_sequences(50, 7, 10, seed=3), make_sequences(50, 7, 10, seed=4))
    task = SortTask(SortConfig(train_size=40, eval_size=20))
    assert not torch.equal(task.train_dataset().inputs[:20], task.eval_dataset().inputs)


def test_targets_are_the_sorted_inputs():
    ds = SortTask(SortConfig(train_size=30, seq_len=9, vocab=5)).train_dataset()
    for i in range(len(ds)):
        x, y = ds[i]
        assert y.tolist() == sorted(x.tolist()) and int(x.max()) < 5


def test_collate_and_model_shapes():
    task = SortTask(SortConfig(seq_len=5, d_model=16, n_heads=2, n_layers=1))
    ds = task.train_dataset()
    batch = task.collate([ds[i] for i in range(3)], train=True)
    tokens = batch["tokens"]
    assert isinstance(tokens, TokenBatch) and tokens.ids.shape == (3, 5) and bool(tokens.mask.all())
    assert tokens.positions.tolist() == [list(range(5))] * 3
    out = task.step(task.build_model(), batch)
    assert out.loss.shape == () and out.count == 3
    assert float(out.metrics["accuracy"][1]) == 15 and float(out.metrics["seq_accuracy"][1]) == 3


@pytest.mark.parametrize(
    ("values", "needle"),
    [({"d_model": 30, "n_heads": 4}, "not divisible"), ({"seq_len": 0}, "seq_len must be positive"),
     ({"n_layers": -1}, "n_layers must be positive")],
)
def test_impossible_shapes_are_config_errors(values, needle):
    with pytest.raises(ConfigError, match=needle):
        build_dataclass(SortConfig, values, "task 'sort'")


def test_learns_to_sort(tmp_path):
    result = train("sort", quiet=True, steps=200, batch_size=64, lr=3e-3, warmup_steps=20, eval_every=200,
                   seq_len=6, d_model=48, n_heads=4, train_size=4096, eval_size=256, device="cpu",
                   run_dir=str(tmp_path / "run"))
    assert result.metrics["accuracy"] > 0.95, result.metrics
