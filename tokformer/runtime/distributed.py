"""Processes and devices: torchrun's environment -> a process group and this rank's device.

``tokformer train`` is the same command with one process or under ``torchrun``: when
``WORLD_SIZE`` > 1 a process group is created (nccl on CUDA, gloo otherwise) and each
process takes GPU ``LOCAL_RANK``. Only rank 0 writes files and prints.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from tokformer.errors import ConfigError


@dataclass(frozen=True)
class Dist:
    rank: int
    world: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world > 1


def select_device(name: str, local_rank: int = 0) -> torch.device:
    """``auto`` picks cuda, then mps, then cpu; an explicit device must exist."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", local_rank)
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError as e:
        raise ConfigError(f"device '{name}' is not a device; use auto, cpu, cuda, cuda:N or mps") from e
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError("device 'cuda' requested but CUDA is not available; use --device cpu or auto")
        if device.index is None:
            device = torch.device("cuda", local_rank)
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("device 'mps' requested but MPS is not available; use --device cpu or auto")
    return device


def launch_env() -> tuple[int, int, int]:
    """``(rank, world, local_rank)`` as torchrun set them (``(0, 1, 0)`` outside torchrun).

    The one place that reads torchrun's environment: the engine turns it into a :class:`Dist`
    that tasks receive in ``setup``; code that runs before any process group exists (the CLI's
    logging setup) asks here.
    """
    env = os.environ
    return int(env.get("RANK", "0")), int(env.get("WORLD_SIZE", "1")), int(env.get("LOCAL_RANK", "0"))


def local(device: str | torch.device = "cpu") -> Dist:
    """A one-process :class:`Dist` on ``device``: for running a task's hooks outside training."""
    return Dist(0, 1, 0, torch.device(device))


@contextlib.contextmanager
def process_group(device_name: str) -> Iterator[Dist]:
    """This process's place in the job; creates and tears down the group under torchrun."""
    rank, world, local_rank = launch_env()
    device = select_device(device_name, local_rank)
    if world == 1:
        yield Dist(0, 1, 0, device)
        return
    if not faulthandler.is_enabled():
        # torchrun reports a worker killed by a signal (SIGABRT from a C++ library, SIGSEGV) only by its
        # number; this rank then prints each thread's Python stack first, so the report says where
        faulthandler.enable()
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        yield Dist(rank, world, local_rank, device)
    finally:
        dist.destroy_process_group()


def all_sum(values: torch.Tensor, d: Dist) -> torch.Tensor:
    """Sum a float tensor over all processes (identity for one process)."""
    if d.active:
        values = values.to(d.device)
        dist.all_reduce(values)
    return values.cpu()


def broadcast(value: Any, d: Dist) -> Any:
    """Rank 0's ``value`` on every rank (any picklable object, in memory only)."""
    if not d.active:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather(value: Any, d: Dist) -> list[Any]:
    """Every rank's ``value``, in rank order, on every rank (in memory only)."""
    if not d.active:
        return [value]
    out: list[Any] = [None] * d.world
    dist.all_gather_object(out, value)
    return out


def barrier(d: Dist) -> None:
    if d.active:
        dist.barrier()
