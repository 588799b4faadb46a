"""The Task API: what a task tells the engine, and nothing more.

A task owns its data, its tokenizer, its model and its loss; the engine owns everything
else (devices, precision, optimizer, schedule, distribution, checkpoints, logging,
resume). See docs/engine.md for a worked example.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from torch import Tensor, nn
from torch.utils.data import Dataset

from tokformer.engine.checkpoint import TOKENIZER_DIR
from tokformer.engine.distributed import Dist
from tokformer.engine.report import Baselines
from tokformer.errors import UsageError

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
        outputs: anything of this batch that :meth:`Task.eval_batch` wants from the forward pass
            (e.g. predicted classes), so evaluation need not run the model twice; the engine
            does not read it.
    """

    loss: Tensor
    metrics: dict[str, MetricSum] = field(default_factory=dict)
    count: int = 1
    outputs: Any = None


class Task:
    """Base class of every task. Subclass it, set ``Config``, decorate with ``@register_task``.

    The engine builds a task as ``Task(config)`` once per process, seeds every RNG first,
    and calls the methods below, in this order: :meth:`setup`, the datasets,
    :meth:`collate` per batch, :meth:`build_model`, :meth:`step` per micro-batch; each
    evaluation pass runs :meth:`step` then :meth:`eval_batch` on every batch and ends with
    :meth:`eval_end`. Batches from :meth:`collate` are moved to the device by the engine
    (tensors, objects with ``.to``, and dicts/lists/tuples of them).
    """

    #: The task's config dataclass; its fields become ``task.*`` options.
    Config: ClassVar[type]
    #: Eval metric that picks the best checkpoint, and whether higher is better.
    best_metric: ClassVar[str] = "loss"
    higher_is_better: ClassVar[bool] = False

    def __init__(self, config: Any) -> None:
        self.config = config

    def setup(self, run_dir: Path, dist: Dist) -> None:
        """Prepare data once per run, before the datasets are built (every process calls it).

        ``run_dir`` is the run directory (on resume it already holds what the task wrote,
        and :meth:`load_assets` has run); ``dist`` is this process's place in the job. A task
        with costly preparation (a tokenizer to train, a corpus to pack) does it on
        ``dist.is_main`` into ``run_dir``, then every process meets at
        ``tokformer.engine.distributed.barrier(dist)`` and the others load the result. Tasks
        get their rank here and never from the environment. Default: nothing to prepare.
        """

    def tokenizer_dirs(self) -> tuple[str, ...]:
        """The directories (relative to a run directory or model folder) that :meth:`save_assets`
        writes tokenizers to. The checkpoint fingerprint covers every one of them, so loading
        refuses weights whose tokenizer was swapped or edited (docs/reliability.md, K5)."""
        return (TOKENIZER_DIR,)

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

    @property
    def user_data(self) -> bool:
        """Whether the data come from the user rather than being the task's built-in default.

        The engine stops such runs early by default (``early_stop``): a small real dataset is
        overfitted long before a step budget sized for the built-in data ends. Default: False.
        """
        return False

    def eval_data(self, data: str, workdir: Path, dist: Dist) -> Dataset:
        """All of ``data`` (a path as the task's ``data`` option takes it) as an evaluation set,
        for ``tokformer evaluate --data``; called after :meth:`setup`. Prepared files go to
        ``workdir`` (rank 0 writes, then ``barrier(dist)``), which is removed afterwards.
        Default: the task reads no outside data."""
        raise UsageError(f"task {type(self).__name__} cannot evaluate outside data: drop --data")

    def baselines(self, eval_set: Dataset) -> Baselines:
        """Trivial predictors scored on ``eval_set`` with the metrics :meth:`step` and
        :meth:`eval_end` report: ``{description: {metric: value}}`` (e.g. ``{"majority class of
        the training split": {"accuracy": 0.1}}``). A baseline fit on data is fit on the training
        split, deterministically and cheaply; the description says what it is. The engine prints
        them beside the model's metrics after training and in ``tokformer evaluate``. Called after
        :meth:`setup`, on rank 0 only. Default: none."""
        return {}

    def collate(self, samples: list[Any], train: bool) -> Any:
        """A list of dataset items -> one batch; ``train`` says whether it is a training batch
        (augmentation such as mixup applies to those only)."""
        raise NotImplementedError

    def step(self, model: nn.Module, batch: Any) -> StepOutput:
        """Loss and metrics of ``model`` on ``batch``, in training and in evaluation.

        Call ``model(...)`` itself: the engine may have wrapped it (DistributedDataParallel,
        torch.compile), and only the wrapper's forward synchronises gradients.
        """
        raise NotImplementedError

    def eval_batch(self, model: nn.Module, batch: Any, output: StepOutput) -> Any:
        """Per evaluation batch, after :meth:`step` returned ``output``: what :meth:`eval_end`
        needs of this batch (picklable; None for nothing), e.g. decoded hypotheses.

        ``model`` is the raw model (never compiled or wrapped by DDP), so its own methods
        (``encode``, ``decode``) are there to call, under ``torch.no_grad``.
        """
        return None

    def eval_end(self, outputs: list[Any]) -> dict[str, float]:
        """Pass-level metrics (BLEU, perplexity: what no per-batch sum can express) from every
        :meth:`eval_batch` value of the pass. The engine gathers them from all processes, so
        every process gets all of them (in no particular order) and returns the same metrics;
        they join the ``(sum, count)`` metrics of :meth:`step`. Default: none."""
        return {}

    def predict(self, model: nn.Module, inputs: Sequence[Any], **options: Any) -> list[Any]:
        """One prediction per raw input: the one inference entry, behind ``tokformer predict``
        and ``tokformer.load(path)``. ``model`` is in eval mode; ``options`` are the task's own
        (``top_k``, ``beam_size``...). Inputs given as command-line strings must be accepted."""
        raise NotImplementedError(f"task {type(self).__name__} has no predict")

    def show_prediction(self, source: str, prediction: Any) -> str:
        """The line ``tokformer predict`` prints for the command-line input ``source``."""
        return str(prediction)

    def save_assets(self, run_dir: Path) -> None:
        """Write tokenizer files or anything else inference needs (rank 0, once per run, and into
        every model folder); tokenizers go to the directories of :meth:`tokenizer_dirs`."""

    def load_assets(self, run_dir: Path) -> None:
        """Read back what :meth:`save_assets` wrote, before :meth:`build_model` on reload."""
