"""Tokenizers by name: a decorator for our own, entry points for everybody else's.

A third-party package makes its tokenizer usable by name, with no change to tokformer,
by declaring an entry point in the ``tokformer.tokenizers`` group::

    [project.entry-points."tokformer.tokenizers"]
    geo = "my_package.geo:GeoTokenizer"

Entry points are looked up lazily, only for a name not registered in-process, so
importing tokformer never imports every installed plugin.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path

from tokformer import plugins
from tokformer.tokenizers.base import Tokenizer, TokenizerError, read_config

ENTRY_POINT_GROUP = "tokformer.tokenizers"

_REGISTRY: dict[str, type[Tokenizer]] = {}


def register_tokenizer(name: str) -> Callable[[type[Tokenizer]], type[Tokenizer]]:
    """Class decorator: make a :class:`Tokenizer` subclass available as ``name``."""

    def decorate(cls: type[Tokenizer]) -> type[Tokenizer]:
        if not (isinstance(cls, type) and issubclass(cls, Tokenizer)):
            raise TypeError(f"@register_tokenizer({name!r}) needs a Tokenizer subclass, got {cls!r}")
        plugins.register(_REGISTRY, "tokenizer", name, cls)
        cls.type_name = name
        return cls

    return decorate


def import_builtin_tokenizers() -> None:
    """Import every module of ``tokformer.tokenizers`` so the built-in tokenizers register.

    Modules are imported on demand, not when tokformer is imported: the image tokenizer
    pulls in timm, the graph tokenizer scipy, and a text-only user should pay for neither.
    """
    package = importlib.import_module("tokformer.tokenizers")
    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{module.name}")


def get_tokenizer_class(name: str) -> type[Tokenizer]:
    """The tokenizer class registered as ``name``: in-process, built in, or through an entry point."""
    if name not in _REGISTRY:
        import_builtin_tokenizers()
    if name not in _REGISTRY:
        points = [p for p in entry_points(group=ENTRY_POINT_GROUP) if p.name == name]
        for point_name, cls in plugins.load_entry_points(ENTRY_POINT_GROUP, points, "tokenizer"):
            if not (isinstance(cls, type) and issubclass(cls, Tokenizer)):
                raise TokenizerError(f"entry point {point_name!r} of {ENTRY_POINT_GROUP} is not a Tokenizer subclass")
            # The plugin may not have used the decorator: register it under its entry-point name.
            if point_name not in _REGISTRY:
                register_tokenizer(point_name)(cls)
    if name not in _REGISTRY:
        raise plugins.unknown(ENTRY_POINT_GROUP, "tokenizer", name, available_tokenizers(), TokenizerError)
    return _REGISTRY[name]


def available_tokenizers() -> list[str]:
    """Names of every registered, built-in and entry-point tokenizer, sorted."""
    import_builtin_tokenizers()
    return sorted({*_REGISTRY, *(point.name for point in entry_points(group=ENTRY_POINT_GROUP))})


def load_tokenizer(directory: str | Path) -> Tokenizer:
    """Load any saved tokenizer: ``tokenizer_config.json`` names its registered type."""
    path = Path(directory)
    return get_tokenizer_class(read_config(path)["type"]).load(path)
