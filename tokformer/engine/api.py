"""The library API: ``train`` and ``evaluate``; the CLI calls exactly these (and the store's loaders)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tokformer import files
from tokformer.config import architecture_fields
from tokformer.engine import finetune
from tokformer.engine.progress import LOGGER, configure_logging
from tokformer.engine.report import Evaluation
from tokformer.engine.trainer import RunResult, Trainer, evaluate_model
from tokformer.errors import ConfigError, DataError
from tokformer.runtime.config import RunConfig, absolute_paths, load_config_file, resolve_config
from tokformer.runtime.distributed import Dist, barrier, broadcast, process_group
from tokformer.runtime.registry import get_task
from tokformer.signals import sigterm_interrupts
from tokformer.store import lock
from tokformer.store import run_dir as runs
from tokformer.store.checkpoints import checkpoint_selector, list_checkpoints
from tokformer.store.loader import load_model, positive_count, train_config
from tokformer.store.source import RUN, describe

log = logging.getLogger(LOGGER)


def speak(quiet: bool) -> None:
    """From Python, say what the CLI says (run directory, resuming, early stop, warnings) on stderr,
    unless the program has set up logging itself: then tokformer's records go to its handlers."""
    if not logging.getLogger(LOGGER).handlers and not logging.getLogger().handlers:
        configure_logging(quiet)


@contextlib.contextmanager
def _deterministic(on: bool) -> Iterator[None]:
    """torch.use_deterministic_algorithms for the block, restoring the previous setting; torch's setting is
    left alone when ``on`` is false. (Restored regardless, a Ctrl-C that landed while torch was importing
    sympy for the first time was replaced by ``AttributeError: module 'sympy' has no attribute 'logic'``
    from the restore, an internal error instead of the stop.)"""
    if not on:
        yield
        return
    previous = torch.are_deterministic_algorithms_enabled()
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # required by cuBLAS determinism
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous)


@dataclass(frozen=True)
class RunDirPlan:
    """Rank 0's decision about the run directory, told to every rank: start a new run in
    ``path``, resume the run there, or refuse (``refusal`` says why). ``aside``: the run an
    ``--overwrite`` renamed away, deleted once the new run has saved its first checkpoint.
    ``existed``: ``path`` was an empty folder before the run (one the user made for it): a run that
    fails before its first checkpoint empties it again instead of deleting it."""

    path: str = ""
    resume: bool = False
    refusal: str | None = None
    aside: str | None = None
    existed: bool = False


def _new_default_run_dir(task: str) -> Path:
    """``runs/TASK-YYYYmmdd-HHMMSS``, made empty and claimed (``-2``, ``-3``... when runs start in
    the same second: a sweep script's second run must not land in, and resume, the first)."""
    base = Path("runs") / f"{task}-{time.strftime('%Y%m%d-%H%M%S')}"
    base.parent.mkdir(exist_ok=True)  # runs/, in the working directory
    candidate, n = base, 1
    while True:
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            n += 1
            candidate = base.with_name(f"{base.name}-{n}")


def _prepare_run_dir(cfg: RunConfig, d: Dist, resume: bool, overwrite: bool,
                     held: contextlib.ExitStack) -> RunDirPlan:
    """Pick and check the run directory on rank 0, lock it (held until ``held`` closes), create
    it, and tell every rank the plan (or raise its refusal on every rank).

    The plan resumes with ``resume``, or when the directory holds checkpoints of this very config
    (a cluster requeueing the same command, see :func:`_requeue`). ``overwrite`` replaces only a
    tokformer run, and only sets it aside until the new run has saved its first checkpoint.
    """
    plan = broadcast(_main_plan(cfg, resume, overwrite, held) if d.is_main else None, d)
    if plan.refusal is not None:
        raise ConfigError(plan.refusal)
    return plan


def _main_plan(cfg: RunConfig, resume: bool, overwrite: bool, held: contextlib.ExitStack) -> RunDirPlan:
    """Rank 0's part of :func:`_prepare_run_dir`: a refusal is returned, not raised, so that every rank
    learns it."""
    run_dir = Path(cfg.train.run_dir) if cfg.train.run_dir else _new_default_run_dir(cfg.task)
    try:
        held.enter_context(lock.hold(run_dir, "tokformer train"))
        runs.recover(run_dir)
        plan = _plan(run_dir, cfg, resume, overwrite)
        if not cfg.train.run_dir:  # the default directory was made empty just now, by us
            plan = dataclasses.replace(plan, existed=False)
        if plan.refusal is None:
            run_dir.mkdir(parents=True, exist_ok=True)
        return plan
    except ConfigError as e:
        return RunDirPlan(refusal=str(e))


def _plan(run_dir: Path, cfg: RunConfig, resume: bool, overwrite: bool) -> RunDirPlan:
    if resume:
        refusal = None if list_checkpoints(run_dir) else _restart_refusal(run_dir, cfg)
        return RunDirPlan(refusal=refusal) if refusal else RunDirPlan(str(run_dir), resume=True)
    if not run_dir.exists():
        return RunDirPlan(str(run_dir))
    if run_dir.is_dir() and not any(run_dir.iterdir()):
        return RunDirPlan(str(run_dir), existed=True)
    if not run_dir.is_dir():
        return RunDirPlan(refusal=f"--run-dir {run_dir} is a file; give a directory")
    if overwrite:
        if not runs.is_run(run_dir):
            return RunDirPlan(refusal=f"--overwrite replaces only a tokformer run, and {run_dir} is none (it holds "
                                      f"{runs.contents(run_dir)}); choose another --run-dir")
        foreign = files.foreign_entries(run_dir, _owned(run_dir, cfg))
        if foreign:
            return RunDirPlan(refusal=f"--overwrite would delete {files.some_of(foreign)} in {run_dir}, which "
                                      "tokformer did not write; move them out of the run directory first, or choose "
                                      "another --run-dir")
        return RunDirPlan(str(run_dir), aside=str(runs.set_aside(run_dir)))
    return _requeue(run_dir, cfg)


def _restart_refusal(run_dir: Path, cfg: RunConfig) -> str | None:
    """Why ``--resume`` may not start ``run_dir``, which has no checkpoint, over from step 0 (a run
    killed before its first one starts again): its config.json is none tokformer wrote (a run's
    lists every option; a config file of the user's would be rewritten), or the user's files are in it."""
    saved = runs.saved_config(run_dir)
    if saved != json.loads(json.dumps(resolve_config(saved).to_dict())):
        return (f"--resume {run_dir}: it has no checkpoint, and its config.json is no run's (tokformer train "
                f"writes every option there); to train with that config: tokformer train {run_dir / runs.CONFIG_FILE}"
                " --run-dir ANOTHER_DIR")
    foreign = files.foreign_entries(run_dir, _owned(run_dir, cfg))
    if foreign:
        return (f"--resume {run_dir}: it has no checkpoint, so the run would start again there, and it holds "
                f"{files.some_of(foreign)}, which tokformer did not write; "
                "move them out first, or choose another --run-dir")
    return None


def _owned(run_dir: Path, cfg: RunConfig) -> tuple[str, ...]:
    """What tokformer writes in the run in ``run_dir`` (:data:`runs.ENGINE_FILES`' patterns): the
    engine's files, its task's tokenizer folders and run files; the new config's task when the old one
    cannot be resolved."""
    try:
        old = resolve_config(runs.saved_config(run_dir))
        task = get_task(old.task)(old.task_config)
    except ConfigError:
        task = get_task(cfg.task)(cfg.task_config)
    tokenizers = (f"{folder}/{name}" for folder in task.tokenizer_dirs() for name in runs.TOKENIZER_FILES)
    return (*runs.ENGINE_FILES, *tokenizers, *type(task).run_files)


def _requeue(run_dir: Path, cfg: RunConfig) -> RunDirPlan:
    """What a new run does with an existing, non-empty ``run_dir`` (rank 0).

    A scheduler that requeues a preempted job reruns the same command: a directory whose
    ``config.json`` equals this config is that run, so it resumes or, if it died before its
    first checkpoint, starts again in it. Another config is refused, naming the keys that
    differ; a directory that is no run is refused as before. A fine-tuned run's saved config
    holds the shape it took from ``init_from``, so its architecture options are not compared.
    """
    refuse = (f"run directory {run_dir} already exists; "
              "pass --resume to continue it, --overwrite to replace it, or another --run-dir")
    try:
        saved = load_config_file(run_dir / runs.CONFIG_FILE)  # a mapping; none, or no file: a ConfigError
        if not {"task", "train"} <= set(saved):  # a config file of the user's, not a run's record
            return RunDirPlan(refusal=refuse)
        # resolved, so that options added to tokformer since the run was made count at their defaults
        saved = json.loads(json.dumps(resolve_config(saved).to_dict()))
    except ConfigError:
        return RunDirPlan(refusal=refuse)
    wanted = json.loads(json.dumps(cfg.to_dict()))  # as config.json holds it (tuples as lists)
    for config in (saved, wanted):
        del config["train"]["run_dir"]  # where the run lies is no part of what it is: a moved run is the same
    adopted = set(architecture_fields(type(cfg.task_config))) if cfg.train.init_from else set()
    changed = [f"{section}.{key}={value!r} (the run has {saved[section].get(key)!r})"
               for section in ("task", "train") for key, value in wanted[section].items()
               if saved[section].get(key) != value and not (section == "task" and key in adopted)]
    if changed:
        return RunDirPlan(refusal=f"run directory {run_dir} already exists with another config: "
                                  f"{'; '.join(changed)}; rerun its command to continue it, pass --overwrite to "
                                  "replace it, or another --run-dir")
    if list_checkpoints(run_dir):
        log.info("%s holds this run (same config): resuming it from its latest checkpoint", run_dir)
        return RunDirPlan(str(run_dir), resume=True)
    foreign = files.foreign_entries(run_dir, _owned(run_dir, cfg))
    if foreign:  # a user's folder holding a copy of a run's config.json: never delete what is not ours
        return RunDirPlan(refusal=f"run directory {run_dir} holds this run's config.json but no checkpoint, and "
                                  f"{files.some_of(foreign)}, which tokformer "
                                  "did not write; starting the run again there would delete them: move them out "
                                  "first, or choose another --run-dir")
    log.info("%s holds this run (same config) without a checkpoint: starting it again", run_dir)
    shutil.rmtree(run_dir)
    return RunDirPlan(str(run_dir))


def _dotted(cfg: RunConfig, key: str) -> Any:
    section, _, name = key.partition(".")
    return getattr(cfg.task_config if section == "task" else cfg.train, name)


def _warn_overridden(asked: Any, adopted: Any, overrides: Mapping[str, Any], source: str) -> None:
    """Say which options the user gave that fine-tuning replaced with the source's (its shape wins)."""
    given = {key.rpartition(".")[2] for key in overrides}
    replaced = [f"{name}={getattr(asked, name)!r} (the source has {getattr(adopted, name)!r})"
                for name in sorted(given) if hasattr(asked, name) and getattr(asked, name) != getattr(adopted, name)]
    if replaced:
        log.warning("init_from %s fixes the model's shape; ignoring %s", source, ", ".join(replaced))


def _check_task_unchanged(saved: Mapping[str, Any], wanted: Mapping[str, Any], run_dir: Path) -> None:
    """A resumed run keeps its task options: they shape the model and the data, so the
    checkpoint would not fit (or would silently train on something else). Training options
    (steps, lr, device...) may change."""
    changed = [f"{key}={value!r} (the run has {saved.get(key)!r})" for key, value in wanted.items()
               if saved.get(key) != value]
    if changed:
        raise ConfigError(f"--resume keeps the task options of {run_dir / runs.CONFIG_FILE}; cannot change "
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
        quiet: no progress bars or info lines. Otherwise, unless the program has set up logging
            itself, the info lines the CLI prints (run directory, resuming, early stop) and the
            warnings go to stderr (:func:`speak`).
        overrides: config values by bare name (``lr=3e-4``, ``seq_len=8``) or as
            ``**{"train.lr": 3e-4}``; they win over ``config``.

    Returns:
        A :class:`RunResult` (run directory, steps done, last metrics, best checkpoint).

    Under ``torchrun`` every process calls this; only rank 0 writes.
    """
    speak(quiet)
    if resume is not None:
        if config is not None:
            raise ConfigError("give either a config or resume=RUN_DIR, not both")
        if overwrite:
            raise ConfigError("--resume continues a run and --overwrite replaces it: give one of them")
        saved = runs.saved_config(Path(resume))
        if saved.get("train", {}).get("epochs") is not None:  # the run's budget is its epochs
            saved["train"].pop("steps", None)
        cfg = resolve_config(saved, **{**overrides, "train.run_dir": str(resume)})
        _check_task_unchanged(resolve_config(saved).to_dict()["task"], cfg.to_dict()["task"], Path(resume))
    else:
        cfg = resolve_config(config, **overrides)
        absolute_paths(cfg)
    with sigterm_interrupts(), process_group(cfg.train.device) as d, _deterministic(cfg.train.deterministic), \
            contextlib.ExitStack() as held:
        plan = _prepare_run_dir(cfg, d, resume is not None, overwrite, held)
        run_dir, resuming = Path(plan.path), plan.resume
        aside = Path(plan.aside) if plan.aside and d.is_main else None
        if d.is_main:
            log.info("run directory: %s", run_dir)
            for key, value in cfg.given.items() if not resuming else ():
                log.info("%s %r: %s", key.partition(".")[2], value, _dotted(cfg, key))

        def first_checkpoint_saved() -> None:  # the new run stands: the run it replaces can go
            nonlocal aside
            if aside is not None:
                runs.discard(aside)
                aside = None

        try:
            task = get_task(cfg.task)(cfg.task_config)
            initial = None
            if cfg.train.init_from and not resuming:  # a resumed run has its shape in config.json
                asked = cfg.task_config
                initial = finetune.adopt(task, cfg.train.init_from)
                cfg.task_config = task.config
                if d.is_main:
                    _warn_overridden(asked, task.config, overrides, cfg.train.init_from)
            if not resuming and d.is_main:
                cfg.train.run_dir = str(run_dir)
                runs.save_config(run_dir, cfg.to_dict())
            elif d.is_main and cfg.to_dict() != runs.saved_config(run_dir):
                runs.save_config(run_dir, cfg.to_dict())
            return Trainer(cfg, task, run_dir, d, resume=resuming, quiet=quiet, initial=initial,
                           on_first_checkpoint=first_checkpoint_saved).fit()
        except BaseException:
            # A run that fails or is stopped (Ctrl-C, SIGTERM) before its first checkpoint (bad data or
            # options, a fault) leaves no half-made run directory behind, so rerunning needs no
            # --overwrite; a run it was replacing comes back.
            if not resuming and d.is_main and not list_checkpoints(run_dir):
                runs.remove(run_dir, keep_folder=plan.existed)
                if aside is not None:
                    runs.restore(run_dir, aside)
            raise


def evaluate(path: str | os.PathLike, *, data: str | os.PathLike | None = None, checkpoint: str | int = "best",
             device: str = "auto", batch_size: int | None = None, quiet: bool = False) -> Evaluation:
    """Loss and task metrics of a run's checkpoint, or of a model folder (``tokformer export``),
    beside the task's baselines on the same data; the Python form of ``tokformer evaluate``.

    ``data`` is other data to evaluate on, all of it, given as the task's ``data`` option takes
    it (an lm text file or folder, a translate .tsv/.jsonl, a classify image folder, a graph
    folder or manifest); by default the task's held-out split. Baselines fit on data are fit
    on the run's training split, which must still be readable, unless the task saves them with
    the model (vqa's question-only answers). ``checkpoint``: best, latest or a step (a string or
    an int); ``batch_size``: at least 1, None for the run's (checked as the CLI checks its flags,
    before anything loads: a negative one evaluated nothing and returned no metrics).
    """
    checkpoint = checkpoint_selector(checkpoint)
    if batch_size is not None:
        batch_size = positive_count("batch_size", batch_size)
    speak(quiet)
    source = describe(path)
    settings = train_config(source)
    with process_group(device) as d, _scratch(d) as scratch:
        task, model = load_model(source, checkpoint, d.device)
        task.setup(source.path if source.kind == RUN else scratch, d)  # a run's data are prepared already
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
