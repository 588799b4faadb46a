"""Data order as a pure function of (seed, epoch), and batches moved to a device.

Why not ``torch.utils.data.DistributedSampler``: it shards the permutation by rank
*before* batching (so N processes see different global batches than one process does)
and cannot start mid-epoch. Here every process computes the same permutation of the
epoch, cuts it into global batches, and takes its slice of each; resuming at micro-batch
``k`` simply starts the index arithmetic at ``k``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import fields, is_dataclass, replace
from typing import Any

import torch
from torch.utils.data import Sampler

# A task may choose each epoch's order (``Task.epoch_order``): ``(generator, global_batch) ->
# permutation [n]`` drawn from ``generator`` only (so it is a pure function of seed and epoch,
# and exact resume holds), or None for a plain shuffle. Global batch j is its j-th slice of
# ``global_batch`` samples, so similar lengths can go together (bucketing).
EpochOrder = Callable[[torch.Generator, int], torch.Tensor | None]


class StepSampler(Sampler[list[int]]):
    """Yields this rank's index list for each micro-batch, from micro-batch ``start`` on.

    Global micro-batch ``k`` is samples ``perm(epoch)[j*G:(j+1)*G]`` with ``G`` =
    ``micro_batch * world``, ``epoch, j = divmod(k, batches_per_epoch)``; rank ``r`` takes
    the ``r``-th contiguous ``micro_batch`` slice. The last partial batch of an epoch is dropped.
    """

    def __init__(self, n: int, micro_batch: int, world: int, rank: int, seed: int, start: int = 0,
                 order: EpochOrder | None = None) -> None:
        self.n, self.micro_batch, self.world, self.rank = n, micro_batch, world, rank
        self.seed, self.start, self.order = seed, start, order
        self.batches_per_epoch = n // (micro_batch * world)

    def permutation(self, epoch: int) -> torch.Tensor:  # [n]
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        chosen = None if self.order is None else self.order(g, self.micro_batch * self.world)
        return torch.randperm(self.n, generator=g) if chosen is None else chosen  # the task's, e.g. bucketing

    def __iter__(self) -> Iterator[list[int]]:
        k = self.start
        while True:
            epoch, j = divmod(k, self.batches_per_epoch)
            perm = self.permutation(epoch)
            while j < self.batches_per_epoch:
                lo = (j * self.world + self.rank) * self.micro_batch
                yield perm[lo : lo + self.micro_batch].tolist()
                j += 1
            k = (epoch + 1) * self.batches_per_epoch


def eval_batches(n: int, batch_size: int, world: int, rank: int) -> list[list[int]]:
    """This rank's share of a sequential pass over ``n`` samples (strided, no padding, so
    summed metrics over all ranks count every sample exactly once)."""
    mine = list(range(rank, n, world))
    return [mine[i : i + batch_size] for i in range(0, len(mine), batch_size)]


def to_device(obj: Any, device: torch.device) -> Any:
    """``obj`` with every tensor on ``device``: tensors, objects with ``.to`` (TokenBatch),
    dataclasses, and dicts/lists/tuples of them."""
    if isinstance(obj, torch.Tensor) or (hasattr(obj, "to") and not isinstance(obj, type)):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(v, device) for v in obj)
    if is_dataclass(obj) and not isinstance(obj, type):
        return replace(obj, **{f.name: to_device(getattr(obj, f.name), device) for f in fields(obj) if f.init})
    return obj
