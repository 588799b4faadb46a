"""Shared fixtures: a device parameter that covers CUDA when one is present, one thread, seeding, signal
handlers every test gives back, a tiny sort model folder, a disk that fills up, and named pipes that cannot
hang a test."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    # xdist runs one test process per core: one torch thread each, for them and the subprocesses
    # they start (processes with several threads each on the same cores spin-wait on each other)
    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")),
]


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> torch.device:
    return torch.device(request.param)


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One intra-op thread for the test: matches subprocesses run with OMP_NUM_THREADS=1, and
    avoids oversubscribing a small or shared machine (several times faster there)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True, scope="session")
def _scratch_for_subprocesses(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The temporary directory of every process a test starts, inside pytest's own (kept for the last
    three sessions, then removed): torchrun leaves a ``torchelastic_*`` folder in ``$TMPDIR`` per job,
    800 of them in /tmp per CI run, and a process a test kills cannot remove its scratch."""
    os.environ["TMPDIR"] = str(tmp_path_factory.mktemp("tmpdir"))


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _signal_handlers_given_back() -> Iterator[None]:
    """Every test leaves the handlers of Ctrl-C and SIGTERM as it found them: one left behind decides what
    those signals do in every later test of its process (CI once saw a test's own Ctrl-C swallowed)."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    after = {s: signal.getsignal(s) for s in before}
    assert after == before, f"the test left signal handlers changed: {before} -> {after}"


@pytest.fixture(scope="module")
def sort_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny sort run's model folder (one per test module: a test may not change it, only a copy)."""
    from tiny import TINY, TRAIN

    import tokformer
    from tokformer.engine import load_run, train

    root = tmp_path_factory.mktemp("sort_folder")
    task, model = load_run(train("sort", run_dir=str(root / "run"), **TINY["sort"], **TRAIN).run_dir)
    return tokformer.save_pretrained(task, model, root / "folder")


@pytest.fixture
def fill_disk(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """A call that fills the disk: from then on, ``Path.write_text`` and a matplotlib figure's ``savefig``
    write half of what they are given and fail as a full disk does, so a file written in place is left
    cut short."""
    import matplotlib.figure

    def no_space(path: object) -> OSError:
        return OSError(errno.ENOSPC, "No space left on device", str(path))

    def write_half(path: Path, data: str, encoding: str | None = None, errors: str | None = None,
                   newline: str | None = None) -> int:
        with open(path, "w", encoding=encoding, errors=errors, newline=newline) as f:
            f.write(data[: len(data) // 2])
        raise no_space(path)

    def save_half(fig: object, fname: str | os.PathLike, **kwargs: object) -> None:
        Path(fname).write_bytes(b"\x89PNG\r\n")  # a PNG's signature and nothing after it
        raise no_space(fname)

    def fill() -> None:
        monkeypatch.setattr(Path, "write_text", write_half)
        monkeypatch.setattr(matplotlib.figure.Figure, "savefig", save_half)

    return fill


PIPE_PATIENCE_S = 5.0  # code that does not open a pipe is done at once; one that opens it waits this long


@pytest.fixture
def named_pipe() -> Iterator[Callable[[Path], Path]]:
    """``named_pipe(path)`` makes a FIFO at ``path``. Opening one waits for the other end forever: code that
    opens it (the bug such a test catches) would hang the suite, so after ``PIPE_PATIENCE_S`` a helper opens
    the other end and closes it, again and again until the test ends: a waiting reader reads nothing, a
    waiting writer gets a broken pipe, and a reader found waiting fails the test when it ends (one that reads
    nothing might well pass). Skipped where there are no FIFOs."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("named pipes are POSIX")
    done = threading.Event()
    helpers, waited_on = [], []

    def unblock(path: Path) -> None:
        done.wait(PIPE_PATIENCE_S)
        while not done.is_set():
            with contextlib.suppress(OSError):  # ENXIO: no reader waits; or the pipe is gone
                writer = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # opens only if a reader waits
                if stat.S_ISFIFO(os.fstat(writer).st_mode):  # not a file written in its place
                    waited_on.append(path)
                os.close(writer)
            with contextlib.suppress(OSError):  # a writer waiting opens now, and writes to no reader
                os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
            done.wait(0.05)

    def make(path: Path) -> Path:
        os.mkfifo(path)
        helpers.append(threading.Thread(target=unblock, args=(path,), daemon=True))
        helpers[-1].start()
        return path

    yield make
    done.set()
    for helper in helpers:
        helper.join()
    assert not waited_on, f"{waited_on[0]} was opened and waited on"
