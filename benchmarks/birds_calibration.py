"""Calibrate the birds sweep on a validation split, never on a reported test set.

Every choice the sweep makes for its models (the common step budget and learning rate, the
Transformer's patch size, the local tokenizer's CNN) was picked here: each variant trains on
seed 0's training images and is scored on seed 0's **validation** images, a random stream of
its own (``split="val"`` in ``tasks/birds/data.py``) that no reported number uses. The test
streams of seeds 0, 1 and 2 are touched only by the sweep itself.

    python benchmarks/birds_calibration.py                  # the whole grid -> docs/birds/calibration.md
    python benchmarks/birds_calibration.py --only lr        # one group of the grid

Results are appended to ``calibration.jsonl`` beside the Markdown file as each run ends (a
killed run keeps what it measured) and the table is rewritten from that file.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from harness import cpu_model, load_average

from tokformer.tasks.birds.experiment import BirdsConfig, accuracy, make_split, train_model
from tokformer.tasks.birds.models import parse_spec

# group -> variants: (task, model spec, BirdsConfig overrides, model constructor options). These are the
# runs the sweep's choices rest on; docs/birds/calibration.md holds their numbers.
P8 = {"patch": 8, "cnn_depth": 2}
GRID: dict[str, list[tuple[str, str, dict, dict]]] = {
    "tokenizer": [  # linear vs local patches, patch size and CNN width, at the common budget
        ("count", "transformer-l2", {}, {}),
        ("count", "transformer-local-l2", {}, {**P8, "cnn_width": 32}),
        ("count", "transformer-local-l2", {}, {**P8, "cnn_width": 16}),
        ("count", "transformer-local-l2", {}, {"patch": 16, "cnn_depth": 3, "cnn_width": 16}),
        ("compare", "transformer-local-l2", {"lr": 4e-3}, {**P8, "cnn_width": 32}),
        ("compare", "transformer-local-l2", {"lr": 4e-3}, {"patch": 16, "cnn_depth": 2, "cnn_width": 32}),
    ],
    "check": [  # after the sweep started: the sweep's tokenizer over training seeds, and the 32-wide one
        *(("compare", "transformer-local-l2", {"seed": seed}, {}) for seed in (0, 1, 2, 3)),
        ("compare", "transformer-local-l2", {}, {"cnn_width": 32, "cnn_depth": 2}),
        ("count", "transformer-local-l2", {}, {"cnn_width": 32, "cnn_depth": 2}),
    ],
    "lr": [  # the sweep's common learning rate: 2e-3 (inherited) or 4e-3, for the Transformer and the CNNs
        ("count", "transformer-local-l2", {"lr": 4e-3}, {**P8, "cnn_width": 16}),
        ("count", "transformer-local-l2", {"lr": 4e-3}, {}),
        ("compare", "transformer-local-l2", {"lr": 2e-3}, {}),
        ("compare", "transformer-local-l2-x3", {"lr": 4e-3}, {}),
        ("compare", "global", {"lr": 2e-3}, {}),
        ("compare", "global", {"lr": 4e-3}, {}),
        ("compare", "pool-d6", {"lr": 4e-3}, {}),
        ("compare", "pool-d6", {"lr": 2e-3}, {}),
        ("count", "pool-d4", {"lr": 4e-3}, {}),
        ("count", "pool-d4", {"lr": 2e-3}, {}),
    ],
}
DECISIONS = """## What was chosen, and a mistake found after the sweep

- **Local tokenizer: 16 px patches** beat 8 px patches on both tasks (counting 0.834 vs 0.79-0.81;
  comparison 0.742 vs 0.560).
- **Its CNN: the sweep used 3 stages of width 16** (`LOCAL_TOKENIZER` in `tasks/birds/models.py`),
  chosen as "as good and cheaper" than width 32. **That choice rested on a mislabelled run**: the
  comparison run recorded at first as width 16, depth 3 (0.742) had in fact trained the 2-stage,
  width-32 CNN (the probe script's override of width and depth was itself overridden by the model's
  defaults). Checked after the sweep had started (group `check`): the sweep's 3-stage width-16 CNN
  compares at 0.500, 0.575, 0.602, 0.585 over training seeds 0-3, the 2-stage width-32 one at 0.742
  (seed 0) and counts as well (0.869 vs 0.868), at about three times the tokenizer's cost. The
  committed sweep keeps what it ran; the next one should take width 32, depth 2.
- **One learning rate for every row: 4e-3** (the previous sweep used 2e-3, chosen on a test stream):
  better for the Transformer (comparison 0.539 at 2e-3) and for the CNNs too (global head 0.889 vs
  0.857 on comparison, pool-d6 0.862 vs 0.828, pool-d4 0.968 vs 0.934 on counting).
- **Inherited, not re-tuned here**: 300 steps of 64 images, weight decay 0.05, the species auxiliary
  loss, 8 px patches for the linear-patch Transformer, the CNN widths. They were chosen in the first
  version of the experiment on seed 0's test stream; this version keeps them fixed rather than
  tuning them again.
- **Extra budget**: 3x steps for the strongest CNN (global head) and the local-tokenizer Transformer
  alike; on validation the Transformer at 3x reached 0.890 on comparison.
"""
TASKS = ("count", "compare")


def machine_line() -> str:
    """CPU model, torch version, threads and load average: every row says where it ran."""
    threads = torch.get_num_threads()
    return f"{cpu_model()}, torch {torch.__version__}, {threads} thread(s), load average {load_average()}"


def render(rows: list[dict], path: Path) -> None:
    lines = [
        "# Birds calibration (validation split)",
        "",
        "Each row trains on seed 0's training images and is scored on seed 0's validation images (their own",
        "random stream). Reported test sets are never used here. Written by `benchmarks/birds_calibration.py`.",
        "",
        "| group | task | model | options | steps | lr | val accuracy | train s | machine |",
        "|---|---|---|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        options = ", ".join(f"{k}={v}" for k, v in r["options"].items()) or "defaults"
        lines.append(f"| {r['group']} | {r['task']} | {r['model']} | {options} | {r['steps']} | {r['lr']:g} | "
                     f"{r['accuracy']:.3f} | {r['seconds']:.0f} | {r['machine']} |")
    path.write_text("\n".join(lines) + "\n\n" + DECISIONS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="docs/birds/calibration.md")
    parser.add_argument("--only", action="append", help="run only these groups of the grid")
    args = parser.parse_args()
    out = Path(args.out)
    log = out.with_suffix(".jsonl")
    rows = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    groups = args.only or list(GRID)
    base = BirdsConfig()
    for task in TASKS:
        runs = [(group, *variant) for group in groups for variant in GRID[group] if variant[0] == task]
        if not runs:
            continue
        train, val = make_split(base, task, 0, "train"), make_split(base, task, 0, "val")
        for group, _, model, overrides, options in runs:
            seed = overrides.get("seed", 0)  # the training seed (weights, batch order); the data stay seed 0's
            cfg = BirdsConfig(**{k: v for k, v in overrides.items() if k != "seed"})
            trained, seconds = train_model(model, task, train, cfg, seed, torch.device("cpu"), **options)
            steps = cfg.steps * parse_spec(model).budget
            shown = {**options, **({"seed": seed} if seed else {})}
            row = dict(group=group, task=task, model=model, options=shown, steps=steps, lr=cfg.lr,
                       accuracy=accuracy(trained, val, torch.device("cpu")), seconds=seconds,
                       machine=machine_line(), time=time.strftime("%Y-%m-%d %H:%M"))
            print(json.dumps(row), flush=True)
            rows.append(row)
            with log.open("a") as f:
                f.write(json.dumps(row) + "\n")
            render(rows, out)


if __name__ == "__main__":
    main()
