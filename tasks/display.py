"""What the tasks print on a terminal: a prediction's ranked classes."""

from __future__ import annotations


def show_ranked(source: str, ranked: list[tuple[str, float]]) -> str:
    """``"SOURCE: class p, class p, ..."``: the ``tokformer predict`` line of a classifier's top classes."""
    return f"{source}: " + ", ".join(f"{name} {p:.3f}" for name, p in ranked)
