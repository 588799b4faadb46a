"""Metric averaging and recording: JSONL always, TensorBoard when installed, PNG plots.

``metrics.jsonl`` holds one record per line: ``{"split": "train"|"eval", "step": ..., name: value}``.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

from tokformer import files
from tokformer.atomic import write_atomic, write_text_atomic
from tokformer.runtime.distributed import Dist, all_sum
from tokformer.runtime.task import StepOutput

METRICS_FILE = "metrics.jsonl"


class MeanMeter:
    """Sums (value, count) pairs per name; ``reduce`` averages them across processes."""

    def __init__(self) -> None:
        self.sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])

    def add(self, name: str, total: torch.Tensor | float, count: torch.Tensor | float) -> None:
        entry = self.sums[name]
        entry[0] += float(total)
        entry[1] += float(count)

    def add_step(self, out: StepOutput) -> None:
        self.add("loss", out.loss.detach().float() * out.count, out.count)
        for name, (total, count) in out.metrics.items():
            self.add(name, total, count)

    def reduce(self, d: Dist) -> dict[str, float]:
        """Means over everything added on every process (a collective: all ranks call it)."""
        names = sorted(self.sums)
        totals = all_sum(torch.tensor([self.sums[n] for n in names], dtype=torch.float64).reshape(-1, 2), d)
        return {n: (t / c if c else math.nan) for n, (t, c) in zip(names, totals.tolist(), strict=True)}


class MetricLog:
    """Appends records to ``metrics.jsonl`` (and TensorBoard if it is installed)."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / METRICS_FILE
        self.tb = _tensorboard_writer(run_dir / "tensorboard")

    def write(self, split: str, step: int, values: dict[str, float]) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"split": split, "step": step, **values}) + "\n")
        if self.tb is not None:
            for name, value in values.items():
                self.tb.add_scalar(f"{split}/{name}", value, step)

    def truncate_after(self, step: int) -> None:
        """Forget records past ``step``: a resumed run redoes those steps and logs them again."""
        if self.path.exists():
            kept = [line for line in read_metrics(self.path.parent) if line["step"] <= step]
            # whole or not at all: a full disk while it is rewritten must not cost the run its history
            write_text_atomic(self.path, "".join(json.dumps(r) + "\n" for r in kept))

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def _tensorboard_writer(path: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is optional
        return None
    return SummaryWriter(str(path))


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The records of ``metrics.jsonl``; a line cut short by a crash, or damaged (not JSON, not a record
    with a step number), is skipped: the log is a record of the run, never a reason to stop it. A log that
    cannot be read at all (a pipe in its place, which would block; no permission) is a one-line DataError:
    a resume rewrites the log, and would lose what an unreadable one holds."""
    path = run_dir / METRICS_FILE
    if not path.exists():
        return []
    records = []
    for line in files.read_bytes(path).decode("utf-8", errors="replace").splitlines():
        try:
            record = files.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int):
            records.append(record)
    return records


def plot_metrics(run_dir: Path) -> list[Path]:
    """One PNG per metric under ``plots/``, train and eval curves together; returns the files."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(run_dir)
    series: dict[str, dict[str, tuple[list[int], list[float]]]] = defaultdict(dict)
    for r in records:
        for name, value in r.items():
            if name in ("split", "step") or not isinstance(value, (int, float)):
                continue
            xs, ys = series[name].setdefault(r["split"], ([], []))
            xs.append(r["step"])
            ys.append(value)
    out = run_dir / "plots"
    out.mkdir(exist_ok=True)
    written = []
    for name, splits in sorted(series.items()):
        fig, ax = plt.subplots(figsize=(6, 4))
        for split, (xs, ys) in sorted(splits.items()):
            ax.plot(xs, ys, label=split, marker="o" if split == "eval" else None, markersize=3)
        ax.set_xlabel("step")
        ax.set_ylabel(name)
        if name == "loss" and all(y > 0 for _, ys in splits.values() for y in ys):
            ax.set_yscale("log")
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        path = out / f"{name}.png"
        save_figure(fig, path, dpi=100)
        written.append(path)
    return written


def save_figure(fig: Any, path: Path, dpi: int) -> None:
    """Write matplotlib figure ``fig`` to ``path`` (its format from the suffix) whole or not at all
    (:func:`~tokformer.atomic.write_atomic`: a crash or a full disk leaves the previous figure),
    then close it, whether or not the write succeeded: a figure left open holds its memory."""
    import matplotlib.pyplot as plt

    try:
        write_atomic(path, lambda tmp: fig.savefig(tmp, dpi=dpi))
    finally:
        plt.close(fig)
