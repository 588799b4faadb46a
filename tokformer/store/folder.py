"""Model folders: what leaves a run.

A model folder is only what rebuilds the model::

    config.json          {"format": "tokformer-model", "format_version": 1,
                          "task": {"name": "sort", <the task's config fields>}, "tokenizer_sha256": ...}
    model.safetensors    the state dict (tied/shared tensors stored once, as in checkpoints)
    tokenizer/, ...      whatever the task's ``save_assets`` writes (tokenizers, class names)

Nothing in it is pickled and nothing is unpickled from it. It appears whole or not at all.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from pathlib import Path

from torch import nn

from tokformer.atomic import staged_folder
from tokformer.errors import CheckpointError, ConfigError, UsageError
from tokformer.runtime.config import resolve_config
from tokformer.runtime.registry import get_task, name_of
from tokformer.runtime.task import Task
from tokformer.store.budget import check_against_weights, on_meta, planned_size
from tokformer.store.checkpoints import TOKENIZER_HASH, tokenizer_fingerprint
from tokformer.store.run_dir import CONFIG_FILE
from tokformer.store.source import MODEL_FORMAT, Source
from tokformer.store.weights import WEIGHTS_FILE, check_fits, load_fitting, read_model_state, save_model_state

FORMAT_VERSION = 1


def check_free(out: Path) -> None:
    """Refuse an output folder that exists and is not an empty directory, before any work is done."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"{out} already exists and is not an empty directory; choose another output directory")


def save_pretrained(task: Task, model: nn.Module, directory: str | os.PathLike) -> Path:
    """Write ``model`` and what rebuilds it (``task``'s config and assets) as a model folder.

    The folder is assembled under a temporary name and renamed into place, so an interrupted
    save leaves no half folder; an existing non-empty ``directory`` is refused rather than mixed
    with another model's files. Returns the folder.
    """
    check_model_of(task, model, "save_pretrained")
    out = Path(directory)
    check_free(out)
    with staged_folder(out) as tmp:
        write_model_folder(task, model, tmp)
    return out


def check_model_of(task: object, model: object, caller: str) -> None:
    """Refuse, before anything is written, a ``model`` that is not ``task``'s: no module, or weights whose
    keys or shapes are not those ``task.build_model()`` makes (checked on the meta device: no memory, no
    initialisation). A sort task beside an lm's model wrote a folder that failed only when loaded;
    ``model=None`` was an AttributeError."""
    if not isinstance(task, Task):
        raise UsageError(f"{caller}: task must be a tokformer Task (the first of what tokformer.load_model "
                         f"returns), got {type(task).__name__}")
    if not isinstance(model, nn.Module):
        raise UsageError(f"{caller}: model must be a torch nn.Module (the second of what tokformer.load_model "
                         f"returns), got {type(model).__name__}")
    expected = on_meta(task.build_model)
    if expected is None:  # a builder that cannot run there: the folder's loading still checks the weights
        return
    try:
        check_fits(expected, getattr(model, "_orig_mod", model).state_dict(), "the model's state dict",
                   f"the {name_of(task)!r} task's config and tokenizer")
    except CheckpointError as e:
        raise UsageError(f"{caller}: {e}; give the task and model of one run (as tokformer.load_model "
                         "returns them)") from None


def write_model_folder(task: Task, model: nn.Module, directory: Path) -> None:
    """The files of a model folder, into the empty (staged) ``directory``."""
    # save_assets may remember where it wrote (a run directory); the caller's task keeps its own.
    copy.copy(task).save_assets(directory)
    save_model_state(getattr(model, "_orig_mod", model).state_dict(), directory)  # torch.compile's wrapper: a prefix
    config = {"format": MODEL_FORMAT, "format_version": FORMAT_VERSION,
              "task": {"name": name_of(task), **dataclasses.asdict(task.config)},
              TOKENIZER_HASH: tokenizer_fingerprint(directory, task.tokenizer_dirs())}
    (directory / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def load_folder(source: Source) -> tuple[Task, nn.Module]:
    """The task (assets loaded) and model of a model folder (``source.kind == "model"``)."""
    path, config_file, config = source.path, source.config_file, source.config
    version = config.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version > FORMAT_VERSION:
        raise ConfigError(f"{config_file}: format_version {version!r} is not one this tokformer reads "
                          f"(up to {FORMAT_VERSION}); upgrade tokformer")
    if not isinstance(config.get("task"), dict):
        raise ConfigError(f"{config_file}: 'task' must be an object with the task's name and options")
    if not (path / WEIGHTS_FILE).is_file():
        raise ConfigError(f"{path} has no {WEIGHTS_FILE} (a model folder's weights)")
    try:
        cfg = resolve_config({"task": config["task"]})
    except ConfigError as e:
        raise ConfigError(f"{config_file}: {e}") from None
    task = get_task(cfg.task)(cfg.task_config)
    saved_hash = config.get(TOKENIZER_HASH)
    if saved_hash is not None and saved_hash != tokenizer_fingerprint(path, task.tokenizer_dirs()):
        where = ", ".join(str(path / name) for name in task.tokenizer_dirs())
        raise ConfigError(f"{where} is not the tokenizer {path / WEIGHTS_FILE} was saved with "
                          "(its files changed since); restore it or export the model again")
    task.load_assets(path)
    check_against_weights(planned_size(task.build_model), [path / WEIGHTS_FILE], str(config_file))
    model = task.build_model()
    load_fitting(model, read_model_state(path), f"{path / WEIGHTS_FILE}", f"{config_file} and its tokenizer")
    return task, model
