"""One benchmark methodology for every script in ``benchmarks/``.

* **Interleaved repeats.** :func:`interleave` runs every case once per round, in turn,
  for at least :data:`MIN_REPEATS` rounds, so a neighbour that slows the machine for a
  while slows every case alike; :class:`Timing` reports the median with the min-max.
* **First pass.** Each call receives its round number, so a case can read the round's
  own slice of data and no timing comes from a cache warmed by an earlier round.
* **Where it ran.** :func:`machine_line` names the CPU, cores, threads, load average
  (before and after: a run with a neighbour is visible as such) and library versions;
  :func:`peak_line` puts the theoretical fp32 peak (cores x FLOP/cycle x clock) beside a
  measured matmul rate, at one thread and at all of them.
* **Threads.** :func:`thread_counts` is ``[1, all cores]``; :func:`torch_threads` sets
  torch's intra-op threads for a block.

Scripts import it as ``from harness import ...`` (they run as ``python benchmarks/x.py``,
which puts this folder on ``sys.path``).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tokformer.engine import over_seeds  # noqa: F401  (the scripts' table cell, re-exported)
from tokformer.machine import (  # noqa: F401  (re-exported)
    cores,
    cpu_model,
    cpu_ticks,
    cpuinfo_lines,
    load_average,
    stolen_share,
    versions,
)

MIN_REPEATS = 5
RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Timing:
    """Seconds of one case over the rounds of an interleaved run."""

    seconds: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    def rate(self, work: float) -> tuple[float, float, float]:
        """``work`` per second: (median, slowest, fastest)."""
        return work / self.median, work / max(self.seconds), work / min(self.seconds)

    def rate_cell(self, work: float, fmt: str = ".1f") -> str:
        """``median (min-max)`` of ``work`` per second, for a table cell."""
        mid, low, high = self.rate(work)
        return f"{mid:{fmt}} ({low:{fmt}}-{high:{fmt}})"

    def seconds_cell(self, fmt: str = ".3f") -> str:
        return f"{self.median:{fmt}} s ({min(self.seconds):{fmt}}-{max(self.seconds):{fmt}})"


def ratio_cell(ours: Timing, reference: Timing) -> str:
    """Reference time / our time (> 1: ours faster), from medians, with the range of per-round ratios."""
    per_round = [r / o for o, r in zip(ours.seconds, reference.seconds, strict=True)]
    return f"{reference.median / ours.median:.2f}x ({min(per_round):.2f}-{max(per_round):.2f})"


def interleave(
    cases: Mapping[str, Callable[[int], object]],
    repeats: int = MIN_REPEATS,
    *,
    warmup: bool = True,
    sync: Callable[[], None] = lambda: None,
    settle: Callable[[], None] = lambda: None,
) -> dict[str, Timing]:
    """Time ``case(round)`` for every case, round after round; ``warmup`` runs round -1 untimed first.

    A case that must not see warm data uses its round number to pick data it has not
    seen (round -1 is the warm-up's own). ``sync`` waits for queued device work (CUDA); ``settle``
    runs untimed before each case (``gc.collect``: a case that makes millions of objects should not
    leave the one after it to pay for their collection).
    """
    if repeats < MIN_REPEATS:
        raise ValueError(f"at least {MIN_REPEATS} repeats, got {repeats}")
    if warmup:
        for case in cases.values():
            case(-1)
            sync()
    seconds: dict[str, list[float]] = {name: [] for name in cases}
    for round_ in range(repeats):
        for name, case in cases.items():
            settle()
            sync()
            start = time.perf_counter()
            case(round_)
            sync()
            seconds[name].append(time.perf_counter() - start)
    return {name: Timing(tuple(s)) for name, s in seconds.items()}


# ----------------------------------------------------------------------------- threads


def thread_counts() -> list[int]:
    """One thread and all cores (once, on a one-core machine)."""
    return sorted({1, cores()})


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run a block with ``n`` torch intra-op threads, restoring the previous count."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# ----------------------------------------------------------------------------- the machine


class Machine:
    """The line every results file carries; create it before the runs and print it after them."""

    def __init__(self, packages: Sequence[str] = ("torch",)) -> None:
        self.packages = tuple(packages)
        self.load_before, self.ticks_before = load_average(), cpu_ticks()
        self.started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")

    def line(self, threads: str) -> str:
        stolen = stolen_share(self.ticks_before, cpu_ticks())
        steal = "" if stolen is None else f"; {100 * stolen:.0f}% of the CPU time stolen by the host meanwhile"
        return (
            f"Machine: {cpu_model()}, {cores()} cores, {threads}; load average {self.load_before} before and "
            f"{load_average()} after (1, 5, 15 min){steal}; {versions(self.packages)}; run {self.started}."
        )


def machine_cpu(line: str) -> str:
    """The CPU model a :meth:`Machine.line` names."""
    return line.removeprefix("Machine: ").split(",", 1)[0]


def _cpu_field(name: str) -> str | None:
    for line in cpuinfo_lines():
        if line.startswith(name):
            return line.split(":", 1)[1].strip()
    return None


def fp32_flops_per_cycle() -> tuple[int, str]:
    """fp32 FLOP per cycle per core from the CPU's vector units, and how that was decided.

    Two FMA pipes on every x86 core since Haswell and Zen 2; each FMA is 2 FLOP per lane.
    256-bit pipes: 8 lanes, 32 FLOP/cycle. Intel's AVX-512 server cores have two 512-bit
    pipes: 64. AMD before Zen 5 runs AVX-512 on its 256-bit pipes (32), Zen 5 (family 26) on
    512-bit ones (64). Without FMA: 2 pipes x 4 SSE lanes x 1 FLOP = 8.
    """
    flags = set((_cpu_field("flags") or "").split())
    vendor = _cpu_field("vendor_id") or ""
    family = int(_cpu_field("cpu family") or 0)
    if "avx512f" in flags and (vendor == "GenuineIntel" or family >= 26):
        return 64, "2 x 512-bit FMA pipes"
    if "fma" in flags:
        return 32, "2 x 256-bit FMA pipes"
    return 8, "SSE, no FMA"


def clock_hz() -> tuple[float, str]:
    """The core clock: the kernel's maximum frequency where exposed, else ``/proc/cpuinfo``'s MHz."""
    max_freq = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    if max_freq.exists():
        return int(max_freq.read_text()) * 1e3, "cpufreq maximum"
    mhz = _cpu_field("cpu MHz")
    return (float(mhz) * 1e6, "/proc/cpuinfo, nominal under a hypervisor") if mhz else (0.0, "unknown")


def theoretical_peak(threads: int) -> tuple[float, str]:
    """fp32 FLOP/s of ``threads`` cores at full vector width, and the product that gives it."""
    per_cycle, why = fp32_flops_per_cycle()
    hz, source = clock_hz()
    return threads * per_cycle * hz, f"{threads} x {per_cycle} FLOP/cycle ({why}) x {hz / 1e9:.2f} GHz ({source})"


def matmul_rate(threads: int, n: int = 2048, repeats: int = MIN_REPEATS) -> Timing:
    """Seconds of an ``n x n`` fp32 matmul on ``threads`` torch threads (``2 n^3`` FLOP each)."""
    import torch

    with torch_threads(threads):
        a, b = torch.randn(n, n), torch.randn(n, n)
        return interleave({"matmul": lambda _: a @ b}, repeats)["matmul"]


def peak_line(threads: int, n: int = 2048) -> tuple[float, str]:
    """Measured fp32 matmul FLOP/s at ``threads`` and the sentence that puts it beside the theoretical peak."""
    measured = 2 * n**3 / matmul_rate(threads, n).median
    peak, product = theoretical_peak(threads)
    share = f" ({100 * measured / peak:.0f}% of it)" if peak else ""
    return measured, (
        f"fp32 peak at {threads} thread(s): theoretical {peak / 1e9:.0f} GFLOP/s = {product}; "
        f"measured {measured / 1e9:.0f} GFLOP/s{share} (median {n}^3 matmul)"
    )


def write_results(name: str, text: str) -> Path:
    """Write ``benchmarks/results/<name>`` and print it."""
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / name
    path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    return path


def latest_per_process(machine_lines: list[str]) -> list[str]:
    """Results appended row by row carry a :class:`Machine` line each, whose load-after changes from row to
    row: keep one line per process that wrote them (its start time), the latest, with its row count."""
    latest: dict[str, str] = {}
    counts: dict[str, int] = {}
    for line in machine_lines:
        start = line.rsplit("; run ", 1)[-1]
        latest[start], counts[start] = line, counts.get(start, 0) + 1
    return [f"{line} ({counts[start]} rows)" for start, line in latest.items()]


def read_jsonl(path: Path) -> list[dict]:
    """The rows a results script appended to ``path`` so far ([] before its first)."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []




def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
