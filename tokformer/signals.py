"""Turn Ctrl-C (SIGINT) and SIGTERM (schedulers' preemption) into "save and stop", hold them back
across a step that must not be cut in two, and leave stopping to the parent in worker processes.

The signal handler only sets a flag; the training loop checks it between optimizer
steps, so the checkpoint it then writes is of a consistent state. A second Ctrl-C
interrupts at once; other repeats are ignored (torchrun answers Ctrl-C by sending its
workers SIGTERM, after the terminal already sent them SIGINT). The flag remembers
which signal came, so the command can exit with the status a shell or a cluster
scheduler expects of it (128 + the signal number: 130 for SIGINT, 143 for SIGTERM)
after saving.
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import threading
from collections.abc import Iterator
from types import FrameType

from tokformer.errors import Interrupted


class StopFlag:
    """Whether a stop was asked for, and by which signal (``signum``, None until one came)."""

    def __init__(self) -> None:
        self.signum: int | None = None

    @property
    def requested(self) -> bool:
        return self.signum is not None


@contextlib.contextmanager
def stop_on_signals() -> Iterator[StopFlag]:
    """A flag raised by SIGINT/SIGTERM while the block runs; handlers restored after."""
    flag = StopFlag()
    if threading.current_thread() is not threading.main_thread():  # signals only reach the main thread
        yield flag
        return

    def handle(signum: int, frame: FrameType | None) -> None:
        if flag.signum == signal.SIGINT == signum:  # Ctrl-C twice: the user wants out now
            raise KeyboardInterrupt
        if not flag.requested:  # other repeats (torchrun forwarding SIGTERM after Ctrl-C): stopping already
            flag.signum = signum

    previous = {s: signal.signal(s, handle) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield flag
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises :class:`~tokformer.errors.Interrupted` while the block runs, as Ctrl-C raises
    KeyboardInterrupt: before the training loop takes the signals over (:func:`stop_on_signals`), a
    scheduler's stop must still clean up (a half-made run removed, the run it replaced back, the lock
    released), which the default action, killing the process, does not."""
    if threading.current_thread() is not threading.main_thread():  # signals only reach the main thread
        yield
        return

    def handle(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(signum)

    previous = signal.signal(signal.SIGTERM, handle)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def held_back() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM back while the block runs; one that came meanwhile acts as the block ends.

    Python runs a signal's handler between any two bytecodes, so an exception it raises
    (KeyboardInterrupt, :class:`~tokformer.errors.Interrupted`) can land between making a thing and
    recording its name: ``tmp = tempfile.mkdtemp(...)`` interrupted after the ``mkdir`` leaves a
    folder no clean-up knows of. Here the handlers only note the signal, and it is raised again, to the
    handlers that were in place, once the name is kept. (Not the process's signal mask: that holds a
    signal back from one thread only, and the kernel hands it to any other, an OpenMP or a pool thread,
    whose C handler still has the main thread run the Python one at once.)"""
    if threading.current_thread() is not threading.main_thread():  # handlers run on the main thread only
        yield
        return
    came: list[int] = []
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    previous = {s: h for s, h in previous.items() if h is not None}  # None: set from C, cannot be put back
    try:  # the recorders too: a signal landing between installing SIGINT's and SIGTERM's gives both back
        for s in previous:
            signal.signal(s, lambda signum, frame: came.append(signum))
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for signum in came:
            signal.raise_signal(signum)


def leave_stopping_to_the_parent() -> None:
    """For a worker process (a DataLoader's, a tokenizing pool's): ignore Ctrl-C and SIGTERM, which a
    terminal, ``timeout`` or a scheduler send to the whole process group, and die with the parent
    (Linux). The parent decides when work stops and shuts its workers down: a worker killed by the
    signal first made the parent's DataLoader fail (``DataLoader worker ... is killed by signal:
    Terminated``, an internal error before the stop checkpoint was written), and one killed half-way
    through sending a result leaves a process pool waiting for the rest of it forever."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # not the parent's handler, which fork copied


def data_worker_init(worker_id: int) -> None:
    """A DataLoader's ``worker_init_fn``: :func:`leave_stopping_to_the_parent`."""
    leave_stopping_to_the_parent()
