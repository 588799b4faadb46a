"""Fine-tuning: a new run starts from another model's shape, tokenizer and weights (``init_from``).

The engine does it once for every task. The source is described by the store
(:func:`tokformer.store.describe`): a run directory or model folder of the same task, or a
foreign folder a registered format loads as one (a Hugging Face causal LM loads as an ``lm``).
Then, in this order:

1. the source's assets (tokenizers, class names) pass to the new task, through the source's
   ``save_assets`` and the new task's ``load_assets``;
2. the task says which config options the source fixes (:meth:`Task.adopt`; by default every
   option declared ``architecture=True``); the engine applies them, and the run's
   ``config.json`` records them, so the run resumes, evaluates and exports without the source;
3. after ``build_model``, the source's weights are loaded (:func:`load_initial`), except that
   parameters under the task's ``fresh_on_mismatch`` prefixes that the source lacks or holds in
   another shape (a classifier for another class count) keep their fresh initialisation.

A source that loads as no task (a timm ViT file) goes to :meth:`Task.adopt_foreign` instead.
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path

from torch import Tensor, nn

from tokformer.errors import ConfigError
from tokformer.runtime.registry import name_of
from tokformer.runtime.task import Task
from tokformer.store.formats import get_format
from tokformer.store.loader import load_model
from tokformer.store.source import describe
from tokformer.store.weights import load_fitting


@dataclass
class InitialWeights:
    """The weights a fine-tuned run starts from, under the new model's parameter names."""

    source: Path
    state: dict[str, Tensor]


def adopt(task: Task, path: str) -> InitialWeights:
    """Give ``task`` the shape and assets of the model at ``path``; returns its weights for :func:`load_initial`."""
    source = describe(path)
    if not source.is_tokformer and get_format(source.kind).load is None:  # no task of ours: the task converts it
        try:
            return InitialWeights(source.path, task.adopt_foreign(source.path, source.config))
        except NotImplementedError:
            raise ConfigError(f"init_from {path} is {get_format(source.kind).description}; task '{name_of(task)}' "
                              "cannot start from it: the architectures differ") from None
    source_task, model = load_model(source)
    if name_of(source_task) != name_of(task):
        raise ConfigError(f"init_from {path} holds a '{name_of(source_task)}' model; task '{name_of(task)}' "
                          "cannot start from it: the architectures differ")
    with tempfile.TemporaryDirectory(prefix="tokformer-init-") as assets:
        source_task.save_assets(Path(assets))
        task.load_assets(Path(assets))
    fixed = task.adopt(source_task)
    try:
        task.config = dataclasses.replace(task.config, **fixed)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"init_from {path}: cannot adopt its shape ({e})") from None
    return InitialWeights(source.path, model.state_dict())


def load_initial(model: nn.Module, initial: InitialWeights, fresh_on_mismatch: tuple[str, ...]) -> None:
    """``initial``'s weights into the freshly built ``model``; a parameter under one of the
    ``fresh_on_mismatch`` prefixes that ``initial`` lacks or holds in another shape keeps its
    fresh initialisation. Any other key or shape that does not fit is a one-line error."""
    state = dict(initial.state)
    for key, value in model.state_dict().items():
        if key.startswith(fresh_on_mismatch) and (key not in state or state[key].shape != value.shape):
            state[key] = value
    load_fitting(model, state, f"init_from {initial.source}", "its config")
