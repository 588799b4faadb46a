"""Progress bars and log lines that do not tear each other apart.

Every long loop gets a tqdm bar (rate and ETA built in); log records go through
``tqdm.write`` so they print above the bar instead of through it.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from tqdm.auto import tqdm

LOGGER = "tokformer"


def progress(enabled: bool, **kwargs: Any) -> tqdm:
    """A tqdm bar on stderr, or a silent one (same API) when ``enabled`` is False."""
    return tqdm(disable=not enabled, file=sys.stderr, dynamic_ncols=True, **kwargs)


class _TqdmHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        tqdm.write(self.format(record), file=sys.stderr)


def configure_logging(quiet: bool) -> None:
    """Show tokformer's INFO lines (WARNING and above only when ``quiet``), bar-safe.

    The CLI calls this; library users keep whatever logging setup they have.
    """
    logger = logging.getLogger(LOGGER)
    logger.handlers = [h for h in logger.handlers if not isinstance(h, _TqdmHandler)]
    handler = _TqdmHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING if quiet else logging.INFO)
    logger.propagate = False
