"""Numbers read from outside (config files, flags, records on disk), as finite floats or refused.

Core, so that every layer parses a number one way: the runtime's config and flags, the CLI, and the
tasks' own records (which may not import the runtime)."""

from __future__ import annotations

import math
from typing import Any

from tokformer.files import shown


def finite_float(value: Any) -> float:
    """``value`` (a number or a numeric string) as a finite float; ValueError saying why not.
    The one number parser of config files, -o, flags and the CLI's other float options."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected a number, got {shown(value)}")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"expected a number, got {shown(value)}") from None
    except OverflowError:  # an integer beyond a float's range (JSON and YAML read 10**400 whole)
        raise ValueError(f"{shown(value)} is not a finite number") from None
    if not math.isfinite(number):
        raise ValueError(f"{shown(value)} is not a finite number")
    return number
