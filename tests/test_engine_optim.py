"""Weight decay grouping and the learning-rate schedule."""

import math

import pytest
import torch
from torch import nn

from tokformer.engine.optim import build_optimizer, lr_at, no_decay_names
from tokformer.runtime.config import TrainConfig


class WithTable(nn.Module):
    """A raw nn.Parameter table that opts out of decay through the hook."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.zeros(5, 4))

    def no_weight_decay(self) -> list[str]:
        return ["table"]


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.positions = WithTable()
        self.norm = nn.LayerNorm(4)
        self.linear = nn.Linear(4, 4)
        self.conv = nn.Conv1d(4, 4, 3)


def test_only_matrices_decay():
    skip = no_decay_names(Net())
    assert skip == {"embed.weight", "positions.table", "norm.weight", "norm.bias", "linear.bias", "conv.bias"}


def test_optimizer_groups_follow_the_rule():
    net = Net()
    opt = build_optimizer(net, TrainConfig(weight_decay=0.3))
    decayed, plain = opt.param_groups
    assert decayed["weight_decay"] == 0.3 and plain["weight_decay"] == 0.0
    assert {id(p) for p in decayed["params"]} == {id(net.linear.weight), id(net.conv.weight)}
    assert len(decayed["params"]) + len(plain["params"]) == len(list(net.parameters()))


def test_decay_really_shrinks_only_matrices():
    torch.manual_seed(0)
    net = Net()
    before = {n: p.detach().clone() for n, p in net.named_parameters()}
    opt = build_optimizer(net, TrainConfig(weight_decay=0.5, lr=0.1))
    opt.step()  # no gradients: AdamW skips params without grad, so give them zeros
    for p in net.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    for name, p in net.named_parameters():
        changed = not torch.equal(before[name], p.detach())
        assert changed == (name in {"linear.weight", "conv.weight"}), name


def test_schedule_warmup_peak_and_floor():
    cfg = TrainConfig(steps=100, warmup_steps=10, lr=1.0, min_lr_ratio=0.1)
    assert lr_at(0, cfg) == pytest.approx(0.1)
    assert lr_at(9, cfg) == pytest.approx(1.0)
    assert lr_at(10, cfg) == pytest.approx(1.0)
    assert lr_at(55, cfg) == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi * 0.5)))
    assert lr_at(100, cfg) == pytest.approx(0.1)
    assert all(lr_at(s, cfg) >= lr_at(s + 1, cfg) for s in range(10, 100))
