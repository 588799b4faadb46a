"""The library API: ``train``, ``evaluate`` and ``load_run``; the CLI calls exactly these."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tokformer.engine import checkpoint as ckpt
from tokformer.engine.config import RunConfig, load_config_file, resolve
from tokformer.engine.distributed import Dist, barrier, broadcast, process_group
from tokformer.engine.progress import LOGGER
from tokformer.engine.registry import get_task
from tokformer.engine.report import Evaluation
from tokformer.engine.task import Task
from tokformer.engine.trainer import RunResult, Trainer, evaluate_model
from tokformer.errors import ConfigError, DataError, UsageError

CONFIG_FILE = "config.json"
log = logging.getLogger(LOGGER)


def _task_config_cls(name: str) -> type:
    return get_task(name).Config


def resolve_config(
    config: RunConfig | Mapping[str, Any] | str | os.PathLike | None = None, **overrides: Any
) -> RunConfig:
    """A full :class:`RunConfig` from a task name, a nested mapping, a config file path or a
    RunConfig, plus overrides (``lr=1e-3``, ``seq_len=8``, or ``{"train.lr": 1e-3}``)."""
    if isinstance(config, RunConfig):
        config = config.to_dict()
    if isinstance(config, (os.PathLike, Path)) or (isinstance(config, str) and Path(config).suffix):
        config = load_config_file(config)
    if isinstance(config, str):  # a bare task name
        return resolve(config, None, overrides, _task_config_cls)
    return resolve(None, config, overrides, _task_config_cls)


def saved_config(run_dir: Path) -> dict[str, Any]:
    path = run_dir / CONFIG_FILE
    if not path.is_file():
        raise ConfigError(f"{run_dir} is not a run directory (no {CONFIG_FILE}); pass one that tokformer train made")
    return load_config_file(path)


@contextlib.contextmanager
def _deterministic(on: bool) -> Iterator[None]:
    """torch.use_deterministic_algorithms for the block, restoring the previous setting."""
    previous = torch.are_deterministic_algorithms_enabled()
    if on:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # required by cuBLAS determinism
        torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous)


def _prepare_run_dir(cfg: RunConfig, d: Dist, resume: bool, overwrite: bool) -> tuple[Path, bool]:
    """Pick and check the run directory on rank 0, create it, tell every rank (or the error).

    Returns the directory and whether to resume it: with ``resume``, or when it holds
    checkpoints of this very config (a cluster requeueing the same command, see :func:`_requeue`).
    """
    outcome: tuple[str, str]
    if d.is_main:
        run_dir = Path(cfg.train.run_dir or f"runs/{cfg.task}-{time.strftime('%Y%m%d-%H%M%S')}")
        if resume:
            outcome = ("resume", str(run_dir))
        elif overwrite or not run_dir.exists() or not any(run_dir.iterdir()):
            if overwrite and run_dir.exists():
                shutil.rmtree(run_dir)
            outcome = ("new", str(run_dir))
        else:
            outcome = _requeue(run_dir, cfg)
        if outcome[0] != "error":
            run_dir.mkdir(parents=True, exist_ok=True)
    outcome = broadcast(outcome if d.is_main else None, d)
    if outcome[0] == "error":
        raise ConfigError(outcome[1])
    return Path(outcome[1]), outcome[0] == "resume"


def _requeue(run_dir: Path, cfg: RunConfig) -> tuple[str, str]:
    """What a new run does with an existing, non-empty ``run_dir`` (rank 0).

    A scheduler that requeues a preempted job reruns the same command: a directory whose
    ``config.json`` equals this config is that run, so it resumes (``"resume"``) or, if it died
    before its first checkpoint, starts again in it (``"new"``). Another config is refused,
    naming the keys that differ; a directory that is no run is refused as before.
    """
    refuse = (f"run directory {run_dir} already exists; "
              "pass --resume to continue it, --overwrite to replace it, or another --run-dir")
    try:
        saved = load_config_file(run_dir / CONFIG_FILE) if (run_dir / CONFIG_FILE).is_file() else None
        if isinstance(saved, dict) and {"task", "train"} <= set(saved):
            # resolved, so that options added to tokformer since the run was made count at their defaults
            saved = json.loads(json.dumps(resolve_config(saved).to_dict()))
    except ConfigError:
        saved = None
    if not isinstance(saved, dict) or not {"task", "train"} <= set(saved):
        return ("error", refuse)
    wanted = json.loads(json.dumps(cfg.to_dict()))  # as config.json holds it (tuples as lists)
    for config in (saved, wanted):
        config["train"]["run_dir"] = str(run_dir)
    changed = [f"{section}.{key}={value!r} (the run has {saved[section].get(key)!r})"
               for section in ("task", "train") for key, value in wanted[section].items()
               if saved[section].get(key) != value]
    if changed:
        return ("error", f"run directory {run_dir} already exists with another config: {'; '.join(changed)}; "
                         "rerun its command to continue it, pass --overwrite to replace it, or another --run-dir")
    if ckpt.list_checkpoints(run_dir):
        log.info("%s holds this run (same config): resuming it from its latest checkpoint", run_dir)
        return ("resume", str(run_dir))
    log.info("%s holds this run (same config) without a checkpoint: starting it again", run_dir)
    shutil.rmtree(run_dir)
    return ("new", str(run_dir))


def _check_task_unchanged(saved: Mapping[str, Any], wanted: Mapping[str, Any], run_dir: Path) -> None:
    """A resumed run keeps its task options: they shape the model and the data, so the
    checkpoint would not fit (or would silently train on something else). Training options
    (steps, lr, device...) may change."""
    changed = [f"{key}={value!r} (the run has {saved.get(key)!r})" for key, value in wanted.items()
               if saved.get(key) != value]
    if changed:
        raise ConfigError(f"--resume keeps the task options of {run_dir / CONFIG_FILE}; cannot change "
                          f"{', '.join(changed)}: start a new run for that")


def train(
    config: RunConfig | Mapping[str, Any] | str | os.PathLike | None = None,
    *,
    resume: str | os.PathLike | None = None,
    overwrite: bool = False,
    quiet: bool = False,
    **overrides: Any,
) -> RunResult:
    """Train a task; the Python form of ``tokformer train``.

    Args:
        config: a task name (``"sort"``), a config file path (.toml/.yaml/.json), a nested
            mapping ``{"task": {"name": ..., ...}, "train": {...}}``, or a RunConfig.
            Omit it with ``resume``.
        resume: a run directory to continue from its latest checkpoint (its saved config
            is used; ``overrides`` still apply, e.g. more ``steps``).
        overwrite: replace an existing run directory instead of refusing.
        quiet: no progress bars.
        overrides: config values by bare name (``lr=3e-4``, ``seq_len=8``) or as
            ``**{"train.lr": 3e-4}``; they win over ``config``.

    Returns:
        A :class:`RunResult` (run directory, steps done, last metrics, best checkpoint).

    Under ``torchrun`` every process calls this; only rank 0 writes.
    """
    if resume is not None:
        if config is not None:
            raise ConfigError("give either a config or resume=RUN_DIR, not both")
        if overwrite:
            raise ConfigError("--resume continues a run and --overwrite replaces it: give one of them")
        saved = saved_config(Path(resume))
        if saved.get("train", {}).get("epochs") is not None:  # the run's budget is its epochs
            saved["train"].pop("steps", None)
        cfg = resolve_config(saved, **{**overrides, "train.run_dir": str(resume)})
        _check_task_unchanged(resolve_config(saved).to_dict()["task"], cfg.to_dict()["task"], Path(resume))
    else:
        cfg = resolve_config(config, **overrides)
    with process_group(cfg.train.device) as d, _deterministic(cfg.train.deterministic):
        run_dir, resuming = _prepare_run_dir(cfg, d, resume is not None, overwrite)
        if not resuming and d.is_main:
            cfg.train.run_dir = str(run_dir)
            ckpt.write_json_atomic(run_dir / CONFIG_FILE, cfg.to_dict())
        elif d.is_main and cfg.to_dict() != saved_config(run_dir):
            ckpt.write_json_atomic(run_dir / CONFIG_FILE, cfg.to_dict())
        if d.is_main:
            log.info("run directory: %s", run_dir)
        try:
            task = get_task(cfg.task)(cfg.task_config)
            return Trainer(cfg, task, run_dir, d, resume=resuming, quiet=quiet).fit()
        except UsageError:
            # A run refused for bad input (data, options) leaves no half-made run directory
            # behind, so fixing the input and rerunning needs no --overwrite.
            if not resuming and d.is_main and not ckpt.list_checkpoints(run_dir):
                shutil.rmtree(run_dir, ignore_errors=True)
            raise


def load_run(run_dir: str | os.PathLike, checkpoint: str = "best",
             device: str | torch.device = "cpu") -> tuple[Task, nn.Module]:
    """The task (assets loaded) and model (weights of ``checkpoint``: best, latest or a step)
    of a finished or running run, in eval mode: the starting point of inference commands."""
    run_dir = Path(run_dir)
    cfg = resolve_config(saved_config(run_dir))
    task = get_task(cfg.task)(cfg.task_config)
    task.load_assets(run_dir)
    model = task.build_model()
    ckpt.load_weights(model, ckpt.find_checkpoint(run_dir, checkpoint), task.tokenizer_dirs())
    return task, model.to(device).eval()


def evaluate(path: str | os.PathLike, *, data: str | os.PathLike | None = None, checkpoint: str = "best",
             device: str = "auto", batch_size: int | None = None, quiet: bool = False) -> Evaluation:
    """Loss and task metrics of a run's checkpoint, or of a model folder (``tokformer export``),
    beside the task's baselines on the same data; the Python form of ``tokformer evaluate``.

    ``data`` is other data to evaluate on, all of it, given as the task's ``data`` option takes
    it (an lm text file or folder, a translate .tsv/.jsonl, a classify image folder, a graph
    folder or manifest); by default the task's held-out split. Baselines fit on data are fit
    on the run's training split, which must still be readable.
    """
    from tokformer.engine.pretrained import folder_kind, load_model, train_config  # they build on this module

    settings = train_config(path)
    with process_group(device) as d, _scratch(d) as scratch:
        task, model = load_model(path, checkpoint, d.device)
        task.setup(Path(path) if folder_kind(path) == "run" else scratch, d)  # a run's data are prepared already
        if data is None:
            dataset, described = task.eval_dataset(), "the held-out split"
        else:
            dataset, described = task.eval_data(str(data), scratch / "eval-data", d), str(data)
        if dataset is None:
            raise DataError(f"the task of {path} has no evaluation set")
        size = batch_size or max(1, settings.batch_size // d.world)
        metrics = evaluate_model(task, model, dataset, d, size, settings.precision, d.is_main and not quiet)
        return Evaluation(metrics, task.baselines(dataset) if d.is_main else {}, described)


@contextlib.contextmanager
def _scratch(d: Dist) -> Iterator[Path]:
    """A temporary directory for evaluation data that rank 0 makes, shares with the others and removes."""
    scratch = broadcast(tempfile.mkdtemp(prefix="tokformer-eval-") if d.is_main else None, d)
    try:
        yield Path(scratch)
    finally:
        barrier(d)  # every rank is done with it
        if d.is_main:
            shutil.rmtree(scratch, ignore_errors=True)
