"""Per-family learning rate and warmup for the birds sweep, chosen on validation images, never on a test set.

Every family the sweep compares is represented by one model (``FAMILIES``). Each (learning
rate, warmup) of the grid trains that model at the sweep's common budget on fresh images
(:class:`~tokformer.tasks.birds.experiment.TrainStream`), once per seed, and is scored on that
seed's **validation** images (``split="val"``: a random stream of its own that no reported number
uses). A family's choice is the setting with the best validation accuracy averaged over seeds and
the tasks run (``--tasks compare``: the comparison alone, the question the sweep asks); the table it
chose from is written beside the choice, and the choice as the sweep's ``CALIBRATED``
(``tasks/birds/experiment.py``) takes it.

    OMP_NUM_THREADS=1 python benchmarks/birds_calibration.py                 # the whole grid, one core
    OMP_NUM_THREADS=1 python benchmarks/birds_calibration.py --seeds 2 &     # share it out over cores:
    OMP_NUM_THREADS=1 python benchmarks/birds_calibration.py --seeds 0 1     # disjoint seeds, one file
    python benchmarks/birds_calibration.py --report                          # the table from what ran

Each run is appended to ``benchmarks/results/birds_calibration.jsonl`` as it ends; runs already
there are skipped, so a killed calibration resumes. The first version's calibration (the ``pair``
scene, a fixed training set) is kept as it was in ``docs/birds/calibration.md``; its script is
``git show eef7f30:benchmarks/birds_calibration.py``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from harness import RESULTS, Machine, latest_per_process, over_seeds, read_jsonl

from tokformer.tasks.birds.experiment import BirdsConfig, TrainStream, accuracy, make_split, train_model
from tokformer.tasks.birds.models import parse_spec

FAMILIES: dict[str, str] = {  # family -> the model that stands for it (the sweep's middle depth)
    "pool": "pool-d4",
    "global": "global",
    "mlp": "mlp",
    "transformer": "transformer-l2",
    "transformer-local": "transformer-local-l2",
    "mixer": "mixer-l2",
}
LRS = (1e-3, 3e-3, 1e-2)
WARMUPS = (0.05,)
SEEDS = (0, 1, 2)
TASKS = ("count", "compare")
OUT = RESULTS / "birds_calibration"
BASE_STEPS = BirdsConfig().steps


def key(row: dict) -> tuple:
    return row["model"], row["task"], row["seed"], row["lr"], row["warmup"], row["steps"]


def calibrate(args: argparse.Namespace, log: Path) -> None:
    """Train every (family, lr, warmup, seed, task) of the grid not yet in ``log``; append each result."""
    done = {key(r) for r in read_jsonl(log)}
    machine, threads = Machine(), f"{torch.get_num_threads()} torch thread(s)"
    base = BirdsConfig(steps=args.steps, per_family={})
    for seed in args.seeds:
        for task in args.tasks:
            stream, val = TrainStream(base, task, seed), make_split(base, task, seed, "val")
            for family in args.families:
                model = FAMILIES[family]
                for lr in args.lrs:
                    for warmup in args.warmups:
                        row = dict(family=family, model=model, task=task, seed=seed, lr=lr, warmup=warmup,
                                   steps=args.steps)
                        if key(row) in done:
                            continue
                        cfg = BirdsConfig(steps=args.steps, lr=lr, warmup=warmup, per_family={})
                        trained, seconds = train_model(model, task, stream, cfg, seed, torch.device("cpu"))
                        row |= dict(val_accuracy=accuracy(trained, val, torch.device("cpu")),
                                    seconds=round(seconds, 1), machine=machine.line(threads),
                                    time=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
                        print(json.dumps(row), flush=True)
                        with log.open("a") as f:
                            f.write(json.dumps(row) + "\n")


def choose(rows: list[dict]) -> dict[str, dict]:
    """family -> the (lr, warmup) with the best mean validation accuracy over seeds and tasks, and the
    grid it was chosen from: (lr, warmup) -> task -> per-seed accuracies."""
    choice = {}
    for family in dict.fromkeys(r["family"] for r in rows):
        grid: dict[tuple[float, float], dict[str, list[float]]] = {}
        for r in sorted((r for r in rows if r["family"] == family), key=lambda r: r["seed"]):
            grid.setdefault((r["lr"], r["warmup"]), {}).setdefault(r["task"], []).append(r["val_accuracy"])
        score = {setting: float(np.mean([np.mean(v) for v in by_task.values()])) for setting, by_task in grid.items()}
        best = max(score, key=lambda s: (score[s], -s[0]))  # a tie goes to the smaller learning rate
        choice[family] = {"lr": best[0], "warmup": best[1], "grid": grid, "score": score}
    return choice


def render(all_rows: list[dict]) -> str:
    rows = [r for r in all_rows if r["steps"] == BASE_STEPS]  # the choice is made at the sweep's budget
    choice = choose(rows)
    steps = sorted({r["steps"] for r in rows})
    machines = [f"- {line}" for line in latest_per_process([r["machine"] for r in rows])]
    lines = ["# Birds calibration: learning rate and warmup per family, on validation images", "",
             "Written by `benchmarks/birds_calibration.py` from `birds_calibration.jsonl`. Each model trains on fresh",
             f"images ({', '.join(map(str, steps))} steps of 64; `twins` comparison scene) once per seed and is scored "
             "on that seed's validation images (their own random stream; no test image is read). Cells: mean ± sample "
             "std (ddof 1) over seeds, then each seed. The choice maximises the mean over the tasks that ran.", "",
             "| family (model) | lr | warmup | counting (val) | comparison (val) | mean over tasks | chosen |",
             "|---|---:|---:|---:|---:|---:|:---:|"]
    for family, c in choice.items():
        model = parse_spec(next(r["model"] for r in rows if r["family"] == family)).label
        for (lr, warmup), by_task in sorted(c["grid"].items()):
            chosen = "**yes**" if (lr, warmup) == (c["lr"], c["warmup"]) else ""
            lines.append(f"| {model} | {lr:g} | {warmup:g} | {over_seeds(by_task.get('count', []))} | "
                         f"{over_seeds(by_task.get('compare', []))} | {c['score'][(lr, warmup)]:.3f} | {chosen} |")
    lines += ["", "Chosen (the sweep's `CALIBRATED`):", "", "```python",
              "CALIBRATED = {" + ", ".join(f'"{f}": ({c["lr"]:g}, {c["warmup"]:g})' for f, c in choice.items()) + "}",
              "```", *longer_budgets(all_rows), "", "Where they ran (one line per calibration process):", "",
              *machines]
    return "\n".join(lines) + "\n"


def longer_budgets(rows: list[dict]) -> list[str]:
    """Runs at other step budgets (``--steps``), beside the base budget's at the same learning rate: whether
    a family that sits at chance at the sweep's budget escapes with more steps. Not used for the choice."""
    longer = sorted({(r["family"], r["lr"], r["warmup"]) for r in rows if r["steps"] != BASE_STEPS})
    if not longer:
        return []
    budgets = sorted({r["steps"] for r in rows})
    lines = ["", "## Longer budgets (validation images; not used for the choice)", "",
             "| family (model) | lr | warmup | task | " + " | ".join(f"{s:,} steps" for s in budgets) + " |",
             "|---|---:|---:|---|" + "---:|" * len(budgets)]
    for family, lr, warmup in longer:
        mine = sorted((r for r in rows if (r["family"], r["lr"], r["warmup"]) == (family, lr, warmup)),
                      key=lambda r: r["seed"])
        label = parse_spec(mine[0]["model"]).label
        for task in dict.fromkeys(r["task"] for r in mine):
            cells = [over_seeds([r["val_accuracy"] for r in mine if (r["task"], r["steps"]) == (task, s)])
                     for s in budgets]
            lines.append(f"| {label} | {lr:g} | {warmup:g} | {task} | " + " | ".join(cells) + " |")
    return lines


def chosen_json(rows: list[dict]) -> dict[str, dict[str, float]]:
    return {f: {"lr": c["lr"], "warmup": c["warmup"]} for f, c in choose(rows).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument("--lrs", nargs="+", type=float, default=list(LRS))
    parser.add_argument("--warmups", nargs="+", type=float, default=list(WARMUPS))
    parser.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--steps", type=int, default=BASE_STEPS,
                        help="steps per run; only runs at the sweep's budget choose, others get a table of their own")
    parser.add_argument("--report", action="store_true", help="only write the table from the runs so far")
    args = parser.parse_args()
    log = OUT.with_suffix(".jsonl")
    if not args.report:
        calibrate(args, log)
    rows = read_jsonl(log)
    OUT.with_suffix(".md").write_text(render(rows))
    OUT.with_suffix(".json").write_text(json.dumps(chosen_json([r for r in rows if r["steps"] == BASE_STEPS]),
                                                   indent=2) + "\n")
    print(OUT.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
