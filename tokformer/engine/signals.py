"""Turn Ctrl-C (SIGINT) and SIGTERM (schedulers' preemption) into "save and stop".

The signal handler only sets a flag; the training loop checks it between optimizer
steps, so the checkpoint it then writes is of a consistent state. A second signal
interrupts at once.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


class StopFlag:
    def __init__(self) -> None:
        self.requested = False


@contextlib.contextmanager
def stop_on_signals() -> Iterator[StopFlag]:
    """A flag raised by SIGINT/SIGTERM while the block runs; handlers restored after."""
    flag = StopFlag()
    if threading.current_thread() is not threading.main_thread():  # signals only reach the main thread
        yield flag
        return

    def handle(signum: int, frame: FrameType | None) -> None:
        if flag.requested:
            raise KeyboardInterrupt
        flag.requested = True

    previous = {s: signal.signal(s, handle) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield flag
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
