"""Where a measurement ran: the CPU, the cores this process may use, the load and the library versions.

Timings from different machines, or from one machine shared with another job, do not compare (on a
2-core machine one neighbour halves a result), so every table of times says where it was taken.
The benchmarks (``benchmarks/harness.py``) and the birds sweep's per-run records both use these.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def cpuinfo_lines() -> list[str]:
    """The lines of ``/proc/cpuinfo`` (none where it is missing: not Linux)."""
    path = Path("/proc/cpuinfo")
    return path.read_text().splitlines() if path.exists() else []


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or the architecture where that file is missing."""
    for line in cpuinfo_lines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


#: The most worker processes one option may start (DataLoader workers, tokenizing processes). Each is a
#: process of its own: a typo (``--workers 100000``) forked until the kernel's OOM killer stepped in, and
#: more processes than cores never makes CPU-bound work faster.
MAX_WORKERS = 64


def cores() -> int:
    """Cores this process may run on (the affinity mask, not the host's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def load_average() -> str:
    """The 1, 5 and 15 minute load averages: a neighbour on a 2-core machine halves a timing."""
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def cpu_ticks() -> tuple[int, int] | None:
    """The whole machine's CPU time since boot in clock ticks, as (stolen, total), from ``/proc/stat``'s
    ``cpu`` line; None where that file is missing or unreadable (not Linux)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        ticks = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal (guests: in user)
    except (OSError, ValueError):
        return None
    if len(ticks) < 8 or fields[0] != "cpu":  # an empty file has no fields[0]
        return None
    return ticks[7], sum(ticks)


def stolen_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share of the machine's CPU time between two :func:`cpu_ticks` readings that the hypervisor gave
    to other virtual machines (steal); None without both readings. A busy host slows a run as a neighbour
    on its cores would, and the load average does not show it: a birds run here went ten times slower
    than the same run earlier at a 1-minute load of 1.9, while 70-86% of the CPU time was stolen."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def versions(packages: Sequence[str]) -> str:
    """``python 3.11.7, torch 2.14.1, ...`` for the packages installed (missing ones are skipped)."""
    found = [f"python {platform.python_version()}"]
    for name in packages:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found.append(f"{name} {importlib.metadata.version(name)}")
    return ", ".join(found)


def snapshot(packages: Sequence[str] = ("torch",)) -> dict[str, Any]:
    """This process's machine now, as a JSON record: CPU, cores, torch threads, the 1-minute load average
    and the library versions (the record a measured run keeps beside its time)."""
    import torch

    return {"cpu": cpu_model(), "cores": cores(), "threads": torch.get_num_threads(),
            "load": round(os.getloadavg()[0], 2), "versions": versions(packages)}
