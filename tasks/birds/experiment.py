"""The sweep: every model x task x seed trained from scratch, evaluated on held-out images.

Each run is one training of task ``birds`` (:mod:`tokformer.tasks.birds.task`) by the engine, in
a folder of its own under the report's ``training/``: checkpoints (a killed run resumes from its
last one), seeding, the schedule and evaluations on the validation split are the engine's. Every
model trains on fresh images at every step, the same images in the same order for every model of
a (task, seed) (:mod:`tokformer.tasks.birds.stream`). A finished run leaves one line in
``runs.jsonl`` (test accuracy, time, parameters, its validation curve) and, for the first seed,
its weights for the analysis figures; its training folder then goes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from tokformer import files
from tokformer.engine import (
    LOGGER,
    hold_lock,
    list_checkpoints,
    load_run,
    progress,
    read_metrics,
    train,
    write_atomic,
    write_json_atomic,
    write_text_atomic,
)
from tokformer.errors import DataError, UsageError
from tokformer.machine import cpu_ticks, snapshot, stolen_share
from tokformer.tasks.birds.data import EXTRA_BIRDS, N_CLASSES, N_SPECIES, TASKS, Scene
from tokformer.tasks.birds.models import PATIENCE, build_model, parse_spec
from tokformer.tasks.birds.report import recorded_number, write_report
from tokformer.tasks.birds.stream import (
    Drawing,
    SplitTensors,
    accuracy,
    make_split,
    shared_split,
    shared_stream,
)
from tokformer.weights import count_parameters

log = logging.getLogger("tokformer.birds")
RUNS_LOG = "runs.jsonl"  # one line per finished training run, written as the sweep goes
TRAINING_DIR = "training"  # the engine's folder of each run in progress (checkpoints: resume mid-run)
SECONDS_FILE = "train_seconds.json"  # beside a run's checkpoints: what the processes that trained it spent
EVALUATIONS = 4  # evaluations on the validation split per run (each saves a checkpoint), the last at its end
SWEEP_FILE = "sweep.json"  # the config a report directory's runs belong to: what makes a resume safe
ELAPSED_FILE = "elapsed.json"  # the wall-clock seconds every process so far spent on the sweep
MODELS_DIR = "models"  # the first seed's trained models, so a resumed sweep can still draw its analysis figures

# Full-resolution conv stacks (no pooling) dominate the cost: one 64x64 3x3 conv layer costs as
# much as a whole pooled CNN, so the no-pooling family is left to the analysis code and the tests
# (RF 3 px for one layer, 17 px after 8, never near the ~45 px between the corners); pool-d1 (RF 4 px)
# stands in for the shallow end. The extra-budget rows train one model of every family (the deepest CNN with
# a local readout, the 2-layer token models) for three times the steps: the learning curve at 1x and 3x.
FULL_MODELS: tuple[str, ...] = (
    "pool-d1", "pool-d2", "pool-d3", "pool-d4", "pool-d5", "pool-d6",
    "global", "mlp", "transformer-l1", "transformer-l2", "transformer-local-l1", "transformer-local-l2",
    "mixer-l2", "pool-d6-x3", "global-x3", "mlp-x3", "transformer-l2-x3", "transformer-local-l2-x3", "mixer-l2-x3",
    "transformer-local-l2-x10",
)
# The Transformers again with a learned position table in place of the 2-D sin/cos code, which barely tells the
# cells of these small grids apart (benchmarks/birds_positions.py): a sweep of their own, beside the full one
# (``tokformer birds --models ...``, docs/birds/positions/), so the full sweep's folder keeps the runs it made.
POSITION_MODELS: tuple[str, ...] = ("transformer-l2-lpos", "transformer-local-l1-lpos", "transformer-local-l2-lpos")
# family -> (learning rate, warmup fraction) for the sweep: benchmarks/birds_calibration.py's choice on
# validation images (benchmarks/results/birds_calibration.md; the token models' among their runs with
# standardised tokens). Three families sit at chance at every learning rate of the grid on the comparison
# (the max-pool CNN, whose receptive field cannot hold both birds, and both Transformers): with nothing to
# choose by they take the grid's middle, 3e-3. The local-tokenizer Transformer with a learned table chose from
# a finer grid (ten settings, the others three; the script's docstring says why). A family not listed trains
# at BirdsConfig.lr and .warmup.
CALIBRATED: dict[str, tuple[float, float]] = {
    "pool": (0.003, 0.05), "global": (0.003, 0.05), "mlp": (0.001, 0.05), "transformer": (0.003, 0.05),
    "transformer-local": (0.003, 0.05), "mixer": (0.003, 0.05),
    "transformer-local-lpos": (0.005, 0.4), "transformer-lpos": (0.01, 0.05),
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
    """The full sweep: 20 models x 2 tasks x 3 seeds (about two and a half hours on 2 CPU cores)."""
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
    curve: list[tuple[int, float]] = field(default_factory=list)  # validation accuracy at each evaluation
    machine: dict[str, Any] | None = None  # where it trained (tokformer.machine.snapshot at its start); None: not kept


@dataclass
class Sweep:
    """What the sweep produced: per-run numbers, and the seed-0 models kept for the analysis figures."""

    config: BirdsConfig
    results: list[RunResult] = field(default_factory=list)
    models: dict[tuple[str, str], nn.Module] = field(default_factory=dict)  # (model, task) -> trained, seed 0
    test_sets: dict[str, SplitTensors] = field(default_factory=dict)  # task -> first seed's test split


@contextlib.contextmanager
def _engine_lines_quiet() -> Iterator[None]:
    """Within a sweep, the engine's own lines below errors are left out: the sweep says one line per
    run, sets every option itself, and trains on images never seen before, where the engine's warning
    that a rising held-out loss means overfitting does not hold. Records of other loggers pass untouched."""
    engine = logging.getLogger(LOGGER)
    errors_only = logging.Filter()
    errors_only.filter = lambda record: record.levelno >= logging.ERROR  # type: ignore[method-assign]
    engine.addFilter(errors_only)
    try:
        yield
    finally:
        engine.removeFilter(errors_only)


def run_settings(name: str, task: str, cfg: BirdsConfig, seed: int) -> dict[str, Any]:
    """The engine config of one sweep run: model ``name`` on ``task``, images and weights from ``seed``,
    ``cfg.steps`` times the name's ``-xN`` multiple, the family's calibrated learning rate and warmup,
    :data:`EVALUATIONS` evaluations on the validation split (``cfg.n_test`` images). A run to convergence
    (``-es``) is evaluated after every ``cfg.steps`` instead and stops after :data:`PATIENCE` evaluations
    without a better accuracy (the engine's early stopping), its schedule that of the cap it may reach."""
    spec = parse_spec(name)
    lr, warmup = learning_rate(name, cfg.per_family, cfg.lr, cfg.warmup)
    steps = cfg.steps * spec.budget
    every = cfg.steps if spec.converges else -(-steps // EVALUATIONS)
    return {
        "task": {"name": "birds", "model": name, "question": task, "image_size": cfg.image_size,
                 "token_norm": cfg.token_norm, "species_aux": cfg.species_aux, "scene": cfg.scene,
                 "extra_birds": cfg.extra_birds, "data_seed": seed, "eval_size": cfg.n_test},
        "train": {"steps": steps, "batch_size": cfg.batch_size, "lr": lr, "warmup_steps": max(1, round(warmup * steps)),
                  "weight_decay": cfg.weight_decay, "seed": seed, "device": cfg.device, "keep_last": 1,
                  "eval_every": every, "log_every": every, **({"early_stop": PATIENCE} if spec.converges else {})},
    }


def learning_rate(name: str, per_family: Mapping[str, Sequence[float]], lr: float,
                  warmup: float) -> tuple[float, float]:
    """Model ``name``'s (learning rate, warmup fraction): its setting's in ``per_family`` (the family, ``-lpos``
    apart: :attr:`~tokformer.tasks.birds.models.ModelSpec.setting`), else the common ``lr`` and ``warmup``."""
    chosen = per_family.get(parse_spec(name).setting)
    return (float(chosen[0]), float(chosen[1])) if chosen is not None else (lr, warmup)


class SweepInterrupted(KeyboardInterrupt):
    """A signal (Ctrl-C, SIGTERM) stopped a run; its checkpoint is saved, so the same command resumes it.
    ``signal``: the signal's number (a command exits with 128 + it)."""

    def __init__(self, message: str, signal: int | None) -> None:
        super().__init__(message)
        self.signal = signal


@dataclass
class TrainedRun:
    """A run the engine finished: the model as trained (last step), its training seconds in the
    processes that trained it (:func:`_time_before`; image drawing excluded), its validation
    accuracy at each evaluation ``[(step, acc)]`` and the machine its last process ran on
    (:func:`tokformer.machine.snapshot`, and ``stolen``: the share of the CPU time the host gave other
    virtual machines while its processes trained, where Linux says; a time means little without them)."""

    model: nn.Module
    seconds: float
    curve: list[tuple[int, float]]
    machine: dict[str, Any]


@dataclass(frozen=True)
class TrainingTime:
    """What the processes that trained one run spent, summed over them, so that a run stopped and resumed
    is timed whole: seconds (image drawing excluded) and the machine's CPU ticks meanwhile, (stolen, total)
    (:func:`tokformer.machine.cpu_ticks`; a process that could not read them adds none)."""

    seconds: float = 0.0
    ticks: tuple[int, int] = (0, 0)

    def plus(self, seconds: float, before: tuple[int, int] | None, after: tuple[int, int] | None) -> TrainingTime:
        """This time and one more process's: ``seconds``, and the ticks between its readings ``before``, ``after``."""
        measured = before is not None and after is not None and after[1] > before[1]
        total = after[1] - before[1] if measured else 0
        stolen = min(max(after[0] - before[0], 0), total) if measured else 0  # counters can step back (proc(5))
        return TrainingTime(self.seconds + seconds, (self.ticks[0] + stolen, self.ticks[1] + total))

    @property
    def stolen(self) -> float | None:
        """The share of the CPU time the host took while the run trained (over the processes that measured
        it); None where none did."""
        return stolen_share((0, 0), self.ticks)

    def record(self) -> dict[str, Any]:
        """What :data:`SECONDS_FILE` keeps, for :func:`_time_before` to read back."""
        return {"seconds": self.seconds, "ticks": list(self.ticks)}


def train_model(name: str, task: str, cfg: BirdsConfig, seed: int, *, run_dir: Path | None = None) -> TrainedRun:
    """Train model ``name`` on ``task`` with ``seed`` through the engine (:func:`run_settings`), in
    ``run_dir``: a folder that holds this run's unfinished training is resumed from its last checkpoint
    (a run cut short by a signal or a crash loses at most a quarter of its steps). Without ``run_dir``
    the run lives in a temporary folder. The model returned is the last step's, or for a run to
    convergence (``-es``) the one of its best validation accuracy. Raises when a signal stopped the run
    (its checkpoint saved): :class:`SweepInterrupted`."""
    if run_dir is None:
        with tempfile.TemporaryDirectory(prefix="tokformer-birds-") as scratch:
            return train_model(name, task, cfg, seed, run_dir=Path(scratch) / "run")
    stream = shared_stream(Drawing.of(cfg), task, seed)  # the task's own: timing can leave its drawing out
    machine, ticks, drawn, start = snapshot(), cpu_ticks(), stream.drawing_seconds, time.perf_counter()
    try:
        earlier = _time_before(run_dir)
    except DataError as error:  # a pipe, not JSON, not a number: how long the run took so far is unknown
        log.warning("%s; training that run again from its start", error)
        shutil.rmtree(run_dir)
        earlier = TrainingTime()
    try:
        with _engine_lines_quiet():
            if run_dir.exists():
                result = train(resume=run_dir, quiet=True, **{"train.device": cfg.device})  # asked now
            else:
                result = train(run_settings(name, task, cfg, seed), quiet=True, run_dir=str(run_dir))
    finally:
        spent = earlier.plus(time.perf_counter() - start - (stream.drawing_seconds - drawn), ticks, cpu_ticks())
        if list_checkpoints(run_dir):  # else the run starts over, and its time with it
            write_json_atomic(run_dir / SECONDS_FILE, spent.record())
    if result.interrupted:
        raise SweepInterrupted(f"stopped at step {result.step} of {name} on {task}, seed {seed}; its checkpoint "
                               "is saved and the same command resumes there", result.signal)
    if spent.stolen is not None:
        machine["stolen"] = round(spent.stolen, 3)
    _, model = load_run(run_dir, "best" if parse_spec(name).converges else "latest", cfg.device)
    curve = [(r["step"], float(r["accuracy"])) for r in read_metrics(run_dir) if r.get("split") == "eval"]
    return TrainedRun(model, spent.seconds, curve, machine)


def _time_before(run_dir: Path) -> TrainingTime:
    """What earlier processes spent on the run in ``run_dir`` (nothing for a new run). A record of
    seconds alone (written before the ticks were kept) counts its seconds and no ticks. A process
    killed outright (SIGKILL, a lost machine) records nothing, though the steps it checkpointed are
    kept: such a run's time is short by them (the engine's checkpoints would have to carry the seconds
    to cover it). Raises :class:`DataError` when the record is damaged."""
    path = run_dir / SECONDS_FILE
    if not path.is_file():
        return TrainingTime()
    record = files.read_json(path)
    if _is_number(record) and record >= 0:
        return TrainingTime(float(record))
    seconds, ticks = (record.get("seconds"), record.get("ticks")) if isinstance(record, dict) else (None, None)
    if not (_is_number(seconds) and seconds >= 0 and isinstance(ticks, list) and len(ticks) == 2
            and all(type(t) is int for t in ticks) and 0 <= ticks[0] <= ticks[1]):
        raise DataError(f"{path} is damaged: it must hold the training seconds (a number >= 0) and the CPU "
                        f"ticks stolen and in all meanwhile ([stolen, total], 0 <= stolen <= total), "
                        f"not {files.shown(record)}")
    return TrainingTime(float(seconds), (ticks[0], ticks[1]))


def _model_path(out: Path, name: str, task: str) -> Path:
    return out / MODELS_DIR / f"{name}-{task}.safetensors"


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
    whose sweep had another config, is refused. A config that only adds models to the folder's
    extends its sweep (the runs already made are the same runs).
    """
    record = out / SWEEP_FILE
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} is a file, not a report folder; choose another --out")
    if not record.exists():
        if out.exists() and any(out.iterdir()):
            raise UsageError(f"{out} is not empty and holds no birds sweep; choose another --out")
        return []
    previous = files.read_json(record)  # a pipe, binary or JSON nested too deeply: one line naming it
    if not isinstance(previous, dict):
        raise UsageError(f"{record} is not a birds sweep record (not a JSON object); choose another --out")
    wanted = _config_record(cfg)
    differs = sorted(k for k in wanted.keys() | previous.keys() if previous.get(k) != wanted.get(k))
    if "models" in differs and set(differs) <= {"models", "per_family"} and _only_adds_models(previous, wanted):
        differs = []  # the same sweep with models added: it trains only theirs
    if differs:
        shown = ", ".join(f"{k} {previous.get(k)!r} there, {wanted.get(k)!r} now" for k in differs[:3])
        raise UsageError(f"{out} holds a birds sweep of another configuration ({shown}); choose another --out, "
                         "or delete it to start over")
    done: dict[tuple[str, str, int], RunResult] = {}
    lines = files.read_bytes(out / RUNS_LOG).splitlines() if (out / RUNS_LOG).exists() else []
    for run in filter(None, map(_logged_run, lines)):
        if run.seed != cfg.seeds[0] or _model_path(out, run.model, run.task).exists():
            done[(run.model, run.task, run.seed)] = run
    return list(done.values())


def _logged_run(line: bytes) -> RunResult | None:
    """The run a ``runs.jsonl`` line records, or None for a line that records none: one cut short by a
    crash, or edited into something else (a field of the wrong type would reach the report's means).
    That run is trained again."""
    try:
        run = RunResult(**files.loads(line))
    except (ValueError, TypeError):  # not JSON (bytes that are not UTF-8 included), or not a run's fields
        return None
    scores = [run.accuracy, run.train_seconds, *([] if run.accuracy_second is None else [run.accuracy_second])]
    curve = run.curve if isinstance(run.curve, list) else [None]
    fields_fit = (isinstance(run.model, str) and isinstance(run.task, str) and _is_count(run.seed)
                  and _is_count(run.parameters) and isinstance(run.machine, (dict, type(None)))
                  and all(isinstance(point, list) and len(point) == 2 and _is_count(point[0]) for point in curve)
                  and all(_is_number(x) for x in scores + [point[1] for point in curve]))
    return run if fields_fit else None


def _is_count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _is_number(value: Any) -> bool:
    return recorded_number(value) is not None


def _saved_model(out: Path, name: str, task: str, cfg: BirdsConfig) -> nn.Module | None:
    """The first seed's model a sweep saved, read back; None, with a warning, when it cannot be (a damaged
    file, a pipe in its place, another model's weights): that run is then trained again."""
    path = _model_path(out, name, task)
    model = build_model(name, _n_outputs(task, cfg), cfg.image_size, token_norm=cfg.token_norm)
    try:
        model.load_state_dict(load_file(files.regular(path)))
    except (DataError, SafetensorError, OSError, RuntimeError) as error:  # RuntimeError: keys or shapes differ
        first_line = str(error).splitlines()[0]
        why = first_line if isinstance(error, DataError) else f"{path} cannot be read back ({first_line})"
        log.warning("%s: training %s on %s again", why, name, task)  # a DataError names the file itself
        return None
    return model.eval()


def _only_adds_models(previous: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether sweep record ``wanted`` is ``previous`` with models added, and at most the learning rates of
    settings that only the added models use: every model already run is still listed and would train at the
    same rate (a rate the calibration adds for a new setting, ``transformer-local-lpos``, changes no run made)."""
    models = previous.get("models")
    if not isinstance(models, list) or not all(isinstance(m, str) and m in wanted["models"] for m in models):
        return False
    try:
        rate = lambda record, name: learning_rate(name, record["per_family"], record["lr"], record["warmup"])
        return all(rate(previous, name) == rate(wanted, name) for name in models)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):  # a record not written by this code
        return False


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
        (out / MODELS_DIR).mkdir(parents=True, exist_ok=True)
        write_text_atomic(out / SWEEP_FILE, json.dumps(_config_record(cfg), indent=2) + "\n")
        if done:
            log.info("resuming the sweep in %s: %d of %d runs already done", out, len(done),
                     len(cfg.seeds) * len(cfg.tasks) * len(cfg.models))
    for seed in cfg.seeds:
        for task in cfg.tasks:
            test = make_split(cfg, task, seed, "test", cfg.n_test)
            second = make_split(cfg, task, seed, "test", cfg.n_test, cfg.second_size) if cfg.second_size else None
            sweep.test_sets.setdefault(task, test)
            for name in cfg.models:
                first_seed = seed == cfg.seeds[0]  # its model is kept for the analysis
                saved = _saved_model(out, name, task, cfg) if first_seed and (name, task, seed) in done else None
                if (name, task, seed) in done and (saved is not None or not first_seed):
                    sweep.results.append(done[(name, task, seed)])
                    shutil.rmtree(out / TRAINING_DIR / f"{name}-{task}-seed{seed}", ignore_errors=True)  # recorded
                    if saved is not None:
                        sweep.models[(name, task)] = saved
                    if progress_bar is not None:
                        progress_bar.update(1)
                    continue
                if progress_bar is not None:
                    progress_bar.set_postfix_str(f"seed {seed} {task} {name}")
                run_dir = out / TRAINING_DIR / f"{name}-{task}-seed{seed}" if out is not None else None
                trained = train_model(name, task, cfg, seed, run_dir=run_dir)
                model, seconds = trained.model, trained.seconds
                acc = accuracy(model, test, device)
                acc_second = accuracy(model, second, device) if second and parse_spec(name).any_size else None
                result = RunResult(name, task, seed, acc, seconds, count_parameters(model), acc_second, trained.curve,
                                   trained.machine)
                sweep.results.append(result)
                if seed == cfg.seeds[0]:
                    sweep.models[(name, task)] = model.cpu().eval()
                    if out is not None:
                        weights = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
                        write_atomic(_model_path(out, name, task), partial(save_file, weights))
                if out is not None:
                    _append_record(out / RUNS_LOG, json.dumps(asdict(result)))
                    shutil.rmtree(run_dir)  # recorded: its checkpoints are not needed any more
                log.info("seed %d  %-7s  %-15s acc %.3f  (%.0fs)", seed, task, name, acc, seconds)
                if progress_bar is not None:
                    progress_bar.update(1)
        if on_seed_done is not None:
            on_seed_done(sweep)
    if out is not None and (out / TRAINING_DIR).is_dir() and not any((out / TRAINING_DIR).iterdir()):
        (out / TRAINING_DIR).rmdir()  # every run recorded
    return sweep


def _append_record(path: Path, line: str) -> None:
    """``line`` appended to the JSON-lines log at ``path``, on a line of its own: a last line torn by a crash
    or a full disk (no newline at its end) is ended first, or the record would join it and be lost with it."""
    with path.open("ab+") as log_file:  # "a": every write goes to the end, wherever a read left the position
        torn = False
        if log_file.seek(0, 2):  # not empty: read its last byte
            log_file.seek(-1, 2)
            torn = log_file.read(1) != b"\n"
        log_file.write((("\n" if torn else "") + line + "\n").encode())


def _elapsed_before(out: Path) -> float:
    """Seconds the processes before this one spent on the sweep in ``out`` (0 for a new sweep), so a resumed
    sweep's report counts them too: each process records its time in ``elapsed.json`` when it ends, stopped
    by a signal or an error included; a folder from before that record, or from a process killed outright,
    has its last report's time (the minutes after that report are then not known). Both records are running
    totals, so the larger counts: a process killed outright after a report leaves ``elapsed.json`` older than
    ``results.json``. A damaged record (a pipe, not JSON, not a number >= 0) counts no earlier time."""
    totals = [0.0]
    for path, read in ((out / ELAPSED_FILE, lambda record: record),
                       (out / "results.json", lambda record: record.get("elapsed_seconds", 0.0))):
        if path.exists() or path.is_symlink():
            try:
                elapsed = recorded_number(read(files.read_json(path)))  # never a pipe: it would block
            except (DataError, AttributeError):
                continue
            totals.append(elapsed if elapsed is not None and elapsed >= 0 else 0.0)
    return max(totals)


def _seeds_done(sweep: Sweep) -> int:
    return len({r.seed for r in sweep.results})


def check_config(config: BirdsConfig) -> None:
    """Refuse, before the report folder is made, a sweep that cannot run or whose report would mislead: a
    seed numpy and torch do not take (-1 was a ValueError after ``sweep.json`` was written, and the folder
    then refused every other sweep), a seed or model given twice (its runs would be the same runs, and a
    spread over them a spread of nothing), a model name that is no model, or no comparison task."""
    if "compare" not in config.tasks:
        raise UsageError("a birds report needs the comparison task: its receptive-field and attention analyses "
                         "are of the comparison models (tasks=('count', 'compare') or ('compare',))")
    if not config.seeds or not all(type(seed) is int and 0 <= seed < 2**32 for seed in config.seeds):
        raise UsageError(f"seeds must be integers in [0, 2**32), got {files.shown(list(config.seeds))}")
    for what, given in (("seed", config.seeds), ("model", config.models)):
        twice = sorted({str(x) for x in given if list(given).count(x) > 1})
        if twice:
            raise UsageError(f"{what} {twice[0]} is given twice: the same runs would be counted as two")
    for name in config.models:
        try:
            parse_spec(name)
        except ValueError as error:
            raise UsageError(str(error)) from None


def run_experiment(
    out_dir: str | Path = "birds_report",
    *,
    quick: bool = False,
    seeds: Sequence[int] | None = None,
    device: str = "cpu",
    quiet: bool = False,
    models: Sequence[str] | None = None,
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
        models: override the preset's models (names as :func:`~tokformer.tasks.birds.models.parse_spec` reads
            them), e.g. :data:`POSITION_MODELS`.
        device: torch device for training.
        quiet: no progress bar. Per-run lines go to the ``tokformer.birds`` logger (the CLI
            shows them unless ``--quiet``).
        config: a complete config, overriding ``quick``, ``seeds``, ``models`` and ``device``.
    """
    if config is None:
        overrides = {"device": device} | ({"seeds": tuple(seeds)} if seeds else {})
        if models:
            overrides["models"] = tuple(dict.fromkeys(models))  # in the order given, once each
        config = quick_config(**overrides) if quick else full_config(**overrides)
    check_config(config)
    start, out = time.perf_counter(), Path(out_dir)
    command = "tokformer birds" + (" --quick" if quick else "") + (
        f" --seeds {','.join(map(str, config.seeds))}" if seeds else "") + (
        f" --models {','.join(config.models)}" if models else "")
    with hold_lock(out, command):  # two sweeps in one folder would each append the other's runs and reports
        done = finished_runs(out, config)  # a folder holding anything but a sweep of this config is refused here
        before = _elapsed_before(out)
        total = len(config.seeds) * len(config.tasks) * len(config.models)
        rendering_only = len(done) == total  # nothing to train: the report is redrawn, the sweep took no longer
        elapsed = lambda: before if rendering_only else before + time.perf_counter() - start
        report = lambda sweep: write_report(sweep, out, elapsed=elapsed(), command=command)
        try:
            with progress(not quiet, total=total, desc="birds", unit="run") as bar:
                # a report after every seed but the last: a long run is readable (and useful) before it ends
                sweep = run_sweep(config, progress_bar=bar, out=out,
                                  on_seed_done=lambda s: report(s) if _seeds_done(s) < len(config.seeds) else None)
        finally:  # the streams' image caches (193 MB a task on disk) go with the sweep, not at the process's exit
            shared_stream.cache_clear()
            shared_split.cache_clear()
            spent = elapsed()  # stopped or not: the next process adds to it
            if not rendering_only and (out / SWEEP_FILE).is_file():  # a sweep refused before it began spent none
                write_json_atomic(out / ELAPSED_FILE, spent)
        return write_report(sweep, out, elapsed=spent, command=command)
