"""The Task API: what a task tells the engine, and nothing more.

A task owns its data, its tokenizer, its model and its loss; the engine owns everything
else (devices, precision, optimizer, schedule, distribution, checkpoints, logging,
resume). See docs/engine.md for a worked example.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from torch.utils.data import Dataset

from tokformer.batch import TokenBatch
from tokformer.config import architecture_fields
from tokformer.errors import UsageError
from tokformer.runtime.distributed import Dist

#: Where every task saves its tokenizer inside a run directory or model folder (the default of
#: :meth:`Task.tokenizer_dirs`).
TOKENIZER_DIR = "tokenizer"
#: What :meth:`Task.baselines` returns: baseline description -> {metric name: value}.
Baselines = dict[str, dict[str, float]]

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
    #: Parameter-name prefixes that fine-tuning (``init_from``) leaves freshly initialised where the
    #: source's tensor has another shape: a classifier layer trained for another class count.
    fresh_on_mismatch: ClassVar[tuple[str, ...]] = ()
    #: Engine settings that suit this task (``{"steps": 1500, "lr": 2e-3}``): they sit between
    #: TrainConfig's defaults and the user's config file, flags and ``-o`` (which win).
    train_defaults: ClassVar[dict[str, Any]] = {}
    #: What the task writes into a run directory besides its :meth:`tokenizer_dirs` (class names, a
    #: packed corpus's files), as paths relative to it (``corpus/corpus.bin``; ``*`` within a name):
    #: with the engine's own files, what ``--overwrite`` may delete (``tokformer.store.run_dir``).
    run_files: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: Any) -> None:
        self.config = config

    def setup(self, run_dir: Path, dist: Dist) -> None:
        """Prepare data once per run, before the datasets are built (every process calls it).

        ``run_dir`` is the run directory (on resume it already holds what the task wrote,
        and :meth:`load_assets` has run); ``dist`` is this process's place in the job. A task
        with costly preparation (a tokenizer to train, a corpus to pack) does it on
        ``dist.is_main`` into ``run_dir``, then every process meets at
        ``tokformer.runtime.distributed.barrier(dist)`` and the others load the result. Tasks
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

    def planned_model(self) -> nn.Module | None:
        """The model as the config alone shapes it, at least as large as :meth:`build_model`'s (a text
        table at the configured vocabulary, the most a tokenizer learns), built on the meta device so
        the engine refuses one too large for memory before preparing any data for it (drawing or
        tokenizing can take minutes). Default None: the data shape the model (classes, a vocabulary),
        and the engine checks once they are ready."""
        return None

    def train_dataset(self) -> Dataset:
        """A map-style dataset (``__len__`` and ``__getitem__``); the engine samples it and shuffles
        it each epoch, unless :meth:`epoch_order` chooses the order."""
        raise NotImplementedError

    def epoch_order(self, dataset: Dataset, generator: torch.Generator, global_batch: int) -> Tensor | None:
        """The training ``dataset``'s sample order for one epoch (a permutation ``[n]``) drawn from
        ``generator`` only, so the order is a pure function of seed and epoch and resume stays exact;
        global batch j is its j-th slice of ``global_batch`` samples (e.g. lengths bucketed together).
        Default None: the engine shuffles."""
        return None

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

    def is_one_input(self, value: Any) -> bool:
        """Whether ``value``, given to a :class:`~tokformer.engine.Predictor` in place of a sequence of
        inputs, is one input (its prediction is returned alone): a string or path for every task; a
        task whose inputs are other objects (an image, a graph) adds those, which iterated would be
        taken apart (a ``[C, H, W]`` image into its channels, a graph into its nodes)."""
        return isinstance(value, str | os.PathLike)

    def show_prediction(self, source: str, prediction: Any) -> str:
        """The line ``tokformer predict`` prints for the command-line input ``source``."""
        return str(prediction)

    # -- fine-tuning (``init_from``): the engine drives it, a task only says what it takes ----

    def adopt(self, source: Task) -> dict[str, Any]:
        """The config options that ``source``, a loaded model of this same task, fixes for a run
        fine-tuned from it; the engine applies them to :attr:`config` and records them in the run's
        config, then loads ``source``'s weights into :meth:`build_model`'s model.

        Before this call the engine has handed ``source``'s assets (tokenizers, class names) to this
        task: ``source.save_assets`` read back by :meth:`load_assets`. Default: every architecture
        option of the config (``help_text(..., architecture=True)``). Override to check the source
        (an lm needs an end-of-text token) or to take more than options.
        """
        return {name: getattr(source.config, name) for name in architecture_fields(type(self.config))}

    def adopt_foreign(self, path: Path, config: dict[str, Any]) -> dict[str, Tensor]:
        """Fine-tuning from another library's model that loads as no tokformer task (a timm ViT file
        or hub folder): take its shape and tokenizer, and return its weights under this task's
        parameter names. ``path`` is the file or folder, ``config`` its parsed ``config.json`` (empty
        for a file). Default: NotImplementedError, which the engine turns into a one-line refusal."""
        raise NotImplementedError

    def export_example(self) -> tuple[TokenBatch, ...]:
        """Example inputs of the model's forward for ``torch.export`` and ONNX (``tokformer export
        --format onnx``): their shapes are traced, their sizes along batch and tokens marked dynamic.
        Default: the task cannot be exported."""
        raise UsageError(f"task {type(self).__name__} has no export example: it cannot be exported to ONNX")

    def save_assets(self, run_dir: Path) -> None:
        """Write tokenizer files or anything else inference needs (rank 0, once per run, and into
        every model folder); tokenizers go to the directories of :meth:`tokenizer_dirs`."""

    def load_assets(self, run_dir: Path) -> None:
        """Read back what :meth:`save_assets` wrote, before :meth:`build_model` on reload."""
