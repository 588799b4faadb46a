"""Watching held-out progress across evaluations: the overfitting warning and early stopping.

A run on a small dataset passes its best held-out loss long before its step budget ends
and then only memorises the training set. :class:`Watch` notices it (the held-out loss
rose at several evaluations in a row) and says so once per rise, and with a patience it
stops the run after that many evaluations without a better best metric. Its state is
part of every checkpoint, so a resumed run warns and stops exactly where the
uninterrupted one would.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

#: Evaluations in a row with a higher held-out loss than the one before that make the warning.
RISES = 3
#: Early-stopping patience when the data are the user's and no ``early_stop`` was given.
DEFAULT_PATIENCE = 3


@dataclass
class Watch:
    """Counters over the evaluations of one run.

    Attributes:
        patience: evaluations without a better best metric before stopping; 0 never stops.
        stale: evaluations since the best metric last improved.
        rises: consecutive evaluations whose loss was higher than the previous one.
        last_loss: the previous evaluation's loss.
        low_loss / low_step: the lowest loss so far and its step.
        rise_step: the step of the evaluation the current rise started from.
    """

    patience: int
    stale: int = 0
    rises: int = 0
    last_loss: float | None = None
    low_loss: float | None = None
    low_step: int = 0
    rise_step: int = 0

    def update(self, step: int, loss: float | None, improved: bool) -> str | None:
        """Count one evaluation at ``step``; returns the overfitting warning when this
        evaluation is the ``RISES``-th rise in a row, else None."""
        self.stale = 0 if improved else self.stale + 1
        if loss is None or not math.isfinite(loss):
            return None
        if self.last_loss is not None and loss > self.last_loss:
            self.rises += 1
        else:
            self.rises, self.rise_step = 0, step
        self.last_loss = loss
        if self.low_loss is None or loss < self.low_loss:
            self.low_loss, self.low_step = loss, step
        if self.rises != RISES:
            return None
        return (f"held-out loss has risen for {self.rises} evaluations since step {self.rise_step} "
                f"(best {self.low_loss:.4g} at step {self.low_step}): the model is overfitting; see --early-stop")

    @property
    def should_stop(self) -> bool:
        return self.patience > 0 and self.stale >= self.patience

    def state(self) -> dict[str, Any]:
        """JSON for the checkpoint (the patience is the run's config, not state)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "patience"}

    @classmethod
    def restore(cls, patience: int, state: dict[str, Any] | None) -> Watch:
        """The watch of a resumed run; a checkpoint from before watches existed starts afresh."""
        return cls(patience, **(state or {}))
