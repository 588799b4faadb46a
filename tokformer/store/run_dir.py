"""A run directory's own files: the resolved config it was started with.

A **run directory** is training state (``config.json``, ``checkpoints/``, ``best.json``,
``metrics.jsonl``, plots, the task's assets such as ``tokenizer/``): it exists to resume
exactly. The engine decides when to make, resume or replace one; this module reads and
writes what identifies it, and replaces one without ever losing a whole run: ``--overwrite``
first renames the old run aside (:func:`set_aside`), and deletes it only once the new run
has saved its first checkpoint (:func:`discard`); a new run that fails before that gives the
old one back (:func:`restore`), and one that was killed is sorted out on the next start
(:func:`recover`). Nothing that is not a run is ever removed.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from tokformer.atomic import hidden_siblings, write_json_atomic
from tokformer.errors import ConfigError
from tokformer.runtime.config import load_config_file
from tokformer.store.steps import list_checkpoints

CONFIG_FILE = "config.json"  # a run's resolved config; a model folder's config.json has "format" too


def saved_config(run_dir: Path) -> dict[str, Any]:
    """The config a run directory was started with, as saved (not yet resolved)."""
    path = run_dir / CONFIG_FILE
    if not path.is_file():
        raise ConfigError(f"{run_dir} is not a run directory (no {CONFIG_FILE}); pass one that tokformer train made")
    return load_config_file(path)


def save_config(run_dir: Path, config: dict[str, Any]) -> None:
    """Record the resolved ``config`` (``RunConfig.to_dict()``) of the run in ``run_dir``, atomically."""
    write_json_atomic(run_dir / CONFIG_FILE, config)


def is_run(path: Path) -> bool:
    """Whether ``path`` is a directory tokformer train made: its config.json has task and train sections."""
    try:
        config = load_config_file(path / CONFIG_FILE) if (path / CONFIG_FILE).is_file() else None
    except ConfigError:
        return False
    return isinstance(config, dict) and {"task", "train"} <= set(config)


#: What the engine writes into a run directory, as :func:`tokformer.files.foreign_entries` patterns of
#: paths relative to it. A folder some path goes through is the engine's too, but only what a path
#: names inside it: ``--overwrite`` deletes a whole run, so a user's notes in ``plots/`` or
#: ``checkpoints/`` must be found and named, not deleted with it.
ENGINE_FILES = (
    CONFIG_FILE, "best.json", "metrics.jsonl",
    # a checkpoint (tokformer.store.checkpoints, whole or sharded: model, shards, manifest, training state)
    "checkpoints/step-[0-9]*/*.safetensors", "checkpoints/step-[0-9]*/state.json",
    "checkpoints/step-[0-9]*/manifest.json",
    "checkpoints/.tmp-step-*/**",  # one a crash cut short (steps.remove_partial deletes it)
    "plots/*.png", "tensorboard/events.out.tfevents.*",
)
#: What a task's tokenizer folders hold: what tokformer's tokenizers save (base.py's config, bpe.py's
#: Hugging Face file, the sort task's vocabulary). A plug-in tokenizer saving other files makes
#: ``--overwrite`` refuse and name them: never delete what may be the user's.
TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json", "vocab.json")


def contents(path: Path, shown: int = 3) -> str:
    """A few of the entries of directory ``path``, for a message: ``thesis.txt, notes/ (5 entries)``."""
    entries = sorted(path.iterdir())
    names = [entry.name + ("/" if entry.is_dir() else "") for entry in entries[:shown]]
    more = f" ({len(entries)} entries)" if len(entries) > shown else ""
    return ", ".join(names) + more


ASIDE = ".replaced-"  # the old run of an --overwrite waits as PARENT/.NAME.replaced-TIME-PID


def set_aside(run_dir: Path) -> Path:
    """Rename the run ``run_dir`` to a hidden sibling (an atomic rename: it is whole either way)."""
    aside = run_dir.parent / f".{run_dir.name}{ASIDE}{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    os.replace(run_dir, aside)
    return aside


def asides_of(run_dir: Path) -> list[Path]:
    """The copies :func:`set_aside` made of ``run_dir``, oldest first (their stamps sort by time)."""
    return hidden_siblings(run_dir, ASIDE, r"\d{8}-\d{6}-\d+")


def restore(run_dir: Path, aside: Path) -> None:
    """Give the old run back: the new run that replaced it failed before its first checkpoint."""
    if run_dir.exists():
        shutil.rmtree(run_dir)
    os.replace(aside, run_dir)


def remove(run_dir: Path, keep_folder: bool) -> None:
    """Delete what a run that failed before its first checkpoint wrote: ``run_dir`` with it, unless
    it is a folder the user made for the run (``keep_folder``), which is left as it was, empty."""
    if not keep_folder:
        shutil.rmtree(run_dir, ignore_errors=True)
        return
    for entry in run_dir.iterdir() if run_dir.is_dir() else ():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def discard(aside: Path) -> None:
    """Delete the old run an --overwrite set aside, now that the new run stands."""
    shutil.rmtree(aside, ignore_errors=True)


def recover(run_dir: Path) -> None:
    """Finish an --overwrite that was killed: if the new run saved a checkpoint it stands and the old
    one goes; otherwise the old run comes back in place of the half-made new one."""
    asides = asides_of(run_dir)
    if not asides:
        return
    if run_dir.is_dir() and list_checkpoints(run_dir):
        for aside in asides:
            discard(aside)
        return
    restore(run_dir, asides[-1])
    for aside in asides[:-1]:
        discard(aside)
