"""The sweep: every model x task x seed trained from scratch, evaluated on held-out images.

Many small models with seeds do not fit the engine's one-run-per-task shape, so this is
a short training loop of its own that reuses the engine's pieces: AdamW with decay on
matrices only and the warmup + cosine schedule (``tokformer.engine.optim``), seeding
(``tokformer.engine.rng``) and progress bars (``tokformer.engine.progress``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tokformer.engine import TrainConfig, build_optimizer, lr_at, progress, seed_everything, set_lr
from tokformer.tasks.birds.data import EXTRA_BIRDS, N_CLASSES, N_SPECIES, TASKS, BirdImages, generate
from tokformer.tasks.birds.models import build_model, parse_spec, prefers_channels_last
from tokformer.tasks.birds.report import write_report
from tokformer.weights import count_parameters

log = logging.getLogger("tokformer.birds")
RUNS_LOG = "runs.jsonl"  # one line per finished training run, written as the sweep goes

# Full-resolution conv stacks (no pooling) dominate the cost: one 64x64 3x3 conv layer costs as
# much as a whole pooled CNN, so the no-pooling family is left to the analysis code and the tests
# (RF 3 px for one layer, 17 px after 8, never near the ~45 px between the corners); pool-d1 (RF 4 px)
# stands in for the shallow end. The extra-budget rows train the strongest CNN (global head) and the
# local-tokenizer Transformer alike for three times the steps.
FULL_MODELS: tuple[str, ...] = (
    "pool-d1", "pool-d2", "pool-d3", "pool-d4", "pool-d5", "pool-d6",
    "global", "mlp", "transformer-l1", "transformer-l2", "transformer-local-l1", "transformer-local-l2",
    "mixer-l2", "global-x3", "transformer-local-l2-x3",
)
# Quick: the same families at one seed, fewer depths, no extra-budget rows.
QUICK_MODELS: tuple[str, ...] = (
    "pool-d1", "pool-d3", "pool-d5", "global", "mlp", "transformer-l2", "transformer-local-l2", "mixer-l2",
)


@dataclass
class BirdsConfig:
    """Sizes of the sweep. :func:`quick_config` and :func:`full_config` are the two presets.

    Attributes:
        image_size: image side in pixels (64: corners ~45 px apart, far beyond a 3x3 stack).
        n_train / n_test: images per task in the training and held-out sets (the test set
            comes from an independent random stream).
        second_size: the test images are also drawn at this side (birds keep their share of
            the image), to see which models carry over to another image size; 0: skip.
        steps / batch_size / lr / weight_decay: the same optimiser budget for every model.
        models: model specs (see :func:`tokformer.tasks.birds.models.parse_spec`).
        tasks: ``count`` and/or ``compare``.
        seeds: one training run per seed; data, weights and batch order all follow it.
        species_aux: weight of an auxiliary loss, the same for every model and task: also
            predict which species appear in the image (multi-label). It is first-order (a
            sum of local detections, so local-readout CNNs learn it too) and gives every
            model species features; without it, a 1-bit same/different signal teaches no
            model anything within this budget (measured: all stay at chance). 0 disables.
        extra_birds: comparison task: chance of a distractor bird in each of the other two
            quadrants (0: exactly the two compared birds).
        device: ``cpu``, ``cuda``, ...
    """

    image_size: int = 64
    n_train: int = 12000
    n_test: int = 1000
    second_size: int = 96
    steps: int = 300
    batch_size: int = 64
    lr: float = 4e-3
    weight_decay: float = 0.05
    models: tuple[str, ...] = FULL_MODELS
    tasks: tuple[str, ...] = TASKS
    seeds: tuple[int, ...] = (0, 1, 2)
    species_aux: float = 1.0
    extra_birds: float = EXTRA_BIRDS
    device: str = "cpu"


def full_config(**overrides) -> BirdsConfig:
    """The full sweep: 15 models x 2 tasks x 3 seeds (about an hour on 2 CPU cores)."""
    return BirdsConfig(**overrides)


def quick_config(**overrides) -> BirdsConfig:
    """A smaller sweep for CI and first contact (under 10 minutes on 2 CPU cores)."""
    values = dict(n_train=6000, n_test=500, steps=250, models=QUICK_MODELS, seeds=(0,))
    return BirdsConfig(**{**values, **overrides})


@dataclass
class RunResult:
    """One trained model on one task with one seed."""

    model: str
    task: str
    seed: int
    accuracy: float
    train_seconds: float
    parameters: int
    accuracy_second: float | None = None  # at ``second_size``; None: the model takes one image size only


@dataclass
class SplitTensors:
    """A split as tensors: images ``[N, 3, H, W]`` uint8, labels ``[N]``, species present
    ``[N, N_SPECIES]`` (the auxiliary targets), plus its metadata."""

    images: Tensor
    labels: Tensor
    species: Tensor
    meta: BirdImages

    @classmethod
    def from_data(cls, data: BirdImages) -> SplitTensors:
        images = torch.from_numpy(data.images).permute(0, 3, 1, 2).contiguous()  # [N, H, W, 3] -> [N, 3, H, W]
        return cls(images, torch.from_numpy(data.labels), torch.from_numpy(data.species_present()), data)


@dataclass
class Sweep:
    """What the sweep produced: per-run numbers, and the seed-0 models kept for the analysis figures."""

    config: BirdsConfig
    results: list[RunResult] = field(default_factory=list)
    models: dict[tuple[str, str], nn.Module] = field(default_factory=dict)  # (model, task) -> trained, seed 0
    test_sets: dict[str, SplitTensors] = field(default_factory=dict)  # task -> first seed's test split


def make_split(cfg: BirdsConfig, task: str, seed: int, split: str, size: int | None = None) -> SplitTensors:
    """The ``train``, ``val`` or ``test`` images of ``task`` for ``seed`` (at side ``size``, default
    the config's), as tensors. Each split is its own random stream: calibration uses ``val``."""
    n = cfg.n_train if split == "train" else cfg.n_test
    return SplitTensors.from_data(generate(task, n, seed, size=size or cfg.image_size, split=split,
                                           extra_birds=cfg.extra_birds))


def to_float(images: Tensor, device: torch.device, channels_last: bool) -> Tensor:
    """uint8 ``[B, 3, H, W]`` -> float in [0, 1] on ``device`` (channels-last for conv nets)."""
    x = images.to(device).float().div_(255)
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


@torch.no_grad()
def accuracy(model: nn.Module, split: SplitTensors, device: torch.device, batch_size: int = 250) -> float:
    """Fraction of ``split`` classified correctly."""
    model.eval()
    cl = prefers_channels_last(model)
    correct = 0
    for i in range(0, len(split.labels), batch_size):
        logits = model(to_float(split.images[i : i + batch_size], device, cl))
        task_logits = logits[:, : N_CLASSES[split.meta.task]]  # the rest are auxiliary species logits
        correct += int((task_logits.argmax(dim=-1).cpu() == split.labels[i : i + batch_size]).sum())
    model.train()
    return correct / len(split.labels)


def train_model(name: str, task: str, train: SplitTensors, cfg: BirdsConfig, seed: int,
                device: torch.device, **model_options: Any) -> tuple[nn.Module, float]:
    """Train model ``name`` (built with ``model_options``) on ``train`` for ``cfg.steps`` steps
    (times the name's ``-xN`` multiple); returns the model and seconds taken."""
    seed_everything(seed)
    steps = cfg.steps * parse_spec(name).budget
    n_classes = N_CLASSES[task]
    n_aux = N_SPECIES if cfg.species_aux > 0 else 0
    model = build_model(name, n_classes + n_aux, cfg.image_size, **model_options).to(device)
    cl = prefers_channels_last(model)
    if cl:
        model = model.to(memory_format=torch.channels_last)
    train_cfg = TrainConfig(steps=steps, batch_size=cfg.batch_size, lr=cfg.lr, weight_decay=cfg.weight_decay,
                            warmup_steps=max(1, steps // 20), seed=seed)
    optimizer = build_optimizer(model, train_cfg)
    order = torch.Generator().manual_seed(seed)
    n = len(train.labels)
    perm, pos = torch.randperm(n, generator=order), 0
    start = time.perf_counter()
    for step in range(steps):
        if pos + cfg.batch_size > n:  # next epoch: a fresh shuffle
            perm, pos = torch.randperm(n, generator=order), 0
        idx = perm[pos : pos + cfg.batch_size]
        pos += cfg.batch_size
        set_lr(optimizer, lr_at(step, train_cfg))
        logits = model(to_float(train.images[idx], device, cl))  # [B, n_classes + n_aux]
        loss = F.cross_entropy(logits[:, :n_classes], train.labels[idx].to(device))
        if n_aux:
            species = train.species[idx].to(device)  # [B, N_SPECIES]
            loss = loss + cfg.species_aux * F.binary_cross_entropy_with_logits(logits[:, n_classes:], species)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), train_cfg.grad_clip)
        optimizer.step()
    return model, time.perf_counter() - start


def run_sweep(cfg: BirdsConfig, *, progress_bar=None, log_path: Path | None = None,
              on_seed_done: Callable[[Sweep], None] | None = None) -> Sweep:
    """Train and test every (seed, task, model); keep the first seed's models for analysis.

    With ``log_path``, each run's result is appended there as one JSON line as soon as it
    is known, so a long sweep can be watched (and a killed one still says what it did);
    ``on_seed_done`` is called with the sweep so far after every seed.
    """
    device = torch.device(cfg.device)
    sweep = Sweep(config=cfg)
    for seed in cfg.seeds:
        for task in cfg.tasks:
            train, test = make_split(cfg, task, seed, "train"), make_split(cfg, task, seed, "test")
            second = make_split(cfg, task, seed, "test", cfg.second_size) if cfg.second_size else None
            sweep.test_sets.setdefault(task, test)
            for name in cfg.models:
                if progress_bar is not None:
                    progress_bar.set_postfix_str(f"seed {seed} {task} {name}")
                model, seconds = train_model(name, task, train, cfg, seed, device)
                acc = accuracy(model, test, device)
                acc_second = accuracy(model, second, device) if second and parse_spec(name).any_size else None
                result = RunResult(name, task, seed, acc, seconds, count_parameters(model), acc_second)
                sweep.results.append(result)
                if log_path is not None:
                    with log_path.open("a") as f:
                        f.write(json.dumps(asdict(result)) + "\n")
                log.info("seed %d  %-7s  %-15s acc %.3f  (%.0fs)", seed, task, name, acc, seconds)
                if seed == cfg.seeds[0]:
                    sweep.models[(name, task)] = model.cpu().eval()
                if progress_bar is not None:
                    progress_bar.update(1)
        if on_seed_done is not None:
            on_seed_done(sweep)
    return sweep


def _seeds_done(sweep: Sweep) -> int:
    return len({r.seed for r in sweep.results})


def run_experiment(
    out_dir: str | Path = "birds_report",
    *,
    quick: bool = False,
    seeds: Sequence[int] | None = None,
    device: str = "cpu",
    quiet: bool = False,
    config: BirdsConfig | None = None,
) -> Path:
    """Run the whole birds experiment and write its report; returns the path of ``report.md``.

    This is what ``tokformer birds`` calls. Trains every model of the sweep on both tasks
    for every seed, then writes ``report.md``, ``results.json`` and the figures into
    ``out_dir``.

    Args:
        out_dir: report directory (created if missing).
        quick: the small preset (:func:`quick_config`, under 10 minutes on 2 CPU cores)
            instead of the full one (:func:`full_config`).
        seeds: override the preset's seeds.
        device: torch device for training.
        quiet: no progress bar. Per-run lines go to the ``tokformer.birds`` logger (the CLI
            shows them unless ``--quiet``).
        config: a complete config, overriding ``quick``, ``seeds`` and ``device``.
    """
    if config is None:
        overrides = {"device": device} | ({"seeds": tuple(seeds)} if seeds else {})
        config = quick_config(**overrides) if quick else full_config(**overrides)
    start = time.perf_counter()
    total = len(config.seeds) * len(config.tasks) * len(config.models)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / RUNS_LOG).unlink(missing_ok=True)
    command = "tokformer birds" + (" --quick" if quick else "") + (
        f" --seeds {','.join(map(str, config.seeds))}" if seeds else "")
    report = lambda sweep: write_report(sweep, out, elapsed=time.perf_counter() - start, command=command)
    with progress(not quiet, total=total, desc="birds", unit="run") as bar:
        # a report after every seed but the last: a long run is readable (and useful) before it ends
        sweep = run_sweep(config, progress_bar=bar, log_path=out / RUNS_LOG,
                          on_seed_done=lambda s: report(s) if _seeds_done(s) < len(config.seeds) else None)
    return report(sweep)
