"""Why the birds Transformers could not find the compared birds: how far apart their position codes are.

Attention relates the top-right bird to the bottom-left one only if a token's position is legible to
its queries and keys. Each token model adds a position code to a standardised patch embedding
(norm sqrt(d) = 8 at d = 64). Two measures per code and grid, computed exactly from the codes:

* mean cosine between the codes of two distinct cells (1: every cell looks the same);
* spread: the mean distance of a cell's code from the mean code, the part that says *which* cell.

The 2-D sin/cos code (base 10,000, as MAE and timm) has a fixed norm of sqrt(d / 2), but on the
small grids here most of its frequencies barely turn between neighbouring cells, so its cells are
nearly parallel. A learned table (``-lpos`` models, :data:`~tokformer.tasks.birds.models.LEARNED_POSITION_STD`)
drawn at a standardised token's scale starts with cells as long as a token and nearly orthogonal;
drawn at timm's 0.02, it starts 50x smaller than the token it is added to.

The second table trains the sweep's ``transformer-local-l2-lpos`` on the twins comparison with its
table drawn at timm's 0.02 instead (the sweep's settings at lr 3e-3, each seed scored on its
validation images), beside the runs of ``benchmarks/birds_calibration.py`` at the same learning rate
with the sin/cos code and with the table at 1.0 (read from its results, not rerun).

    python benchmarks/birds_positions.py               # the geometry, and the runs not yet in the results
    python benchmarks/birds_positions.py --report      # the tables from what ran

Appends to ``benchmarks/results/birds_positions.jsonl`` and renders ``birds_positions.md``.
"""

from __future__ import annotations

import argparse
import json
import time
from unittest import mock

import torch
from harness import RESULTS, Machine, latest_per_process, markdown_table, over_seeds, read_jsonl, write_results

from tokformer.positional import SinCos2DPositions
from tokformer.tasks.birds import models
from tokformer.tasks.birds.experiment import BirdsConfig, train_model
from tokformer.tasks.birds.stream import accuracy, make_split
from tokformer.tokenizers.image import grid_positions

JSONL = RESULTS / "birds_positions.jsonl"
CALIBRATION = RESULTS / "birds_calibration.jsonl"
D_MODEL = 64
GRIDS = {"local tokenizer, 64 px (4 x 4)": (4, 4), "local tokenizer, 96 px (6 x 6)": (6, 6),
         "linear patches, 64 px (8 x 8)": (8, 8)}
MODEL, LR, SEEDS, SMALL_STD = "transformer-local-l2-lpos", 3e-3, (0, 1, 2), 0.02


def geometry(codes: torch.Tensor) -> tuple[float, float, float]:
    """``[N, d]`` codes -> (mean norm, mean cosine between distinct cells, spread about the mean code)."""
    n = len(codes)
    unit = torch.nn.functional.normalize(codes, dim=-1)
    cosine = ((unit @ unit.T).sum() - n) / (n * (n - 1))
    spread = (codes - codes.mean(dim=0)).norm(dim=-1).mean()
    return codes.norm(dim=-1).mean().item(), cosine.item(), spread.item()


def geometry_table() -> str:
    rows = []
    for grid_name, grid in GRIDS.items():
        sincos = SinCos2DPositions(D_MODEL)(grid_positions(*grid)[None])[0]  # [N, d]
        generator = torch.Generator().manual_seed(0)
        codes = {"2-D sin/cos, base 10,000": sincos}
        for std in (models.LEARNED_POSITION_STD, SMALL_STD):
            codes[f"learned table at init, std {std:g} (seed 0)"] = torch.randn(len(sincos), D_MODEL,
                                                                                  generator=generator) * std
        rows += [[grid_name, code, *(f"{v:.3f}" for v in geometry(table))] for code, table in codes.items()]
    return markdown_table(["grid", "position code", "norm", "mean cosine between cells", "spread"], rows)


def run(seed: int) -> dict:
    """The -lpos Transformer with its table drawn at timm's 0.02, scored on ``seed``'s validation images."""
    cfg = BirdsConfig(lr=LR, per_family={})
    with mock.patch.object(models, "LEARNED_POSITION_STD", SMALL_STD):  # read when the model is built
        trained = train_model(MODEL, "compare", cfg, seed)
    val = make_split(cfg, "compare", seed, "val", cfg.n_test)
    return {"model": MODEL, "std": SMALL_STD, "lr": LR, "steps": cfg.steps, "seed": seed,
            "val_accuracy": round(accuracy(trained.model, val, torch.device("cpu")), 4),
            "seconds": round(trained.seconds, 1)}


def calibration_runs(model: str) -> list[float]:
    """``model``'s validation accuracies at lr :data:`LR`, the warmup and budget :func:`run` trains with, in
    the calibration's results, in seed order."""
    cfg = BirdsConfig()
    rows = [r for r in read_jsonl(CALIBRATION) if (r["model"], r["lr"], r["warmup"], r["steps"], r["task"]) ==
            (model, LR, cfg.warmup, cfg.steps, "compare") and r.get("token_norm") == cfg.token_norm]
    return [r["val_accuracy"] for r in sorted(rows, key=lambda r: r["seed"])]


def render(rows: list[dict]) -> str:
    small = [r["val_accuracy"] for r in sorted(rows, key=lambda r: r["seed"])]
    runs = markdown_table(["position code", "validation accuracy, comparison", "source"], [
        ["2-D sin/cos (`transformer-local-l2`)", over_seeds(calibration_runs("transformer-local-l2")),
         "birds_calibration.jsonl"],
        [f"learned table, std {SMALL_STD:g} (timm's)", over_seeds(small), "this script"],
        [f"learned table, std {models.LEARNED_POSITION_STD:g} (`transformer-local-l2-lpos`)",
         over_seeds(calibration_runs(MODEL)), "birds_calibration.jsonl"]])
    machines = "\n".join(f"- {m}" for m in latest_per_process([r["machine"] for r in rows]))
    return ("# birds: position codes the token models add\n\n"
            "`python benchmarks/birds_positions.py`. Each code as it is added to a standardised patch embedding, "
            f"whose norm is sqrt({D_MODEL}) = {D_MODEL ** 0.5:g}. *Mean cosine*: between the codes of two distinct "
            "cells (1: the cells look the same). *Spread*: the mean distance of a cell's code from the mean code, "
            "the part that says which cell it is.\n\n"
            f"{geometry_table()}\n\n"
            "## What the sweep's 2-layer local-tokenizer Transformer learns with each\n\n"
            f"The twins comparison, the sweep's settings at lr {LR:g} ({BirdsConfig().steps} steps of 64 fresh "
            "images), scored on each seed's 1,000 validation images (chance 0.5; a guesser's standard error 0.016). "
            "Cells: mean ± sample std (ddof 1) over seeds, then each seed.\n\n"
            f"{runs}\n\nWhere this script's runs trained:\n\n{machines}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    parser.add_argument("--report", action="store_true", help="only write the tables from the runs so far")
    args = parser.parse_args()
    if not args.report:
        done = {r["seed"] for r in read_jsonl(JSONL)}
        machine = Machine(("torch", "tokformer"))
        for seed in (s for s in args.seeds if s not in done):
            row = run(seed) | {"machine": machine.line(f"{torch.get_num_threads()} torch thread(s)"),
                               "time": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
            with JSONL.open("a", encoding="utf-8") as out:
                out.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
    write_results("birds_positions.md", render(read_jsonl(JSONL)))


if __name__ == "__main__":
    main()
