"""The Task API: what a task tells the engine, and nothing more.

A task owns its data, its tokenizer, its model and its loss; the engine owns everything
else (devices, precision, optimizer, schedule, distribution, checkpoints, logging,
resume). See docs/engine.md for a worked example.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from torch import Tensor, nn
from torch.utils.data import Dataset

# A metric is accumulated as (sum, count) so the engine can average it exactly across
# batches of different sizes and across processes: accuracy = (correct tokens, tokens).
MetricSum = tuple[Tensor | float, Tensor | float]


@dataclass
class StepOutput:
    """What one forward pass on one batch produced.

    Attributes:
        loss: scalar, the mean over the batch; the engine backpropagates it.
        metrics: name -> (sum, count); the engine reports sum / count.
        count: the weight of ``loss`` when averaging over batches (usually the batch size).
    """

    loss: Tensor
    metrics: dict[str, MetricSum] = field(default_factory=dict)
    count: int = 1


class Task:
    """Base class of every task. Subclass it, set ``Config``, decorate with ``@register_task``.

    The engine builds a task as ``Task(config)`` once per process, seeds every RNG first,
    and calls the methods below. Batches from :meth:`collate` are moved to the device by
    the engine (tensors, objects with ``.to``, and dicts/lists/tuples of them).
    """

    #: The task's config dataclass; its fields become ``task.*`` options.
    Config: ClassVar[type]
    #: Eval metric that picks the best checkpoint, and whether higher is better.
    best_metric: ClassVar[str] = "loss"
    higher_is_better: ClassVar[bool] = False

    def __init__(self, config: Any) -> None:
        self.config = config

    def build_model(self) -> nn.Module:
        """A freshly initialised model (the engine has seeded torch before this call)."""
        raise NotImplementedError

    def train_dataset(self) -> Dataset:
        """A map-style dataset (``__len__`` and ``__getitem__``); the engine samples it.

        The engine shuffles it each epoch, unless the dataset defines
        ``epoch_order(generator, global_batch)`` returning the epoch's permutation (drawn
        from ``generator`` only), e.g. to bucket by length; see tokformer/engine/data.py.
        """
        raise NotImplementedError

    def eval_dataset(self) -> Dataset | None:
        """The held-out set evaluated every ``eval_every`` steps, or None."""
        return None

    def collate(self, samples: list[Any]) -> Any:
        """A list of dataset items -> one batch."""
        raise NotImplementedError

    def step(self, model: nn.Module, batch: Any) -> StepOutput:
        """Loss and metrics of ``model`` on ``batch``.

        Call ``model(...)`` itself: the engine may have wrapped it (DistributedDataParallel,
        torch.compile), and only the wrapper's forward synchronises gradients.
        """
        raise NotImplementedError

    def save_assets(self, run_dir: Path) -> None:
        """Write tokenizer files or anything else inference needs (rank 0, once per run)."""

    def load_assets(self, run_dir: Path) -> None:
        """Read back what :meth:`save_assets` wrote, before :meth:`build_model` on reload."""
