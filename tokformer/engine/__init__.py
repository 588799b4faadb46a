"""The training engine: one loop behind every task, driven by the CLI or by Python.

Public API: :func:`train`, :func:`evaluate`, :func:`load_run`, the :class:`Task` base
class with :class:`StepOutput`, :func:`register_task`, and the config dataclasses.
docs/engine.md explains how to write a task.
"""

from tokformer.engine.api import evaluate, load_run, resolve_config, train
from tokformer.engine.checkpoint import TOKENIZER_DIR
from tokformer.engine.config import RunConfig, TrainConfig
from tokformer.engine.registry import get_task, register_task, task_names
from tokformer.engine.report import Evaluation
from tokformer.engine.task import StepOutput, Task
from tokformer.engine.trainer import RunResult

__all__ = [
    "Evaluation",
    "RunConfig",
    "RunResult",
    "StepOutput",
    "TOKENIZER_DIR",
    "Task",
    "TrainConfig",
    "evaluate",
    "get_task",
    "load_run",
    "register_task",
    "resolve_config",
    "task_names",
    "train",
]
