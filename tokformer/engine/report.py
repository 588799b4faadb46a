"""An evaluation's metrics beside trivial baselines on the same data: what `tokformer evaluate`
and the end of `tokformer train` print.

A metric alone says little (is a perplexity of 80 good? an accuracy of 0.6?); next to
what a model without learning gets on the same examples (a unigram model, copying the
source, the majority class) it says whether training worked. The baselines come from
the task (:meth:`tokformer.runtime.task.Task.baselines`); this module only lays them out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tokformer.runtime.task import Baselines


@dataclass
class Evaluation:
    """A model's metrics on some data, and the task's baselines on the same data.

    Attributes:
        metrics: the model's ``loss`` and the task's metrics.
        baselines: baseline description (what it is, what it was fit on) -> its metrics,
            named like the model's.
        data: what was evaluated (e.g. ``held-out split``, a path, ``best checkpoint (step 300)``).
    """

    metrics: dict[str, float]
    baselines: Baselines = field(default_factory=dict)
    data: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` form: ``{"data": ..., "metrics": {name: value}, "baselines": {baseline: {name: value}}}``."""
        return {"data": self.data, "metrics": dict(self.metrics), "baselines": {k: dict(v) for k, v in
                                                                                self.baselines.items()}}

    def table(self) -> str:
        """One row per metric (and per further baseline of a metric): metric | model | baseline | which."""
        rows = [("metric", "model", "baseline", "which baseline")]
        for name, value in self.metrics.items():
            scored = [(which, values[name]) for which, values in self.baselines.items() if name in values]
            first = scored[0] if scored else ("", None)
            rows.append((name, _number(value), _number(first[1]), first[0]))
            rows += [("", "", _number(v), which) for which, v in scored[1:]]
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths, strict=True)) + "  " + row[3]
                 for row in rows]
        title = f"evaluation on {self.data}" if self.data else "evaluation"
        return "\n".join([title, *(line.rstrip() for line in lines)])


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def over_seeds(values: Sequence[float], digits: int = 3, unit: str = "") -> str:
    """One table cell for a metric over seeds: ``mean ± sample std (ddof 1) (each seed)``, so a reader
    sees the spread and every run, not a mean alone; one seed is shown alone, none as ``—``."""
    if not values:
        return "—"
    f = lambda v: f"{v:.{digits}f}{unit}"  # noqa: E731
    mean = sum(values) / len(values)
    if len(values) == 1:
        return f(mean)
    std = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
    return f"{f(mean)} ± {f(std)} ({' / '.join(f(v) for v in values)})"
