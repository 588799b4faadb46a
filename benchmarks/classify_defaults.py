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

    python benchmarks/classify_defaults.py --out benchmarks/results/classify_defaults.md
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

from tokformer.tasks.image_data import save_class_folders

ROOT = Path(__file__).resolve().parents[1]
# name -> flags; "defaults" is what `tokformer train classify` does today
VARIANTS: dict[str, list[str]] = {
    "defaults (local CNN tokenizer, patch 16, mean pool, no flip)": [],
    "patch 8": ["--patch-size", "8"],
    "patch 8, linear patches": ["--patch-size", "8", "--tokenizer", "linear"],
    "patch 8, horizontal flips": ["--patch-size", "8", "--flip"],
    "64 px, patch 16": ["--image-size", "64"],
    "previous defaults (linear, patch 8, class token, flips)": ["--tokenizer", "linear", "--patch-size", "8",
                                                                "--pool", "cls", "--flip"],
}


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
    tokformer = [sys.executable, "-m", "tokformer.cli"]
    subprocess.run([*tokformer, "train", "classify", "--data", data, "--run-dir", str(run_dir), "-q", *flags],
                   check=True)
    out = subprocess.run([*tokformer, "evaluate", str(run_dir), "--json"], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out[out.index("{"):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="benchmarks/results/classify_defaults.md")
    parser.add_argument("--data", default="digits,photos,shapes")
    args = parser.parse_args()
    lines = ["| data | variant | held-out accuracy | majority | pixel logistic regression |",
             "|---|---|---:|---:|---:|"]
    with tempfile.TemporaryDirectory() as tmp:
        makers = {"digits": make_digits, "photos": make_photos}
        for name in args.data.split(","):
            data = str(makers[name](Path(tmp) / name)) if name in makers else name
            for label, flags in VARIANTS.items():
                report = run(data, flags, Path(tmp) / "runs" / f"{name}-{len(lines)}")
                base = {k.split(" ")[0]: v["accuracy"] for k, v in report["baselines"].items()}
                lines.append(f"| {name} | {label} | {report['metrics']['accuracy']:.3f} | "
                             f"{base.get('majority', float('nan')):.3f} | {base.get('logistic', float('nan')):.3f} |")
                print(lines[-1], flush=True)
    Path(args.out).write_text("# classify defaults on small real image sets\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
