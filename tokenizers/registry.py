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

from tokformer.tokenizers.base import Tokenizer, TokenizerError, read_config

ENTRY_POINT_GROUP = "tokformer.tokenizers"

_REGISTRY: dict[str, type[Tokenizer]] = {}


def register_tokenizer(name: str) -> Callable[[type[Tokenizer]], type[Tokenizer]]:
    """Class decorator: make a :class:`Tokenizer` subclass available as ``name``."""

    def decorate(cls: type[Tokenizer]) -> type[Tokenizer]:
        if not (isinstance(cls, type) and issubclass(cls, Tokenizer)):
            raise TypeError(f"@register_tokenizer({name!r}) needs a Tokenizer subclass, got {cls!r}")
        existing = _REGISTRY.get(name)
        if existing is not None and existing is not cls:
            taken_by = f"{existing.__module__}.{existing.__qualname__}"
            raise ValueError(f"tokenizer name {name!r} is already taken by {taken_by}")
        cls.type_name = name
        _REGISTRY[name] = cls
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
    if name in _REGISTRY:
        return _REGISTRY[name]
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name == name:
            cls = point.load()
            if not (isinstance(cls, type) and issubclass(cls, Tokenizer)):
                raise TokenizerError(f"entry point {point.value!r} for tokenizer {name!r} is not a Tokenizer subclass")
            # The plugin may not have used the decorator: register it under its entry-point name.
            return _REGISTRY.get(name) or register_tokenizer(name)(cls)
    raise TokenizerError(f"unknown tokenizer {name!r}; available: {', '.join(available_tokenizers()) or 'none'}")


def available_tokenizers() -> list[str]:
    """Names of every registered, built-in and entry-point tokenizer, sorted."""
    import_builtin_tokenizers()
    return sorted({*_REGISTRY, *(point.name for point in entry_points(group=ENTRY_POINT_GROUP))})


def load_tokenizer(directory: str | Path) -> Tokenizer:
    """Load any saved tokenizer: ``tokenizer_config.json`` names its registered type."""
    path = Path(directory)
    return get_tokenizer_class(read_config(path)["type"]).load(path)
