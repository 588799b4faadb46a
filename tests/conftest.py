"""Shared fixtures: a device parameter that covers CUDA when one is present."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

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
