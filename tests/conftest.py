"""Shared fixtures: a device parameter that covers CUDA when one is present, one thread, seeding, a
tiny sort model folder, and a disk that fills up."""

from __future__ import annotations

import errno
import os
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


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


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
