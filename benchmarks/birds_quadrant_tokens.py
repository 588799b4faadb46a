"""Does the sweep's Transformer learn the twins comparison with one token per quadrant, given many steps?

The vqa task's model, a Transformer over 32 px local-CNN tokens (one per quadrant at 64 px) with a
width-8 patch CNN, learns whether the birds of two *named* quadrants are the same species
(``docs/vqa.md``). The birds sweep's local-tokenizer Transformer (16 px patches, a width-32 CNN)
stays at chance on the fixed top-right/bottom-left comparison at 1x, 3x and 10x. This asks whether
the tokenization or the budget is the difference: ``transformer-local-l2`` on the comparison with
the sweep's settings (:func:`~tokformer.tasks.birds.experiment.run_settings`: the twins scene, fresh
images, the species auxiliary loss, the shared readout), with the local tokenizer's patch and CNN
width replaced, scored on the **validation** images at each tenth of the run. A probe, not a row
of the sweep: one seed per setting.

    python benchmarks/birds_quadrant_tokens.py                                   # every setting of SETTINGS
    python benchmarks/birds_quadrant_tokens.py --only p32-w8-x30-lr1e-3           # one of them

Appends to ``benchmarks/results/birds_quadrant_tokens.jsonl`` and renders ``birds_quadrant_tokens.md``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from unittest import mock

from harness import RESULTS, Machine, markdown_table, read_jsonl, write_results

from tokformer.engine import read_metrics, train
from tokformer.tasks.birds import models
from tokformer.tasks.birds.experiment import BirdsConfig, run_settings

JSONL = RESULTS / "birds_quadrant_tokens.jsonl"
# name -> (patch, CNN width, step multiple of the sweep's 300, learning rate or None for the calibrated 3e-3)
SETTINGS: dict[str, tuple[int, int, int, float | None]] = {
    "p32-w8-x1": (32, 8, 1, None),
    "p32-w32-x1": (32, 32, 1, None),
    "p16-w8-x1": (16, 8, 1, None),
    "p32-w8-x30-lr1e-3": (32, 8, 30, 1e-3),  # vqa's learning rate; 9,000 steps of 64
}
EVALUATIONS = 10


def run(name: str, seed: int) -> dict:
    """Train one setting through the engine; its validation accuracy at each tenth of its steps."""
    patch, width, budget, lr = SETTINGS[name]
    settings = run_settings(f"transformer-local-l2-x{budget}", "compare", BirdsConfig(), seed)
    steps = settings["train"]["steps"]
    settings["train"] |= {"eval_every": steps // EVALUATIONS, "log_every": steps // EVALUATIONS}
    if lr is not None:
        settings["train"]["lr"] = lr
    with tempfile.TemporaryDirectory(prefix="tokformer-birds-quadrant-") as scratch:
        start = time.perf_counter()
        with mock.patch.dict(models.LOCAL_TOKENIZER, patch=patch, cnn_width=width):  # read when the model is built
            train(settings, quiet=True, run_dir=str(Path(scratch) / "run"))
        seconds = time.perf_counter() - start
        curve = [(r["step"], round(float(r["accuracy"]), 3)) for r in read_metrics(Path(scratch) / "run")
                 if r.get("split") == "eval"]
    return {"name": name, "patch": patch, "cnn_width": width, "steps": steps, "lr": settings["train"]["lr"],
            "seed": seed, "seconds": round(seconds, 1), "val_curve": curve}


def render(rows: list[dict]) -> str:
    table = markdown_table(["setting", "patch (px)", "CNN width", "steps of 64", "lr", "seed",
                            "validation accuracy at each tenth of the run", "wall (s)"], [
        [r["name"], str(r["patch"]), str(r["cnn_width"]), str(r["steps"]), f"{r['lr']:g}", str(r["seed"]),
         " / ".join(f"{acc:.3f}" for _, acc in r["val_curve"]), f"{r['seconds']:.0f}"] for r in rows])
    machines = "\n".join(sorted({r["machine"] for r in rows}))
    return ("# birds: the comparison with one token per quadrant\n\n`python benchmarks/birds_quadrant_tokens.py`: "
            "the sweep's `transformer-local-l2` on the twins comparison (its settings, the local tokenizer's "
            "patch and CNN width replaced), scored on 1,000 validation images; chance is 0.5 and a guesser's "
            "standard error 0.016.\n\n"
            f"{table}\n\n{machines}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    machine = Machine(("torch", "tokformer"))
    for name in args.only:
        row = run(name, args.seed) | {"machine": machine.line("2 torch threads")}
        with JSONL.open("a", encoding="utf-8") as out:
            out.write(json.dumps(row) + "\n")
        print(f"{name}: validation {row['val_curve'][-1][1]:.3f} after {row['steps']} steps", flush=True)
    write_results("birds_quadrant_tokens.md", render(read_jsonl(JSONL)))


if __name__ == "__main__":
    main()
