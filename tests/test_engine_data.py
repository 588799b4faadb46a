"""Data order is a pure function of (seed, epoch); resume and sharding cut it the same way."""

from dataclasses import dataclass
from itertools import islice

import torch

from tokformer.batch import TokenBatch
from tokformer.engine.data import StepSampler, eval_batches, to_device


def take(sampler: StepSampler, n: int) -> list[list[int]]:
    return list(islice(iter(sampler), n))


def test_same_seed_same_order_other_seed_other_order():
    a = take(StepSampler(20, 4, 1, 0, seed=1), 10)
    assert a == take(StepSampler(20, 4, 1, 0, seed=1), 10)
    assert a != take(StepSampler(20, 4, 1, 0, seed=2), 10)


def test_epochs_cover_the_data_and_differ():
    batches = take(StepSampler(20, 4, 1, 0, seed=0), 10)
    first, second = batches[:5], batches[5:]
    assert sorted(i for b in first for i in b) == list(range(20))
    assert sorted(i for b in second for i in b) == list(range(20))
    assert first != second


def test_resume_mid_epoch_skips_exactly_the_consumed_batches():
    full = take(StepSampler(23, 4, 1, 0, seed=5), 17)  # 5 batches per epoch, last partial dropped
    for start in (1, 4, 5, 7, 12):
        assert take(StepSampler(23, 4, 1, 0, seed=5, start=start), 17 - start) == full[start:]


def test_ranks_split_the_single_process_global_batch():
    single = take(StepSampler(40, 8, 1, 0, seed=3), 12)
    r0 = take(StepSampler(40, 4, 2, 0, seed=3), 12)
    r1 = take(StepSampler(40, 4, 2, 1, seed=3), 12)
    assert [a + b for a, b in zip(r0, r1, strict=True)] == single


def test_eval_batches_count_every_sample_once():
    shards = [eval_batches(11, 3, 2, r) for r in range(2)]
    seen = sorted(i for shard in shards for batch in shard for i in batch)
    assert seen == list(range(11))


@dataclass
class Pair:
    x: torch.Tensor
    name: str


def test_to_device_walks_containers():
    tokens = TokenBatch(ids=torch.zeros(1, 2, dtype=torch.long), mask=torch.ones(1, 2, dtype=torch.bool))
    moved = to_device({"t": tokens, "xs": [torch.ones(1)], "p": Pair(torch.ones(2), "a")}, torch.device("meta"))
    assert moved["t"].ids.device.type == "meta"
    assert moved["xs"][0].device.type == "meta"
    assert moved["p"].x.device.type == "meta" and moved["p"].name == "a"


def test_a_dataset_can_choose_the_epoch_order():
    def descending(generator: torch.Generator, global_batch: int) -> torch.Tensor:  # [n]
        assert global_batch == 8  # micro_batch x world
        return torch.arange(16).flip(0)

    batches = take(StepSampler(16, 4, 2, 0, seed=1, order=descending), 4)
    assert batches == [[15, 14, 13, 12], [7, 6, 5, 4]] * 2
    assert take(StepSampler(16, 4, 2, 1, seed=1, start=1, order=descending), 1) == [[3, 2, 1, 0]]
