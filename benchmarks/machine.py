"""Where a benchmark ran, for the line every results file carries: CPU model and load average."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or the architecture where that file is missing."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def load_average() -> str:
    """The 1, 5 and 15 minute load averages: a neighbour on a 2-core machine halves a timing."""
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())
