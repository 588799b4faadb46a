"""Other libraries' model folders and files, registered by the code that reads them.

The store knows tokformer's own layouts (run directories, model folders); a reader of another
library's format (Hugging Face, timm) lives in :mod:`tokformer.interop` and registers a
:class:`Format` here, the way tasks register themselves, so the store never imports interop.
The built-in readers are found by importing ``tokformer.interop`` by name the first time a
folder is not tokformer's own; plug-ins add theirs through the ``tokformer.formats`` entry-point
group (a module that calls :func:`register_format`).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokformer import plugins

if TYPE_CHECKING:  # a Format's loader returns them; the store itself builds neither
    from torch import nn

    from tokformer.runtime.task import Task
    from tokformer.store.source import Source

ENTRY_POINT_GROUP = "tokformer.formats"
_FORMATS: dict[str, Format] = {}
_discovered = False
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Format:
    """How to recognise and read one foreign format.

    Attributes:
        name: short name, the ``Source.kind`` of what it claims (``"hf"``, ``"timm"``).
        description: what it is, for messages ("a Hugging Face causal-LM folder").
        claims_config: whether a folder's parsed ``config.json`` is of this format.
        claims_file: whether a lone file (no folder) is of this format; None: the format is folders only.
        load: the tokformer task and model (not yet on a device) of a source of this format; None when
            the format can only start a fine-tuning run (a task's ``adopt_foreign`` reads it).
    """

    name: str
    description: str
    claims_config: Callable[[dict[str, Any]], bool]
    claims_file: Callable[[Path], bool] | None = None
    load: Callable[[Source], tuple[Task, nn.Module]] | None = None


def register_format(fmt: Format) -> Format:
    """Make ``fmt`` known to :func:`tokformer.store.describe` and the loader; a name is taken once."""
    existing = _FORMATS.get(fmt.name)
    if existing is not None and existing.description != fmt.description:
        raise ValueError(f"format name {fmt.name!r} is already taken by {existing.description}")
    _FORMATS[fmt.name] = fmt
    return fmt


def _discover() -> None:
    """Import the built-in readers (by name: the store sits below interop) and the plug-ins, once."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    try:
        importlib.import_module("tokformer.interop")
    except ImportError as e:  # an installation without interop's dependencies: tokformer's own formats still load
        _log.warning("tokformer.interop failed to import (%s): other libraries' folders cannot be read", e)
    points = [p for p in entry_points(group=ENTRY_POINT_GROUP) if p.name not in _FORMATS]
    for _ in plugins.load_entry_points(ENTRY_POINT_GROUP, points, "format"):
        pass  # a plug-in module registers its formats when imported


def formats() -> list[Format]:
    """Every registered format, built-in readers first."""
    _discover()
    return list(_FORMATS.values())


def get_format(name: str) -> Format:
    _discover()
    return _FORMATS[name]
