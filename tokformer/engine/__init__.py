"""The training engine: one loop behind every task, driven by the CLI or by Python.

This package's names below are its public surface, the only engine names a task imports
(docs/engine.md lists them): the library API (:func:`train`, :func:`evaluate`, the loaders),
the task protocol it drives (:class:`Task`, :class:`StepOutput`, :func:`register_task`, from
:mod:`tokformer.runtime`), the config dataclasses, and the few helpers tasks share (process
group collectives, progress, atomic writes). Its modules are internal.
"""

from tokformer.atomic import fsync_dir, staged_folder, write_atomic, write_json_atomic, write_text_atomic
from tokformer.engine.api import evaluate, train
from tokformer.engine.metrics import read_metrics, save_figure
from tokformer.engine.optim import build_optimizer, lr_at, set_lr
from tokformer.engine.progress import LOGGER, progress
from tokformer.engine.report import Evaluation, over_seeds
from tokformer.engine.rng import seed_everything
from tokformer.engine.trainer import RunResult, evaluate_model
from tokformer.runtime.config import RunConfig, TrainConfig, help_text, resolve_config
from tokformer.runtime.distributed import Dist, barrier, local
from tokformer.runtime.registry import get_task, name_of, register_task, task_names
from tokformer.runtime.task import TOKENIZER_DIR, StepOutput, Task
from tokformer.store.budget import check_against_weights, check_data_fits, planned_size
from tokformer.store.checkpoints import tokenizer_fingerprint
from tokformer.store.loader import Predictor, load, load_model, load_run, positive_count, saved_task_name
from tokformer.store.lock import hold as hold_lock
from tokformer.store.source import describe, read_json_object
from tokformer.store.steps import list_checkpoints
from tokformer.store.weights import load_fitting

__all__ = [
    "LOGGER",
    "TOKENIZER_DIR",
    "Dist",
    "Evaluation",
    "Predictor",
    "RunConfig",
    "RunResult",
    "StepOutput",
    "Task",
    "TrainConfig",
    "barrier",
    "build_optimizer",
    "check_against_weights",
    "check_data_fits",
    "describe",
    "evaluate",
    "evaluate_model",
    "fsync_dir",
    "get_task",
    "help_text",
    "hold_lock",
    "list_checkpoints",
    "load",
    "load_fitting",
    "load_model",
    "load_run",
    "local",
    "lr_at",
    "name_of",
    "over_seeds",
    "planned_size",
    "positive_count",
    "progress",
    "read_metrics",
    "read_json_object",
    "register_task",
    "resolve_config",
    "save_figure",
    "saved_task_name",
    "seed_everything",
    "set_lr",
    "staged_folder",
    "task_names",
    "tokenizer_fingerprint",
    "train",
    "write_atomic",
    "write_json_atomic",
    "write_text_atomic",
]
