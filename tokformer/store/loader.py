"""The one loader behind every inference command and ``tokformer.load``.

:func:`load_model` takes a run directory (weights of a chosen checkpoint), a model folder,
or any folder a registered :class:`~tokformer.store.formats.Format` reads (a Hugging Face
causal LM), as a path or as the :class:`~tokformer.store.source.Source` :func:`describe`
made of it, and returns the task (assets loaded) and the model in eval mode.
"""

from __future__ import annotations

import inspect
import numbers
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from tokformer.errors import ConfigError, UsageError
from tokformer.runtime.config import TrainConfig, resolve_config
from tokformer.runtime.distributed import select_device
from tokformer.runtime.registry import get_task, name_of
from tokformer.runtime.task import Task
from tokformer.store.budget import check_against_weights, planned_size
from tokformer.store.checkpoints import checkpoint_selector, find_checkpoint, load_weights
from tokformer.store.folder import load_folder
from tokformer.store.formats import get_format
from tokformer.store.source import MODEL, RUN, Source, describe, refuse_pickled_only


def as_source(path: str | os.PathLike | Source) -> Source:
    return path if isinstance(path, Source) else describe(path)


def load_run(run_dir: str | os.PathLike | Source, checkpoint: str | int = "best",
             device: str | torch.device = "cpu") -> tuple[Task, nn.Module]:
    """The task (assets loaded) and model (weights of ``checkpoint``: best, latest or a step, as a
    string or an int) of a finished or running run, in eval mode: the starting point of inference commands."""
    checkpoint = checkpoint_selector(checkpoint)
    device = _device(device)
    source = as_source(run_dir)
    if source.kind != RUN:
        raise ConfigError(f"{source.path} is not a run directory (tokformer train makes one)")
    cfg = resolve_config(source.config)
    task = get_task(cfg.task)(cfg.task_config)
    task.load_assets(source.path)
    path = find_checkpoint(source.path, checkpoint)
    check_against_weights(planned_size(task.build_model), sorted(path.glob("*.safetensors")), str(source.config_file))
    model = task.build_model()
    load_weights(model, path, task.tokenizer_dirs())
    return task, model.to(device).eval()


def load_model(path: str | os.PathLike | Source, checkpoint: str | int = "best",
               device: str | torch.device = "cpu") -> tuple[Task, nn.Module]:
    """The task and model (eval mode, on ``device``) of a run directory (weights of
    ``checkpoint``: best, latest or a step, as a string or an int), a model folder or a registered
    foreign folder."""
    checkpoint = checkpoint_selector(checkpoint)
    device = _device(device)
    source = as_source(path)
    if source.kind == RUN:
        return load_run(source, checkpoint, device)
    if checkpoint != "best":
        raise ConfigError(f"{source.path} is a model folder with one set of weights; --checkpoint {checkpoint} "
                          "applies to run directories only")
    if source.path.is_dir():
        refuse_pickled_only(source.path)
        if not any(source.path.glob("*.safetensors")):
            raise ConfigError(f"{source.path} has no .safetensors weights (a model folder has model.safetensors)")
    if source.kind == MODEL:
        task, model = load_folder(source)
    else:
        fmt = get_format(source.kind)
        if fmt.load is None:
            raise ConfigError(f"{source.path} is {fmt.description}; it can start a fine-tuning run "
                              f"(tokformer train TASK --init-from {source.path}) but is no model to run as it is")
        task, model = fmt.load(source)
    return task, model.to(device).eval()


def _device(device: str | torch.device) -> torch.device:
    """A device name checked the way ``train`` checks it (one line for ``bogus`` or a missing GPU)."""
    return device if isinstance(device, torch.device) else select_device(device)


def train_config(path: str | os.PathLike | Source) -> TrainConfig:
    """The engine settings a run trained with, or the task's defaults for a model folder (a
    foreign folder: the engine's): ``evaluate`` takes its batch size and precision from here."""
    source = as_source(path)
    if source.kind == RUN:
        return resolve_config(source.config).train
    if source.kind == MODEL:
        return resolve_config({"task": source.task_section()}).train
    return TrainConfig()


def saved_task_name(path: str | os.PathLike | Source) -> str | None:
    """The task a run directory or model folder was made by, read without loading any weights
    (so a command can refuse the wrong kind of model at once); None for other folders."""
    return as_source(path).task_name()


#: Predict options that count something (inputs decoded together, classes shown, beams, tokens): a
#: whole number of at least 1 wherever a task takes one, as the CLI's flags are ranged (``--top-k 0``
#: is refused); None only where the task's own default is None (the run's value, or no limit).
COUNT_OPTIONS = ("batch_size", "top_k", "beam_size", "max_new_tokens")


def positive_count(name: str, value: object) -> int:
    """``value`` of argument ``name`` when it is a whole number of at least 1, else a one-line UsageError
    naming it: 0 and negatives count nothing (a batch size of -1 decoded nothing and returned ``''``,
    ``top_k=-1`` was torch's ``selected index k out of range``), and a bool is no count."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1:
        return int(value)
    raise UsageError(f"{name} must be a whole number of at least 1, got {value!r}")


def check_counts(options: dict[str, Any], declared: dict[str, inspect.Parameter]) -> None:
    """Refuse a count option (:data:`COUNT_OPTIONS`) of ``options`` that is no count, before the model
    runs; ``declared`` are the task's predict parameters (None passes where one defaults to None, or
    where the task takes its options as ``**options`` and says their defaults itself)."""
    for name in COUNT_OPTIONS:
        if name not in options:
            continue
        parameter = declared.get(name)
        if options[name] is None and (parameter is None or parameter.default is None):
            continue
        positive_count(name, options[name])


@dataclass
class Predictor:
    """A loaded model with its task: load once, predict as often as needed.

    ``predictor(inputs, **options)`` is ``task.predict(model, inputs, **options)``: one
    prediction per input (digits for sort, an image or its path for classify, a prompt for lm,
    a sentence for translate, a graph or its file for graph); ``options`` are the task's own
    (``top_k``, ``beam_size``, ``max_new_tokens``...). A single input (a string or path, an image,
    a graph: :meth:`Task.is_one_input`) gives that input's prediction, not a list (as a Hugging Face
    pipeline does): iterated, a string was its characters, each taken for an input.
    """

    task: Task
    model: nn.Module

    def __call__(self, inputs: Sequence[Any] | str | os.PathLike, **options: Any) -> Any:
        """One prediction per input (one prediction for a single input); an option the task
        does not take, or a count option that is no whole number of at least 1, is a one-line UsageError."""
        accepted = {name: p for name, p in inspect.signature(self.task.predict).parameters.items()
                    if name not in ("model", "inputs")}
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
        unknown = sorted(set(options) - set(accepted))
        if unknown and not takes_any:
            raise UsageError(f"task {name_of(self.task)!r} has no predict option {unknown[0]!r}; "
                             f"it takes {', '.join(accepted) or 'none'}")
        check_counts(options, accepted)
        if self.task.is_one_input(inputs):
            return self.task.predict(self.model, [inputs], **options)[0]
        return self.task.predict(self.model, list(inputs), **options)

    predict = __call__


def load(path: str | os.PathLike, checkpoint: str | int = "best", device: str | torch.device = "cpu") -> Predictor:
    """A :class:`Predictor` for a run directory (weights of ``checkpoint``), a model folder or a
    Hugging Face folder: ``tokformer.load(path)(inputs)``, the Python form of ``tokformer predict``."""
    return Predictor(*load_model(path, checkpoint, device))


def from_pretrained(path: str | os.PathLike, device: str | torch.device = "cpu") -> tuple[Task, nn.Module]:
    """The task (tokenizer loaded) and model (eval mode) of a model folder, a Hugging Face
    folder or a run directory (its best checkpoint): the pair :func:`load_run` returns."""
    return load_model(path, device=device)
