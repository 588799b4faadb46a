"""The task registry: tasks register by name, the engine looks them up by name.

Built-in tasks live in ``tokformer.tasks`` and are imported only when a name is looked
up (the core never imports tasks at import time). Third-party packages add tasks through
the ``tokformer.tasks`` entry-point group, e.g. in their pyproject.toml::

    [project.entry-points."tokformer.tasks"]
    my_task = "my_package.my_task"        # a module that uses @register_task
"""

from __future__ import annotations

import importlib
import inspect
import logging
import pkgutil
from collections.abc import Callable
from importlib.metadata import entry_points

from tokformer import plugins
from tokformer.errors import ConfigError
from tokformer.runtime.task import Task

ENTRY_POINT_GROUP = "tokformer.tasks"
_TASKS: dict[str, type[Task]] = {}
#: Task attributes the engine reads as values: a subclass must keep them properties.
_PROPERTIES = ("user_data",)
_log = logging.getLogger(__name__)


def register_task(name: str) -> Callable[[type[Task]], type[Task]]:
    """Class decorator: make a :class:`Task` subclass available as ``tokformer train NAME``."""

    def decorate(cls: type[Task]) -> type[Task]:
        if not hasattr(cls, "Config"):
            raise TypeError(f"task '{name}' ({cls.__qualname__}) must set a Config dataclass")
        for attribute in _PROPERTIES:  # a plain method would be truthy wherever the engine reads it
            if not isinstance(inspect.getattr_static(cls, attribute), property):
                raise TypeError(f"task '{name}' ({cls.__qualname__}) must define {attribute} as a @property")
        return plugins.register(_TASKS, "task", name, cls)

    return decorate


def _import_quietly(module: str) -> None:
    """Import a built-in task module; a broken one must not hide every other task."""
    try:
        importlib.import_module(module)
    except Exception as e:  # any import-time failure, e.g. a missing optional dependency
        _log.warning("task module %s failed to import: %s", module, e)


def _discover(name: str | None) -> None:
    """Import task modules until ``name`` is registered (all of them when name is None)."""
    builtin = importlib.import_module("tokformer.tasks")  # by name: the runtime sits below the tasks

    modules = [m.name for m in pkgutil.iter_modules(builtin.__path__)]
    if name in modules:  # the usual case: task `sort` lives in tokformer/tasks/sort.py
        _import_quietly(f"tokformer.tasks.{name}")
        if name in _TASKS:
            return
    for module in modules:
        _import_quietly(f"tokformer.tasks.{module}")
    points = [p for p in entry_points(group=ENTRY_POINT_GROUP) if p.name not in _TASKS]
    for point_name, loaded in plugins.load_entry_points(ENTRY_POINT_GROUP, points, "task"):
        if isinstance(loaded, type) and issubclass(loaded, Task):  # a module registers its tasks itself
            register_task(point_name)(loaded)


def get_task(name: str) -> type[Task]:
    """The task class registered as ``name``; ConfigError listing the known ones if none."""
    if name not in _TASKS:
        _discover(name)
    if name not in _TASKS:
        raise plugins.unknown(ENTRY_POINT_GROUP, "task", name, _TASKS, ConfigError)
    return _TASKS[name]


def name_of(task: Task) -> str:
    """The registered name of ``task``'s class (the registry stores classes by name only)."""
    guess = type(task).__module__.rpartition(".")[2]  # tokformer.tasks.sort -> sort: the usual layout, no search
    if _TASKS.get(guess) is type(task):
        return guess
    for name in task_names():
        if _TASKS[name] is type(task):
            return name
    raise ConfigError(f"task class {type(task).__qualname__} is not registered; decorate it with @register_task")


def task_names() -> list[str]:
    """Every registered task, built-in and plug-in."""
    _discover(None)
    return sorted(_TASKS)
