"""Why the sweep's Transformer compares at chance: what its tokens know, layer by layer (linear probes).

The end-to-end local-tokenizer Transformer counts well but compares at chance at every budget
(``docs/birds/report.md``). Two explanations predict different things:

* **No features**: the tokens of the top-right quadrant do not say which species sits there, so
  there is nothing to compare. Then a linear probe reads the top-right bird's species from those
  tokens no better than from an untrained model's.
* **No route**: each quadrant's tokens name their own bird, but attention never brings the
  bottom-left bird's species into the top-right tokens (or anywhere the readout looks). Then the
  top-right tokens tell the top-right species well at every layer, and the bottom-left species
  no better after the blocks than before them.

For each seed this trains ``transformer-local-l2`` on the comparison and on counting at the sweep's
1x budget with the sweep's settings (:func:`~tokformer.tasks.birds.experiment.train_model`, the
engine), keeps an untrained one of the same seed as the floor, and probes three points of each
(the tokens as they enter the encoder, position code included; after block 1; after block 2)
on the comparison's images: a multinomial logistic regression is fitted on the seed's
**validation** images and scored on its test images. Targets: the top-right bird's species, the
bottom-left bird's species, and the label; features: the four top-right tokens (concatenated), or
the mean of all patch tokens (what the readout sees).

    python benchmarks/birds_probe.py      # 3 seeds: 6 trainings (about 5 min on 2 cores), then the probes

Writes ``benchmarks/results/birds_probe.md`` (and ``.jsonl``, one line per probe).
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch
import torch.nn.functional as F
from harness import RESULTS, Machine, markdown_table, over_seeds, write_results
from torch import Tensor, nn

from tokformer.engine import seed_everything
from tokformer.tasks.birds.data import BOTTOM_LEFT, N_CLASSES, N_SPECIES, TOP_RIGHT, slot_of
from tokformer.tasks.birds.experiment import BirdsConfig, full_config, train_model
from tokformer.tasks.birds.models import build_model
from tokformer.tasks.birds.stream import SplitTensors, make_split, to_float

MODEL = "transformer-local-l2"
TRAINED_ON = ("compare", "count", "untrained")
STAGES = ("tokens", "block 1", "block 2")
TARGETS = ("top-right species", "bottom-left species", "same species?")
FEATURES = ("top-right tokens", "mean of patch tokens")


def species_at(split: SplitTensors) -> np.ndarray:
    """``[n, 4]`` the species in each quadrant slot of every image (-1: none)."""
    meta = split.meta
    at = np.full((len(meta), 4), -1)
    at[meta.bird_image, slot_of(meta.bird_xy, meta.size)] = meta.bird_species
    return at


def quadrant_tokens(grid: int, slot: int) -> list[int]:
    """Indices (after the class token, index 0) of the patch tokens of quadrant ``slot`` on a ``grid`` x
    ``grid`` token grid, slots numbered like the generator's (2 x bottom + right)."""
    half, bottom, right = grid // 2, slot // 2, slot % 2
    return [1 + r * grid + c for r in range(bottom * half, (bottom + 1) * half)
            for c in range(right * half, (right + 1) * half)]


@torch.no_grad()
def stage_outputs(model: nn.Module, images: Tensor, batch_size: int = 250) -> dict[str, Tensor]:
    """Stage name -> ``[n, 1 + N, d]``: the encoder's input tokens and each block's output."""
    captured: dict[str, list[Tensor]] = {stage: [] for stage in STAGES}
    modules = [model.embedder, *model.encoder.blocks]
    hooks = [m.register_forward_hook(lambda _m, _i, out, stage=stage: captured[stage].append(out))
             for m, stage in zip(modules, STAGES, strict=True)]
    model.eval()
    try:
        for i in range(0, len(images), batch_size):
            model(to_float(images[i:i + batch_size], torch.device("cpu"), channels_last=False))
    finally:
        for hook in hooks:
            hook.remove()
    return {stage: torch.cat(parts) for stage, parts in captured.items()}


def features(tokens: Tensor, grid: int) -> dict[str, Tensor]:
    """What each probe reads from ``[n, 1 + N, d]`` tokens."""
    return {"top-right tokens": tokens[:, quadrant_tokens(grid, TOP_RIGHT)].flatten(1),  # [n, N/4 * d]
            "mean of patch tokens": tokens[:, 1:].mean(dim=1)}  # [n, d]


def probe_accuracy(train: tuple[Tensor, Tensor], test: tuple[Tensor, Tensor], iterations: int = 200) -> float:
    """Test accuracy of an L2-regularised multinomial logistic regression fitted on ``train`` = (features
    ``[n, F]``, labels ``[n]``), features standardised with the training statistics (deterministic:
    full batch L-BFGS from zero)."""
    x, y = train
    mean, std = x.mean(dim=0), x.std(dim=0).clamp_min(1e-6)
    x = (x - mean) / std
    classes = int(max(y.max(), test[1].max())) + 1
    weight = torch.zeros(x.shape[1] + 1, classes, requires_grad=True)
    optimizer = torch.optim.LBFGS([weight], max_iter=iterations, line_search_fn="strong_wolfe")

    def loss() -> Tensor:
        optimizer.zero_grad()
        value = F.cross_entropy(x @ weight[:-1] + weight[-1], y) + 1e-3 * weight[:-1].square().sum()
        value.backward()
        return value

    optimizer.step(loss)
    with torch.no_grad():
        logits = (test[0] - mean) / std @ weight[:-1] + weight[-1]
        return float((logits.argmax(dim=-1) == test[1]).float().mean())


def model_for(trained_on: str, cfg: BirdsConfig, seed: int) -> nn.Module:
    if trained_on == "untrained":
        seed_everything(seed)
        return build_model(MODEL, N_CLASSES["compare"] + N_SPECIES, cfg.image_size, token_norm=cfg.token_norm)
    return train_model(MODEL, trained_on, cfg, seed).model


def probe_seed(cfg: BirdsConfig, seed: int, n: int) -> list[dict]:
    splits = {split: make_split(cfg, "compare", seed, split, n) for split in ("val", "test")}
    targets = {split: {"top-right species": torch.from_numpy(species_at(s)[:, TOP_RIGHT]),
                       "bottom-left species": torch.from_numpy(species_at(s)[:, BOTTOM_LEFT]),
                       "same species?": s.labels} for split, s in splits.items()}
    rows = []
    for trained_on in TRAINED_ON:
        model = model_for(trained_on, cfg, seed).cpu()
        grid = model.grid_size[0]
        reads = {split: {stage: features(t, grid) for stage, t in stage_outputs(model, s.images).items()}
                 for split, s in splits.items()}
        for stage in STAGES:
            for feature in FEATURES:
                for target in TARGETS:
                    acc = probe_accuracy((reads["val"][stage][feature], targets["val"][target]),
                                         (reads["test"][stage][feature], targets["test"][target]))
                    rows.append({"seed": seed, "trained_on": trained_on, "stage": stage, "feature": feature,
                                 "target": target, "accuracy": acc})
    return rows


def majority(cfg: BirdsConfig, seed: int, n: int) -> dict[str, float]:
    """Each target's most frequent value's share of the test images (what a probe reading nothing gets)."""
    test, val = (make_split(cfg, "compare", seed, split, n) for split in ("test", "val"))
    out = {}
    for target, column in (("top-right species", TOP_RIGHT), ("bottom-left species", BOTTOM_LEFT)):
        top = np.bincount(species_at(val)[:, column]).argmax()
        out[target] = float((species_at(test)[:, column] == top).mean())
    out["same species?"] = float((test.labels == torch.bincount(val.labels).argmax()).float().mean())
    return out


def report(rows: list[dict], floors: list[dict[str, float]], machine: str, cfg: BirdsConfig, n: int) -> str:
    seeds = sorted({r["seed"] for r in rows})
    tables = []
    for feature in FEATURES:
        body = []
        for trained_on in TRAINED_ON:
            for stage in STAGES:
                accs = {t: [r["accuracy"] for r in rows if (r["trained_on"], r["stage"], r["feature"], r["target"])
                            == (trained_on, stage, feature, t)] for t in TARGETS}
                body.append([trained_on, stage, *(over_seeds(accs[t]) for t in TARGETS)])
        body.append(["(most frequent value)", "", *(over_seeds([f[t] for f in floors]) for t in TARGETS)])
        tables += [f"**Probe on the {feature}** (test accuracy, mean ± sample std over seeds {seeds}, then each "
                   "seed):", "", markdown_table(["model trained on", "read after", *TARGETS], body), ""]
    return "\n".join([
        "# What the sweep's Transformer's tokens know (linear probes)", "",
        f"`python benchmarks/birds_probe.py`: `{MODEL}` trained through the engine with the sweep's settings "
        f"({cfg.steps} steps of {cfg.batch_size} fresh images, its calibrated learning rate, the auxiliary "
        f"species-present loss at weight {cfg.species_aux:g}), per seed on the comparison, on counting, and "
        "untrained. Each probe is a multinomial logistic regression on standardised features, fitted on the "
        f"seed's {n} comparison **validation** images and scored on its {n} comparison test images. "
        "\"tokens\" are the encoder's input (patch embedding + 2-D position code); \"block k\" its k-th "
        "block's output. In the twins scene the top-right and bottom-left birds are the same species in half "
        "the images, so the top-right tokens predict the bottom-left species above the most frequent value "
        "without any mixing: the question is whether the blocks raise it.", "",
        *tables, machine, ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--images", type=int, default=1000, help="validation and test images per seed")
    args = parser.parse_args()
    machine, cfg = Machine(), full_config()
    rows, floors = [], []
    for seed in args.seeds:
        rows += probe_seed(cfg, seed, args.images)
        floors.append(majority(cfg, seed, args.images))
        print(f"seed {seed} done", flush=True)
    line = machine.line(f"{torch.get_num_threads()} torch threads")
    (RESULTS / "birds_probe.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(write_results("birds_probe.md", report(rows, floors, line, cfg, args.images)))


if __name__ == "__main__":
    main()
