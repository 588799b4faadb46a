"""Why positions matter, and how to read them: CSL graph classification, an ablation.

All 150 CSL graphs are 4-regular, so without positions every node token is identical and
the permutation-equivariant core cannot tell the 10 classes apart: chance is 10%. This
script trains ``tokformer train graph`` (through the library API, so the numbers are what
the CLI gives) for each setting of :data:`SETTINGS`: positions off, Laplacian
eigenvectors read linearly or by SignNet, with and without attention restricted to the
edges (with learned per-head biases), and eigenvectors + eigenvalues for reference.

Two modes:

* default: each setting on each of the 5 stratified folds (train 120 graphs, test 30);
  writes ``benchmarks/results/csl.md`` (mean ± std over folds, steps, parameters, wall time).
* ``--calibrate``: the choices (steps, which settings) are made on a validation split of
  the *training* folds of test fold 0 (train 90, validate 30), never on a test fold;
  writes ``benchmarks/results/csl-calibration.md``.

Usage::

    python benchmarks/csl_experiment.py [--steps 200] [--folds 5] [--workers 2] [--settings a,b]
    python benchmarks/csl_experiment.py --calibrate --steps 200,600 [--inner-folds 1,2,3,4] [--append]

Each run uses one CPU thread; ``--workers`` runs that many at once.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch
from harness import cpu_model, load_average

#: short name -> (what the table calls it, graph-task options)
SETTINGS: dict[str, tuple[str, dict[str, object]]] = {
    "none": ("no positions", {"positions": "none"}),
    "none-mask": ("no positions, edges (mask)", {"positions": "none", "attention": "mask"}),
    "linear": ("eigenvectors, linear", {"eigenvalues": False}),
    "linear-bias": ("eigenvectors, linear, edges (bias)", {"eigenvalues": False, "attention": "bias"}),
    "linear-mask": ("eigenvectors, linear, edges (mask)", {"eigenvalues": False, "attention": "mask"}),
    "linear-mask-wide": ("eigenvectors, linear, edges (mask), d=64, 3 layers",
                         {"eigenvalues": False, "attention": "mask", "d_model": 64, "n_layers": 3}),
    "signnet": ("eigenvectors, SignNet", {"eigenvalues": False, "position_reader": "signnet"}),
    "signnet-mask": ("eigenvectors, SignNet, edges (mask)",
                     {"eigenvalues": False, "position_reader": "signnet", "attention": "mask"}),
    "signnet-sparse": ("eigenvectors, SignNet, edges (sparse kernel)",
                       {"eigenvalues": False, "position_reader": "signnet", "attention": "sparse"}),
    "signnet-values": ("eigenvectors + eigenvalues, SignNet", {"eigenvalues": True, "position_reader": "signnet"}),
    "values": ("eigenvectors + eigenvalues, linear", {"eigenvalues": True}),
}
MODEL = {"d_model": 32, "n_heads": 4, "n_layers": 2, "k": 20, "pool": "cls", "attention": "full",
         "position_reader": "linear", "learn_bias": True}
OPTIM = {"batch_size": 30, "lr": 3e-3, "weight_decay": 0.0}
RESULTS = Path(__file__).parent / "results"
CALIBRATION_DATA = "csl-validation"


def _register_validation_split() -> None:
    """The 120 training graphs of test fold 0 as a dataset of their own (its fold 0 is the validation set)."""
    from tokformer.tasks.graph import register_graphs
    from tokformer.tasks.graph_data import csl_dataset, stratified_folds

    data = csl_dataset(per_class=15, seed=0)
    train = [i for i, f in enumerate(stratified_folds(data.labels, 5, 0)) if f != 0]
    register_graphs(CALIBRATION_DATA, [data.graphs[i] for i in train], [data.labels[i] for i in train],
                    classes=data.classes)


def run(setting: str, fold: int, steps: int, calibrate: bool) -> tuple[str, int, int, float, float]:
    """Train one fold; returns (setting, fold, steps, held-out accuracy at the last step, seconds)."""
    torch.set_num_threads(1)
    from tokformer.engine import train

    if calibrate:
        _register_validation_split()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as run_dir:
        result = train(
            "graph", quiet=True, overwrite=True, data=CALIBRATION_DATA if calibrate else "csl", folds=5, fold=fold,
            **{**MODEL, **SETTINGS[setting][1]}, **OPTIM, steps=steps, warmup_steps=steps // 10, eval_every=steps,
            log_every=steps, device="cpu", seed=fold, run_dir=run_dir,
        )
    return setting, fold, steps, result.metrics["accuracy"], time.perf_counter() - start


def parameters(setting: str) -> int:
    from tokformer.tasks.graph import GraphConfig, GraphTask

    model = GraphTask(GraphConfig(**{**MODEL, **SETTINGS[setting][1]})).build_model()
    return sum(p.numel() for p in model.parameters())


def machine() -> str:
    cpu, load = cpu_model(), load_average()
    return (f"{cpu}, {os.cpu_count()} cores, 1 thread per run; load average {load} at the end; "
            f"torch {torch.__version__}, Python {platform.python_version()}")


def table(rows: dict[tuple[str, int], list[tuple[float, float]]], title: str) -> str:
    lines = [title, "", "| setting | steps | accuracy (mean ± std) | per fold | parameters | wall time per run (s) |",
             "|---|---:|---|---|---:|---:|"]
    for (setting, steps), runs in rows.items():
        accs = [a for a, _ in runs]
        per_fold = ", ".join(f"{a:.2f}" for a in accs)
        spread = statistics.pstdev(accs) if len(accs) > 1 else 0.0
        lines.append(f"| {SETTINGS[setting][0]} | {steps} | {statistics.mean(accs):.3f} ± {spread:.3f} | {per_fold} "
                     f"| {parameters(setting):,} | {statistics.median(s for _, s in runs):.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="200", help="comma-separated step counts")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--settings", default=",".join(s for s in SETTINGS if s != "linear-mask-wide"),
                        help="comma-separated short names from SETTINGS (default: all but linear-mask-wide)")
    parser.add_argument("--calibrate", action="store_true", help="validation splits of test fold 0's training folds")
    parser.add_argument("--inner-folds", default="0", help="--calibrate: which of the 5 inner folds to validate on")
    parser.add_argument("--append", action="store_true", help="add the table to the results file, not replace it")
    args = parser.parse_args()
    settings = args.settings.split(",")
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        parser.error(f"unknown settings {unknown}")
    folds = [int(f) for f in args.inner_folds.split(",")] if args.calibrate else list(range(args.folds))
    jobs = [(s, f, int(n)) for n in args.steps.split(",") for s in settings for f in folds]
    rows: dict[tuple[str, int], list[tuple[float, float]]] = {(s, n): [] for s, _, n in jobs}
    with ProcessPoolExecutor(args.workers) as pool:
        futures = [pool.submit(run, s, f, n, args.calibrate) for s, f, n in jobs]
        for future in futures:
            setting, fold, steps, acc, seconds = future.result()
            rows[(setting, steps)].append((acc, seconds))
            print(f"{setting:40s} {steps:5d} steps, fold {fold}: accuracy {acc:.3f} ({seconds:.0f} s)", flush=True)
    where = (f"inner folds {args.inner_folds} (train 90, validate 30 each) of the 120 training graphs of test fold 0"
             if args.calibrate
             else f"{args.folds}-fold CV (train 120, test 30), held-out accuracy after the last step")
    title = (f"CSL (150 graphs, 10 classes, chance 0.10), {where}; model {MODEL}, batch 30, AdamW lr 3e-3, "
             f"warmup 10%, sign flips on, seed = fold.\n\nMachine: {machine()}.")
    report = table(rows, title)
    print(report)
    out = RESULTS / ("csl-calibration.md" if args.calibrate else "csl.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    before = out.read_text(encoding="utf-8") + "\n" if args.append and out.exists() else ""
    out.write_text(before + report, encoding="utf-8")


if __name__ == "__main__":
    main()
