"""The task registry: tasks register by name, the engine looks them up by name.

Built-in tasks live in ``tokformer.tasks`` and are imported only when a name is looked
up (the core never imports tasks at import time). Third-party packages add tasks through
the ``tokformer.tasks`` entry-point group, e.g. in their pyproject.toml::

    [project.entry-points."tokformer.tasks"]
    my_task = "my_package.my_task"        # a module that uses @register_task
"""

from __future__ import annotations

import difflib
import importlib
import logging
import pkgutil
from collections.abc import Callable
from importlib.metadata import entry_points

from tokformer.engine.task import Task
from tokformer.errors import ConfigError

ENTRY_POINT_GROUP = "tokformer.tasks"
_TASKS: dict[str, type[Task]] = {}
_log = logging.getLogger(__name__)


def register_task(name: str) -> Callable[[type[Task]], type[Task]]:
    """Class decorator: make a :class:`Task` subclass available as ``tokformer train NAME``."""

    def decorate(cls: type[Task]) -> type[Task]:
        existing = _TASKS.get(name)
        if existing is not None and existing.__qualname__ != cls.__qualname__:
            raise ValueError(f"task name '{name}' is already taken by {existing.__module__}.{existing.__qualname__}")
        if not hasattr(cls, "Config"):
            raise TypeError(f"task '{name}' ({cls.__qualname__}) must set a Config dataclass")
        _TASKS[name] = cls
        return cls

    return decorate


def _import_quietly(module: str) -> None:
    """Import a task module; a broken one must not hide every other task."""
    try:
        importlib.import_module(module)
    except Exception as e:  # any import-time failure of someone else's task
        _log.warning("task module %s failed to import: %s", module, e)


def _discover(name: str | None) -> None:
    """Import task modules until ``name`` is registered (all of them when name is None)."""
    import tokformer.tasks

    modules = [m.name for m in pkgutil.iter_modules(tokformer.tasks.__path__)]
    if name in modules:  # the usual case: task `sort` lives in tokformer/tasks/sort.py
        _import_quietly(f"tokformer.tasks.{name}")
        if name in _TASKS:
            return
    for module in modules:
        _import_quietly(f"tokformer.tasks.{module}")
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = ep.load()
        except Exception as e:  # a broken plug-in must not break the built-in tasks
            _log.warning("task entry point %s failed to load: %s", ep.name, e)
            continue
        if isinstance(loaded, type) and issubclass(loaded, Task) and ep.name not in _TASKS:
            register_task(ep.name)(loaded)


def get_task(name: str) -> type[Task]:
    """The task class registered as ``name``; ConfigError listing the known ones if none."""
    if name not in _TASKS:
        _discover(name)
    if name not in _TASKS:
        known = sorted(_TASKS)
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise ConfigError(f"unknown task '{name}'.{hint} Known tasks: {', '.join(known) or '(none)'}")
    return _TASKS[name]


def task_names() -> list[str]:
    """Every registered task, built-in and plug-in."""
    _discover(None)
    return sorted(_TASKS)
