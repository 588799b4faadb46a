"""How `classify`'s defaults were chosen: variants on small real image sets, beside the pixel baselines.

Data (made here, offline):

- ``digits``: the 1,797 real 8x8 handwritten digits shipped in ``tests/data/digits.npz`` (UCI
  optdigits as scikit-learn distributes it), one folder per digit;
- ``photos``: 1,680 crops (24-48 px, resized to 32) of the 14 photographs scikit-image ships
  (astronaut, camera, coffee, ...); the class is the photograph a crop comes from. Needs
  ``pip install scikit-image``;
- ``shapes``: the built-in generated shapes.

Each variant is one ``tokformer train classify --data DIR`` run with every other option at its
default (1,000 steps of 32, the folder's seeded 10% held out), then ``tokformer evaluate --json``
for the held-out accuracy beside the majority-class and pixel logistic-regression baselines.

    OMP_NUM_THREADS=1 python benchmarks/classify_defaults.py --workers 2   # 18 runs, two at a time

Writes ``benchmarks/results/classify_defaults.md`` (and ``.json``): docs/vision.md's table and
the README's digits row quote it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from harness import RESULTS, Machine, markdown_table, write_results
from PIL import Image

from tokformer.tasks.image_data import save_class_folders

ROOT = Path(__file__).resolve().parents[1]
# variant -> (flags, the data sets it runs on); the first is what `tokformer train classify` does today
VARIANTS: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "**defaults**: local CNN tokenizer, 32 px, patch 16, mean pooling, no flips": ([], ("digits", "photos", "shapes")),
    "patch 8": (["--patch-size", "8"], ("digits", "photos", "shapes")),
    "patch 8, linear patches": (["--patch-size", "8", "--tokenizer", "linear"], ("digits", "photos")),
    "patch 8, horizontal flips": (["--patch-size", "8", "--flip"], ("photos",)),
    "64 px, patch 16": (["--image-size", "64"], ("digits", "photos")),
    "previous defaults: linear patch 8, class token, flips": (
        ["--tokenizer", "linear", "--patch-size", "8", "--pool", "cls", "--flip"], ("digits",)),
}
# the shorter runs on digits (300 steps, patch 8, last evaluation) that decided pooling and flips
SHORT: dict[str, list[str]] = {
    "local tokenizer, class token, flips, lr 1e-3": ["--pool", "cls", "--flip"],
    "local tokenizer, mean pooling, flips, lr 1e-3": ["--flip"],
    "local tokenizer, mean pooling, flips, lr 3e-3": ["--flip", "--lr", "3e-3"],
    "local tokenizer, mean pooling, no flips, lr 3e-3": ["--lr", "3e-3"],
    "linear patches, class token, flips, lr 1e-3": ["--tokenizer", "linear", "--pool", "cls", "--flip"],
}
DATA = ("digits", "photos", "shapes")


def make_digits(root: Path) -> Path:
    data = np.load(ROOT / "tests" / "data" / "digits.npz")
    return save_class_folders(data["images"], data["labels"].astype(int), root)


def make_photos(root: Path, per_class: int = 120, seed: int = 0) -> Path:
    import skimage.data

    names = ["astronaut", "camera", "coffee", "chelsea", "rocket", "hubble_deep_field", "immunohistochemistry",
             "coins", "moon", "page", "text", "brick", "grass", "gravel"]
    rng = np.random.default_rng(seed)
    for name in names:
        image = getattr(skimage.data, name)()
        image = np.stack([image] * 3, -1) if image.ndim == 2 else image[..., :3]
        h, w = image.shape[:2]
        (root / name).mkdir(parents=True)
        for k in range(per_class):
            y, x, side = rng.integers(0, h - 48), rng.integers(0, w - 48), rng.integers(24, 48)
            crop = Image.fromarray(image[y : y + side, x : x + side].astype(np.uint8)).resize((32, 32))
            crop.save(root / name / f"{k}.png")
    return root


def run(data: str, flags: list[str], run_dir: Path) -> dict:
    """Train one variant, then its held-out evaluation (best checkpoint) beside the baselines."""
    tokformer = [sys.executable, "-m", "tokformer.cli"]
    subprocess.run([*tokformer, "train", "classify", "--data", data, "--run-dir", str(run_dir), "-q", *flags],
                   check=True)
    out = subprocess.run([*tokformer, "evaluate", str(run_dir), "--json", "-q"], check=True, capture_output=True,
                         text=True).stdout
    report = json.loads(out)
    evals = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    report["last_eval"] = [row for row in evals if row.get("split") == "eval"][-1]
    return report


def baseline(report: dict, name: str) -> float:
    return next(v["accuracy"] for k, v in report["baselines"].items() if k.startswith(name))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="classify_defaults.md", help="file name under benchmarks/results/")
    parser.add_argument("--workers", type=int, default=1, help="runs at once (give each OMP_NUM_THREADS=1)")
    args = parser.parse_args()
    machine = Machine(("torch", "tokformer", "scikit-image"))
    with tempfile.TemporaryDirectory() as tmp:
        folders = {"digits": make_digits(Path(tmp) / "digits"), "photos": make_photos(Path(tmp) / "photos"),
                   "shapes": "shapes"}
        cells = {f"{label} | {name}": (str(folders[name]), flags)
                 for label, (flags, data_sets) in VARIANTS.items() for name in data_sets}
        cells |= {f"short: {label}": (str(folders["digits"]), ["--patch-size", "8", "--steps", "300", *flags])
                  for label, flags in SHORT.items()}
        with concurrent.futures.ThreadPoolExecutor(args.workers) as pool:  # each run is its own process
            done = pool.map(lambda i, cell: run(*cell, Path(tmp) / "runs" / str(i)), range(len(cells)), cells.values())
            results = dict(zip(cells, done, strict=True))
    any_run = {name: next(r for key, r in results.items() if key.endswith(f"| {name}")) for name in DATA}
    rows = [[label, *(f"{results[f'{label} | {name}']['metrics']['accuracy']:.3f}"
                      if f"{label} | {name}" in results else "" for name in DATA)] for label in VARIANTS]
    rows.append(["*baseline: logistic regression on 8x8 pixels*",
                 *(f"*{baseline(any_run[name], 'logistic'):.3f}*" for name in DATA)])
    rows.append(["*baseline: majority class*", *(f"*{baseline(any_run[name], 'majority'):.3f}*" for name in DATA)])
    short = [[label, f"{results[f'short: {label}']['last_eval']['accuracy']:.3f}"] for label in SHORT]
    text = ("# classify defaults on small real image sets\n\n"
            "`python benchmarks/classify_defaults.py`: one `tokformer train classify --data DIR FLAGS` run per cell "
            "(1,000 steps of 32, every other option at its default, the folder's seeded 10 % held out), then "
            "`tokformer evaluate RUN --json` (held-out top-1 of the best checkpoint) beside the baselines it "
            "prints. One seed per cell.\n\n"
            + markdown_table(["variant", *DATA], rows)
            + "\n\nShorter runs on digits (300 steps, patch 8; held-out top-1 at the last evaluation), which "
              "decided pooling and flips:\n\n" + markdown_table(["flags", "held-out accuracy"], short)
            + f"\n\n{machine.line(f'{torch.get_num_threads()} torch thread(s) per run, {args.workers} at once')}\n")
    write_results(args.out, text)
    (RESULTS / Path(args.out).with_suffix(".json").name).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
