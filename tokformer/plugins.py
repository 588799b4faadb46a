"""Name registries with entry-point plug-ins: one behaviour for tasks and tokenizers alike.

Tasks (``tokformer.runtime.registry``) and tokenizers (``tokformer.tokenizers.registry``)
each keep a ``{name: class}`` table and find third-party classes through an entry-point
group. What happens around that is decided here, once: a name taken twice is an error, a
plug-in whose import fails is skipped with the same warning (it must not break the
built-ins or other plug-ins), and asking for an unknown name, or for the name of a broken
plug-in, gets the same kind of one-line error.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterable
from importlib.metadata import EntryPoint
from typing import Any, TypeVar

from tokformer.errors import UsageError

log = logging.getLogger(__name__)
C = TypeVar("C", bound=type)
# (entry-point group, name) -> why its plug-in failed to import, for the error when it is asked for
_BROKEN: dict[tuple[str, str], str] = {}


def register(table: dict[str, type], kind: str, name: str, cls: C) -> C:
    """``table[name] = cls``, unless another class (not a reload of the same one) holds the name."""
    existing = table.get(name)
    if existing is not None and existing.__qualname__ != cls.__qualname__:
        raise ValueError(f"{kind} name {name!r} is already taken by {existing.__module__}.{existing.__qualname__}")
    table[name] = cls
    return cls


def load_entry_points(group: str, points: Iterable[EntryPoint], kind: str) -> list[tuple[str, Any]]:
    """``(name, point.load())`` of every point of ``group`` that imports; one that fails is
    remembered and skipped with a warning naming it, so a broken plug-in never hides the others."""
    loaded = []
    for point in points:
        try:
            loaded.append((point.name, point.load()))
        except Exception as error:  # any import-time failure of someone else's package
            reason = f"{type(error).__name__}: {error}"
            _BROKEN[(group, point.name)] = reason
            log.warning("%s plug-in %r failed to import and is skipped: %s", kind, point.name, reason)
    return loaded


def unknown(group: str, kind: str, name: str, known: Iterable[str], error: type[UsageError]) -> UsageError:
    """The error for a name no class is registered under: its plug-in broke, or a typo (with the
    closest known name) and the list of known names."""
    broken = _BROKEN.get((group, name))
    if broken is not None:
        return error(f"{kind} {name!r} comes from a plug-in that failed to import ({broken}); "
                     "fix or uninstall that package")
    names = sorted(known)
    close = difflib.get_close_matches(name, names, n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    return error(f"unknown {kind} '{name}'.{hint} Known {kind}s: {', '.join(names) or '(none)'}")
