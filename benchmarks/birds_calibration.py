"""Per-family learning rate and warmup for the birds sweep, chosen on validation images, never on a test set.

Every family the sweep compares is represented by one model (``FAMILIES``). Each (learning
rate, warmup) of the grid trains that model at the sweep's common budget on fresh images
(:class:`~tokformer.tasks.birds.stream.TrainStream`) through the engine, once per seed, and is scored on that
seed's **validation** images (``split="val"``: a random stream of its own that no reported number
uses). A family's choice is the setting with the best validation accuracy averaged over seeds and
the tasks run (``--tasks compare``: the comparison alone, the question the sweep asks); the table it
chose from is written beside the choice, and the choice as the sweep's ``CALIBRATED``
(``tasks/birds/experiment.py``) takes it.

    OMP_NUM_THREADS=1 python benchmarks/birds_calibration.py                 # the whole grid, one core
    OMP_NUM_THREADS=1 python benchmarks/birds_calibration.py --seeds 2 &     # share it out over cores:
    OMP_NUM_THREADS=1 python benchmarks/birds_calibration.py --seeds 0 1     # disjoint seeds, one file
    python benchmarks/birds_calibration.py --report                          # the table from what ran

The grid is the same for every family (``LRS`` x ``WARMUPS``) except one: the local-tokenizer Transformer
with a learned position table, the family the Transformer targets of issue #27 rest on, whose choice (3e-3)
sat between a diverging 1e-2 and a slow 1e-3. Its grid was refined in two rounds on the same validation
images, seven more settings (each seed's run takes about a minute on one core), recorded in the table as
every other row:

    OMP_NUM_THREADS=1 python benchmarks/birds_calibration.py --families transformer-local-lpos --tasks compare \
        --lrs 0.002 0.005 --warmups 0.05
    OMP_NUM_THREADS=1 python benchmarks/birds_calibration.py --families transformer-local-lpos --tasks compare \
        --lrs 0.003 0.005 0.01 --warmups 0.2
    OMP_NUM_THREADS=1 python benchmarks/birds_calibration.py --families transformer-local-lpos --tasks compare \
        --lrs 0.007 --warmups 0.2                      # the second round, around the first round's best
    OMP_NUM_THREADS=1 python benchmarks/birds_calibration.py --families transformer-local-lpos --tasks compare \
        --lrs 0.005 --warmups 0.4

Each run is appended to ``benchmarks/results/birds_calibration.jsonl`` as it ends; runs already
there are skipped, so a killed calibration resumes. The first version's calibration (the ``pair``
scene, a fixed training set) is kept as it was in ``docs/birds/calibration.md``; its script is
``git show eef7f30:benchmarks/birds_calibration.py``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import numpy as np
import torch
from harness import RESULTS, Machine, latest_per_process, over_seeds, read_jsonl

from tokformer.tasks.birds.data import N_CLASSES
from tokformer.tasks.birds.experiment import BirdsConfig, train_model
from tokformer.tasks.birds.models import TOKEN_NORMS, parse_spec
from tokformer.tasks.birds.stream import accuracy, make_split

FAMILIES: dict[str, str] = {  # family -> the model that stands for it (the sweep's middle depth)
    "pool": "pool-d4",
    "global": "global",
    "mlp": "mlp",
    "transformer": "transformer-l2",
    "transformer-local": "transformer-local-l2",
    "mixer": "mixer-l2",
    "transformer-lpos": "transformer-l2-lpos",  # the same Transformers with a learned position table
    "transformer-local-lpos": "transformer-local-l2-lpos",
}
LRS = (1e-3, 3e-3, 1e-2)
WARMUPS = (0.05,)
SEEDS = (0, 1, 2)
TASKS = ("count", "compare")
OUT = RESULTS / "birds_calibration"
BASE_STEPS = BirdsConfig().steps


TOKEN_NORM = BirdsConfig().token_norm


def key(row: dict) -> tuple:
    return row["model"], row["task"], row["seed"], row["lr"], row["warmup"], row["steps"], token_norm(row)


# Rows written while the option was a flag: True was a LayerNorm with a learned gain (run 2026-12-02 20:16-20:47
# UTC), False (and rows from before the option) the projection's output as it was.
_FLAG_RUNS = {True: "affine", False: "none"}


def token_norm(row: dict) -> str | None:
    """What a token model's run did to its patch embeddings (``BirdsConfig.token_norm``); None for the models
    without tokens, which the option does not touch."""
    if not parse_spec(row["model"]).tokens:
        return None
    norm = row.get("token_norm", "none")
    return _FLAG_RUNS[norm] if isinstance(norm, bool) else norm


def current(row: dict) -> bool:
    """Whether a row was run as the sweep runs now: at its budget and with its tokens."""
    return row["steps"] == BASE_STEPS and token_norm(row) in (None, TOKEN_NORM)


def calibrate(args: argparse.Namespace, log: Path) -> None:
    """Train every (family, lr, warmup, seed, task) of the grid not yet in ``log``; append each result."""
    done = {key(r) for r in read_jsonl(log)}
    machine, threads = Machine(), f"{torch.get_num_threads()} torch thread(s)"
    base = BirdsConfig(steps=args.steps, per_family={})
    for seed in args.seeds:
        for task in args.tasks:
            val = make_split(base, task, seed, "val", base.n_test)
            for family in args.families:
                model = FAMILIES[family]
                norms = args.token_norms if parse_spec(model).tokens else [None]  # None: the option does not apply
                for lr, warmup, norm in itertools.product(args.lrs, args.warmups, norms):
                    row = dict(family=family, model=model, task=task, seed=seed, lr=lr, warmup=warmup,
                               steps=args.steps) | ({} if norm is None else {"token_norm": norm})
                    if key(row) in done:
                        continue
                    cfg = BirdsConfig(steps=args.steps, lr=lr, warmup=warmup, per_family={},
                                      token_norm=TOKEN_NORM if norm is None else norm)
                    run = train_model(model, task, cfg, seed)  # the engine, in a temporary run folder
                    row |= dict(val_accuracy=accuracy(run.model, val, torch.device("cpu")),
                                seconds=round(run.seconds, 1), machine=machine.line(threads),
                                time=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
                    print(json.dumps(row), flush=True)
                    with log.open("a") as f:
                        f.write(json.dumps(row) + "\n")


VAL_IMAGES = BirdsConfig().n_test  # validation images per (task, seed)


def beats_chance(by_task: dict[str, list[float]]) -> bool:
    """Whether a setting's mean validation accuracy beats chance on some task by more than two standard
    errors of a guesser over all its images (seeds pooled: 0.018 for 3 seeds of 1,000 comparison images)."""
    for task, accuracies in by_task.items():
        chance = 1 / N_CLASSES[task]
        if np.mean(accuracies) > chance + 2 * np.sqrt(chance * (1 - chance) / (VAL_IMAGES * len(accuracies))):
            return True
    return False


def choose(rows: list[dict]) -> dict[str, dict]:
    """family -> the (lr, warmup) with the best mean validation accuracy over seeds and tasks, and the
    grid it was chosen from: (lr, warmup) -> task -> per-seed accuracies.

    A family none of whose settings beats chance (:func:`beats_chance`) has nothing to choose by: the best
    mean there is noise, so it takes the middle learning rate of its grid (``"at_chance": True``), a rule
    fixed before the full sweep ran, the same for every family."""
    choice = {}
    for family in dict.fromkeys(r["family"] for r in rows):
        grid: dict[tuple[float, float], dict[str, list[float]]] = {}
        for r in sorted((r for r in rows if r["family"] == family), key=lambda r: r["seed"]):
            grid.setdefault((r["lr"], r["warmup"]), {}).setdefault(r["task"], []).append(r["val_accuracy"])
        score = {setting: float(np.mean([np.mean(v) for v in by_task.values()])) for setting, by_task in grid.items()}
        at_chance = not any(beats_chance(by_task) for by_task in grid.values())
        if at_chance:
            settings = sorted(grid)
            best = settings[(len(settings) - 1) // 2]
        else:
            best = max(score, key=lambda s: (score[s], -s[0]))  # a tie goes to the smaller learning rate
        choice[family] = {"lr": best[0], "warmup": best[1], "grid": grid, "score": score, "at_chance": at_chance}
    return choice


def render(all_rows: list[dict]) -> str:
    rows = [r for r in all_rows if current(r)]  # the choice is made at the sweep's budget, with its tokens
    choice = choose(rows)
    steps = sorted({r["steps"] for r in rows})
    machines = [f"- {line}" for line in latest_per_process([r["machine"] for r in rows])]
    lines = ["# Birds calibration: learning rate and warmup per family, on validation images", "",
             "Written by `benchmarks/birds_calibration.py` from `birds_calibration.jsonl`. Each model trains on fresh",
             f"images ({', '.join(map(str, steps))} steps of 64; `twins` comparison scene) once per seed and is scored "
             "on that seed's validation images (their own random stream; no test image is read). Cells: mean ± sample "
             "std (ddof 1) over seeds, then each seed. The choice maximises the mean over the tasks that ran; a family "
             "none of whose settings beats chance by two standard errors of a guesser over its images (0.018 for 3 "
             "seeds of 1,000 comparison images) has nothing to choose by and takes the grid's middle lr. The "
             f"token models (both Transformers, the token mixer) choose among runs with token norm `{TOKEN_NORM}` "
             "(`BirdsConfig.token_norm`: what each patch embedding gets before the position code is added); their "
             "runs with another are in the last table, not in the choice. Settings tried per family (an equal "
             "tuning budget only where these are equal; the script's docstring says why one grid is finer): "
             + ", ".join(f"{family} {len(c['grid'])}" for family, c in choice.items()) + ".",
             "",
             "| family (model) | lr | warmup | counting (val) | comparison (val) | mean over tasks | chosen |",
             "|---|---:|---:|---:|---:|---:|:---:|"]
    for family, c in choice.items():
        model = parse_spec(next(r["model"] for r in rows if r["family"] == family)).label
        for (lr, warmup), by_task in sorted(c["grid"].items()):
            chosen = ("" if (lr, warmup) != (c["lr"], c["warmup"])
                      else "**yes** (all at chance: the middle lr)" if c["at_chance"] else "**yes**")
            lines.append(f"| {model} | {lr:g} | {warmup:g} | {over_seeds(by_task.get('count', []))} | "
                         f"{over_seeds(by_task.get('compare', []))} | {c['score'][(lr, warmup)]:.3f} | {chosen} |")
    lines += ["", "Chosen (the sweep's `CALIBRATED`):", "", "```python",
              "CALIBRATED = {" + ", ".join(f'"{f}": ({c["lr"]:g}, {c["warmup"]:g})' for f, c in choice.items()) + "}",
              "```", *other_runs(all_rows), "", "Where they ran (one line per calibration process):", "",
              *machines]
    return "\n".join(lines) + "\n"


def other_runs(rows: list[dict]) -> list[str]:
    """Runs not made as the sweep runs now, beside each other per setting: at other step budgets
    (``--steps``: whether a family at chance at the sweep's budget escapes with more steps), and the
    token models' runs with another token treatment than the sweep's. Not used for the choice."""
    settings = sorted({(r["family"], r["lr"], r["warmup"], token_norm(r) or "—") for r in rows if not current(r)})
    if not settings:
        return []
    budgets = sorted({r["steps"] for r in rows})
    lines = ["", "## Other budgets and other token treatments (validation images; not used for the choice)",
             "", "| family (model) | token norm | lr | warmup | task | "
             + " | ".join(f"{s:,} steps" for s in budgets) + " |", "|---|:---:|---:|---:|---|" + "---:|" * len(budgets)]
    for family, lr, warmup, norm in settings:
        mine = sorted((r for r in rows if (r["family"], r["lr"], r["warmup"], token_norm(r) or "—")
                       == (family, lr, warmup, norm)), key=lambda r: r["seed"])
        label = parse_spec(mine[0]["model"]).label
        for task in dict.fromkeys(r["task"] for r in mine):
            cells = [over_seeds([r["val_accuracy"] for r in mine if (r["task"], r["steps"]) == (task, s)])
                     for s in budgets]
            lines.append(f"| {label} | {norm} | {lr:g} | {warmup:g} | {task} | " + " | ".join(cells) + " |")
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
    parser.add_argument("--token-norms", nargs="+", default=[TOKEN_NORM], choices=TOKEN_NORMS,
                        help="token models: what each patch embedding gets (BirdsConfig.token_norm); runs with "
                        "another than the sweep's are tabled, never chosen from")
    parser.add_argument("--report", action="store_true", help="only write the table from the runs so far")
    args = parser.parse_args()
    log = OUT.with_suffix(".jsonl")
    if not args.report:
        calibrate(args, log)
    rows = read_jsonl(log)
    OUT.with_suffix(".md").write_text(render(rows))
    OUT.with_suffix(".json").write_text(json.dumps(chosen_json([r for r in rows if current(r)]), indent=2) + "\n")
    print(OUT.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
