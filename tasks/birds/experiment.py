"""The sweep: every model x task x seed trained from scratch, evaluated on held-out images.

Every model trains on fresh images at every step (:class:`TrainStream`: no image is seen twice,
so no family wins by memorising a small training set), the same images in the same order for
every model of a (task, seed); validation and test sets are fixed, each its own random stream.

Many small models with seeds do not fit the engine's one-run-per-task shape, so this is
a short training loop of its own that reuses the engine's pieces: AdamW with decay on
matrices only and the warmup + cosine schedule (``tokformer.engine.optim``), seeding
(``tokformer.engine.rng``) and progress bars (``tokformer.engine.progress``).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from tokformer.engine import TrainConfig, build_optimizer, lr_at, progress, seed_everything, set_lr
from tokformer.errors import UsageError
from tokformer.tasks.birds.data import EXTRA_BIRDS, N_CLASSES, N_SPECIES, TASKS, BirdImages, Scene, generate
from tokformer.tasks.birds.models import build_model, parse_spec, prefers_channels_last
from tokformer.tasks.birds.report import write_report
from tokformer.weights import count_parameters

log = logging.getLogger("tokformer.birds")
RUNS_LOG = "runs.jsonl"  # one line per finished training run, written as the sweep goes
SWEEP_FILE = "sweep.json"  # the config a report directory's runs belong to: what makes a resume safe
MODELS_DIR = "models"  # the first seed's trained models, so a resumed sweep can still draw its analysis figures

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
# family -> (learning rate, warmup fraction) for the sweep: benchmarks/birds_calibration.py's choice on
# validation images (benchmarks/results/birds_calibration.md; the token models' among their runs with
# standardised tokens). Both Transformers sit at chance at every learning rate of the grid at this budget,
# so their choice is noise. A family not listed trains at BirdsConfig.lr and .warmup.
CALIBRATED: dict[str, tuple[float, float]] = {
    "pool": (0.01, 0.05), "global": (0.003, 0.05), "mlp": (0.001, 0.05), "transformer": (0.01, 0.05),
    "transformer-local": (0.003, 0.05), "mixer": (0.003, 0.05),
}
# Quick: the same families at one seed, fewer depths, no extra-budget rows.
QUICK_MODELS: tuple[str, ...] = (
    "pool-d1", "pool-d3", "pool-d5", "global", "mlp", "transformer-l2", "transformer-local-l2", "mixer-l2",
)


@dataclass
class BirdsConfig:
    """Sizes of the sweep. :func:`quick_config` and :func:`full_config` are the two presets.

    Attributes:
        image_size: image side in pixels (64: corners ~45 px apart, far beyond a 3x3 stack).
        n_test: images per task in the held-out test set (and in the validation set the
            calibration uses), each an independent random stream; training images are fresh
            at every step (``steps * batch_size`` per run).
        second_size: the test images are also drawn at this side (birds keep their share of
            the image), to see which models carry over to another image size; 0: skip.
        steps / batch_size / lr / weight_decay: the same optimiser budget for every model.
        warmup: linear warmup over this fraction of a run's steps (at least one), then cosine.
        per_family: family -> (lr, warmup) overriding ``lr`` and ``warmup`` for that family's models
            (default :data:`CALIBRATED`; ``{}``: one setting for all, as the calibration runs use).
        models: model specs (see :func:`tokformer.tasks.birds.models.parse_spec`).
        tasks: ``count`` and/or ``compare``.
        seeds: one training run per seed; data, weights and batch order all follow it.
        species_aux: weight of an auxiliary loss, the same for every model and task: also
            predict which species appear in the image (multi-label). It is first-order (a
            sum of local detections, so local-readout CNNs learn it too) and gives every
            model species features; without it, a 1-bit same/different signal teaches no
            model anything within this budget (measured: all stay at chance). 0 disables.
        scene: comparison layout (:mod:`tokformer.tasks.birds.data`): ``twins``, where only the
            compared pair decides, or ``pair`` (the first version's).
        extra_birds: ``scene="pair"``: chance of a distractor bird in each of the other two
            quadrants (0: exactly the two compared birds).
        token_norm: what the token models (Transformers, token mixer) do to each patch embedding
            before the position code is added (:func:`tokformer.tasks.birds.models.token_embedder`):
            ``standardise``, ``affine`` (a LayerNorm with a learned gain) or ``none`` (the first
            version's tokens, whose scale drowned the positions).
        device: ``cpu``, ``cuda``, ...
    """

    image_size: int = 64
    n_test: int = 1000
    second_size: int = 96
    steps: int = 300
    batch_size: int = 64
    lr: float = 4e-3
    warmup: float = 0.05
    per_family: dict[str, tuple[float, float]] = field(default_factory=lambda: dict(CALIBRATED))
    weight_decay: float = 0.05
    models: tuple[str, ...] = FULL_MODELS
    tasks: tuple[str, ...] = TASKS
    seeds: tuple[int, ...] = (0, 1, 2)
    species_aux: float = 1.0
    scene: Scene = "twins"
    extra_birds: float = EXTRA_BIRDS
    token_norm: str = "standardise"
    device: str = "cpu"


def full_config(**overrides) -> BirdsConfig:
    """The full sweep: 15 models x 2 tasks x 3 seeds (about an hour on 2 CPU cores)."""
    return BirdsConfig(**overrides)


def quick_config(**overrides) -> BirdsConfig:
    """A smaller sweep for CI and first contact (under 10 minutes on 2 CPU cores)."""
    values = dict(n_test=500, steps=250, models=QUICK_MODELS, seeds=(0,))
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
    """The ``val`` or ``test`` images of ``task`` for ``seed`` (at side ``size``, default the
    config's), as tensors. Each split is its own random stream: calibration uses ``val``."""
    if split == "train":
        raise ValueError("training images come from a TrainStream (fresh at every step), not a fixed split")
    return SplitTensors.from_data(generate(task, cfg.n_test, seed, size=size or cfg.image_size, split=split,
                                           extra_birds=cfg.extra_birds, scene=cfg.scene))


class TrainStream:
    """Fresh training images for every step: batch ``k`` is images ``k * B .. (k + 1) * B`` of the
    split's never-repeating stream (chunks 0, 1, 2, ... of :func:`generate`).

    Chunks are generated when first asked for and kept, so every model of a (task, seed) trains
    on the same images in the same order and the drawing is paid once: about 2 ms an image at
    64 px, and 12 kB each in memory (the longest run of the full sweep holds about 0.7 GB).
    """

    chunk_size = 512

    def __init__(self, cfg: BirdsConfig, task: str, seed: int) -> None:
        self.cfg, self.task, self.seed = cfg, task, seed
        self._chunks: dict[int, tuple[Tensor, Tensor, Tensor]] = {}

    def _chunk(self, index: int) -> tuple[Tensor, Tensor, Tensor]:
        if index not in self._chunks:
            data = generate(self.task, self.chunk_size, self.seed, size=self.cfg.image_size, split="train",
                            extra_birds=self.cfg.extra_birds, scene=self.cfg.scene, chunk=index)
            split = SplitTensors.from_data(data)
            self._chunks[index] = (split.images, split.labels, split.species)
        return self._chunks[index]

    def batch(self, step: int) -> tuple[Tensor, Tensor, Tensor]:
        """Images ``[B, 3, H, W]`` uint8, labels ``[B]``, species present ``[B, N_SPECIES]`` of ``step``."""
        start, stop = step * self.cfg.batch_size, (step + 1) * self.cfg.batch_size
        parts = []
        for index in range(start // self.chunk_size, (stop - 1) // self.chunk_size + 1):
            lo = max(start - index * self.chunk_size, 0)
            hi = min(stop - index * self.chunk_size, self.chunk_size)
            parts.append([t[lo:hi] for t in self._chunk(index)])
        images, labels, species = (torch.cat(ts) if len(ts) > 1 else ts[0] for ts in zip(*parts, strict=True))
        return images, labels, species

    def inputs(self, step: int, device: torch.device, channels_last: bool) -> tuple[Tensor, Tensor, Tensor]:
        """What :func:`fit` feeds the model at ``step``: the batch's images as floats in [0, 1] on
        ``device``, its labels and species present."""
        images, labels, species = self.batch(step)
        return to_float(images, device, channels_last), labels, species


def to_float(images: Tensor, device: torch.device, channels_last: bool) -> Tensor:
    """uint8 ``[B, 3, H, W]`` -> float in [0, 1] on ``device`` (channels-last for conv nets)."""
    x = images.to(device).float().div_(255)
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


def accuracy(model: nn.Module, split: SplitTensors, device: torch.device, batch_size: int = 250) -> float:
    """Fraction of ``split`` classified correctly."""
    cl, classes = prefers_channels_last(model), N_CLASSES[split.meta.task]  # the rest are auxiliary species logits
    return batched_accuracy(model, lambda rows: model(to_float(split.images[rows], device, cl))[:, :classes],
                            split.labels, batch_size)


@torch.no_grad()
def batched_accuracy(model: nn.Module, logits: Callable[[slice], Tensor], labels: Tensor, batch_size: int) -> float:
    """Fraction of ``labels`` that the argmax of ``logits(rows)`` gets right, ``batch_size`` rows at a time,
    with ``model`` in eval mode meanwhile (dropout off, norms on their running statistics)."""
    model.eval()
    correct = 0
    for i in range(0, len(labels), batch_size):
        rows = slice(i, i + batch_size)
        correct += int((logits(rows).argmax(dim=-1).cpu() == labels[rows]).sum())
    model.train()
    return correct / len(labels)


def train_model(name: str, task: str, train: TrainStream, cfg: BirdsConfig, seed: int,
                device: torch.device, **model_options: Any) -> tuple[nn.Module, float]:
    """Train model ``name`` (built with ``model_options``, initialised from ``seed``) on ``train``'s
    fresh batches for ``cfg.steps`` steps (times the name's ``-xN`` multiple); returns the model and
    the seconds taken (image drawing excluded: the stream's chunks are shared by the models)."""
    seed_everything(seed)
    spec = parse_spec(name)
    lr, warmup = cfg.per_family.get(spec.family, (cfg.lr, cfg.warmup))
    model = build_model(name, _n_outputs(task, cfg), cfg.image_size, token_norm=cfg.token_norm,
                        **model_options).to(device)
    if prefers_channels_last(model):
        model = model.to(memory_format=torch.channels_last)
    seconds = fit(model, task, train, cfg, steps=cfg.steps * spec.budget, lr=lr, warmup=warmup, seed=seed,
                  species_aux=cfg.species_aux)
    return model, seconds


def fit(model: nn.Module, task: str, train: TrainStream, cfg: BirdsConfig, *, steps: int, lr: float,
        warmup: float, seed: int, species_aux: float) -> float:
    """The sweep's training loop, shared by every track: AdamW (decay on matrices only), warmup +
    cosine, gradient clipping, fresh batches from ``train`` (a :class:`TrainStream`, or any stream
    with its ``inputs``); with ``species_aux`` > 0 the logits past the task's classes also predict
    the species present. Returns the seconds spent training (drawing the inputs excluded)."""
    device = next(model.parameters()).device
    cl = prefers_channels_last(model)
    n_classes = N_CLASSES[task]
    train_cfg = TrainConfig(steps=steps, batch_size=cfg.batch_size, lr=lr, weight_decay=cfg.weight_decay,
                            warmup_steps=max(1, round(warmup * steps)), seed=seed)
    optimizer = build_optimizer(model, train_cfg)
    trainable = [p for p in model.parameters() if p.requires_grad]
    seconds = 0.0
    for step in range(steps):
        inputs, labels, species = train.inputs(step, device, cl)  # [B, 3, H, W] (or tokens), [B], [B, N_SPECIES]
        start = time.perf_counter()
        set_lr(optimizer, lr_at(step, train_cfg))
        logits = model(inputs)  # [B, n_classes (+ N_SPECIES)]
        loss = F.cross_entropy(logits[:, :n_classes], labels.to(device))
        if species_aux > 0:
            aux = F.binary_cross_entropy_with_logits(logits[:, n_classes:], species.to(device))
            loss = loss + species_aux * aux
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(trainable, train_cfg.grad_clip)
        optimizer.step()
        seconds += time.perf_counter() - start
    return seconds


def _model_path(out: Path, name: str, task: str) -> Path:
    return out / MODELS_DIR / f"{name}-{task}.safetensors"


def _write_whole(path: Path, write: Callable[[Path], None]) -> None:
    """``write`` into a temporary file beside ``path``, then rename it into place: ``path`` appears whole
    or not at all (the engine's atomic writers live in the store, a layer above tasks)."""
    path.parent.mkdir(exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)


def _n_outputs(task: str, cfg: BirdsConfig) -> int:
    """A sweep model's logits: the task's classes, then the species present when the auxiliary loss is on."""
    return N_CLASSES[task] + (N_SPECIES if cfg.species_aux > 0 else 0)


def _config_record(cfg: BirdsConfig) -> dict[str, Any]:
    """What decides a sweep's numbers (the device is left out: where it ran is not what it is)."""
    return {k: v for k, v in json.loads(json.dumps(asdict(cfg))).items() if k != "device"}


def finished_runs(out: Path, cfg: BirdsConfig) -> list[RunResult]:
    """The runs a sweep of ``cfg`` already finished in ``out`` (a resumed sweep skips them), after
    checking that ``out`` is free or holds a sweep of that same config; [] for a new sweep.

    A first-seed run whose saved model is missing is not counted: the analysis needs the model.
    Never touches a folder it did not write: a non-empty folder without ``sweep.json``, or one
    whose sweep had another config, is refused.
    """
    record = out / SWEEP_FILE
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} is a file, not a report folder; choose another --out")
    if not record.exists():
        if out.exists() and any(out.iterdir()):
            raise UsageError(f"{out} is not empty and holds no birds sweep; choose another --out")
        return []
    try:
        previous = json.loads(record.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise UsageError(f"{record} cannot be read ({error}); choose another --out") from None
    wanted = _config_record(cfg)
    differs = sorted(k for k in wanted.keys() | previous.keys() if previous.get(k) != wanted.get(k))
    if differs:
        shown = ", ".join(f"{k} {previous.get(k)!r} there, {wanted.get(k)!r} now" for k in differs[:3])
        raise UsageError(f"{out} holds a birds sweep of another configuration ({shown}); choose another --out, "
                         "or delete it to start over")
    done: dict[tuple[str, str, int], RunResult] = {}
    lines = (out / RUNS_LOG).read_text().splitlines() if (out / RUNS_LOG).exists() else []
    for line in lines:
        try:
            run = RunResult(**json.loads(line))
        except (json.JSONDecodeError, TypeError):
            continue  # a line cut short by a crash: that run is redone
        if run.seed != cfg.seeds[0] or _model_path(out, run.model, run.task).exists():
            done[(run.model, run.task, run.seed)] = run
    return list(done.values())


def run_sweep(cfg: BirdsConfig, *, progress_bar=None, out: Path | None = None,
              on_seed_done: Callable[[Sweep], None] | None = None) -> Sweep:
    """Train and test every (seed, task, model); keep the first seed's models for analysis.

    With ``out``, the sweep lives in that folder: ``sweep.json`` records its config, each run's
    result is appended to ``runs.jsonl`` as soon as it is known and the first seed's models are
    saved, so a killed sweep resumes where it stopped (:func:`finished_runs`). ``on_seed_done``
    is called with the sweep so far after every seed.
    """
    device = torch.device(cfg.device)
    sweep = Sweep(config=cfg)
    done = {(r.model, r.task, r.seed): r for r in finished_runs(out, cfg)} if out is not None else {}
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        _write_whole(out / SWEEP_FILE, lambda tmp: tmp.write_text(json.dumps(_config_record(cfg), indent=2) + "\n"))
        if done:
            log.info("resuming the sweep in %s: %d of %d runs already done", out, len(done),
                     len(cfg.seeds) * len(cfg.tasks) * len(cfg.models))
    for seed in cfg.seeds:
        for task in cfg.tasks:
            train, test = TrainStream(cfg, task, seed), make_split(cfg, task, seed, "test")
            second = make_split(cfg, task, seed, "test", cfg.second_size) if cfg.second_size else None
            sweep.test_sets.setdefault(task, test)
            for name in cfg.models:
                if (name, task, seed) in done:
                    sweep.results.append(done[(name, task, seed)])
                    if seed == cfg.seeds[0]:
                        model = build_model(name, _n_outputs(task, cfg), cfg.image_size, token_norm=cfg.token_norm)
                        model.load_state_dict(load_file(_model_path(out, name, task)))
                        sweep.models[(name, task)] = model.eval()
                    if progress_bar is not None:
                        progress_bar.update(1)
                    continue
                if progress_bar is not None:
                    progress_bar.set_postfix_str(f"seed {seed} {task} {name}")
                model, seconds = train_model(name, task, train, cfg, seed, device)
                acc = accuracy(model, test, device)
                acc_second = accuracy(model, second, device) if second and parse_spec(name).any_size else None
                result = RunResult(name, task, seed, acc, seconds, count_parameters(model), acc_second)
                sweep.results.append(result)
                if seed == cfg.seeds[0]:
                    sweep.models[(name, task)] = model.cpu().eval()
                    if out is not None:
                        weights = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
                        _write_whole(_model_path(out, name, task), partial(save_file, weights))
                if out is not None:
                    with (out / RUNS_LOG).open("a") as f:
                        f.write(json.dumps(asdict(result)) + "\n")
                log.info("seed %d  %-7s  %-15s acc %.3f  (%.0fs)", seed, task, name, acc, seconds)
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
    ``out_dir``. Run again with the same ``out_dir`` and settings, it resumes: finished runs
    are read back, not redone (a folder holding anything else is refused).

    Args:
        out_dir: report directory (created if missing; empty, or a sweep of the same config).
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
    command = "tokformer birds" + (" --quick" if quick else "") + (
        f" --seeds {','.join(map(str, config.seeds))}" if seeds else "")
    report = lambda sweep: write_report(sweep, out, elapsed=time.perf_counter() - start, command=command)
    with progress(not quiet, total=total, desc="birds", unit="run") as bar:
        # a report after every seed but the last: a long run is readable (and useful) before it ends
        sweep = run_sweep(config, progress_bar=bar, out=out,
                          on_seed_done=lambda s: report(s) if _seeds_done(s) < len(config.seeds) else None)
    return report(sweep)
