"""Checkpoints of a run, whole or sharded, behind one interface.

A run saves ``RUN/checkpoints/step-NNNNNNNN/`` in one of two layouts: **whole**
(:mod:`tokformer.store.whole`: one process writes ``model.safetensors`` and the training
state) or **sharded** (:mod:`tokformer.store.sharded`: under ``--strategy fsdp`` every
process writes the pieces it holds, and rank 0 a manifest). This module is the only place
that asks which layout a directory holds; callers save, list, find and read checkpoints
without knowing. Nothing is pickled, so loading a checkpoint someone handed you cannot run
code, and a damaged file is a :class:`~tokformer.errors.CheckpointError` naming it.
"""

from __future__ import annotations

import hashlib
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tokformer import files
from tokformer.errors import CheckpointError, ConfigError, DataError, UsageError
from tokformer.runtime.distributed import Dist
from tokformer.runtime.task import TOKENIZER_DIR
from tokformer.store import sharded, whole
from tokformer.store.run_dir import asides_of
from tokformer.store.steps import CHECKPOINTS, list_checkpoints, step_dir
from tokformer.store.training_state import STATE_JSON, load_training_state
from tokformer.store.weights import damaged, load_fitting, read_model_state

TOKENIZER_HASH = "tokenizer_sha256"  # state.json key: the tokenizer the weights were trained with
BEST_FILE = "best.json"  # RUN/best.json: {"step": ..., metric: ...} of the best checkpoint


def save(run_dir: Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any],
         d: Dist, *, sharded_layout: bool) -> None:
    """Checkpoint ``step``: ``model``'s weights, ``optimizer``'s state and the training ``state``.

    ``sharded_layout`` (``--strategy fsdp``): every process writes its own shard (a collective);
    otherwise rank 0 writes whole tensors.
    """
    if sharded_layout:
        sharded.save_checkpoint(run_dir, step, model, optimizer, state, d)
    elif d.is_main:
        whole.save_checkpoint(run_dir, step, model.state_dict(), {**state, "optimizer": optimizer.state_dict()})


@dataclass
class Checkpoint:
    """A checkpoint read back and checked, whatever its layout.

    Attributes:
        path: its directory.
        weights: the whole model state dict (tied weights under every name).
        state: the training state (step, schedule, RNG streams, best, watch, metrics).
        optimizer: the optimizer's whole state; keyed by parameter *name* when ``by_name`` (a
            sharded checkpoint), else as ``Optimizer.state_dict`` keys it (by index).
    """

    path: Path
    weights: dict[str, torch.Tensor]
    state: dict[str, Any]
    optimizer: dict[str, Any]
    by_name: bool


def is_sharded(path: Path) -> bool:
    """Whether checkpoint directory ``path`` is sharded (the one place that asks)."""
    return sharded.is_sharded(path)


def load_model_state(path: Path) -> dict[str, torch.Tensor]:
    """The whole model state dict of checkpoint ``path``, shared tensors under every name."""
    return sharded.load_model_state(path) if is_sharded(path) else read_model_state(path)


def read_checkpoint(path: Path) -> Checkpoint:
    """Weights, training state and optimizer state of checkpoint ``path``, every file read and checked."""
    weights = load_model_state(path)
    state = load_training_state(path)
    if is_sharded(path):
        return Checkpoint(path, weights, state, sharded.load_optimizer_state(path), by_name=True)
    return Checkpoint(path, weights, state, whole.optimizer_state(path, state), by_name=False)


def tokenizer_fingerprint(run_dir: Path, tokenizer_dirs: Sequence[str] = (TOKENIZER_DIR,)) -> str | None:
    """SHA-256 over the names and bytes of every file in the task's tokenizer directories (None
    when there are none). With several directories each name is hashed too, so moving a file
    from one to another counts as a change; one directory hashes as it always did, so runs made
    before tasks declared their directories still load."""
    roots = [run_dir / name for name in tokenizer_dirs if (run_dir / name).is_dir()]
    if not roots:
        return None
    digest = hashlib.sha256()
    for root in roots:
        if len(tokenizer_dirs) > 1:
            digest.update(root.name.encode() + b"/\0")
        for file in sorted(p for p in root.rglob("*") if p.is_file()):
            digest.update(file.relative_to(root).as_posix().encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


def check_tokenizer(path: Path, tokenizer_dirs: Sequence[str] = (TOKENIZER_DIR,)) -> None:
    """Refuse checkpoint ``path`` (in ``RUN/checkpoints/``) if RUN's tokenizers are not the ones it was
    trained with: ids would silently mean other tokens. Vocabulary-size changes are also caught by
    the shape check of :func:`load_weights`; this catches same-size swaps and edits too."""
    try:
        saved = files.loads(files.read_text(path / STATE_JSON)).get(TOKENIZER_HASH)  # never a pipe: it would block
    except (DataError, ValueError, AttributeError) as e:
        raise damaged(path / STATE_JSON, e) from None
    run_dir = path.parent.parent
    if saved is not None and saved != tokenizer_fingerprint(run_dir, tokenizer_dirs):
        where = ", ".join(str(run_dir / name) for name in tokenizer_dirs)
        raise CheckpointError(f"checkpoint {path} was trained with another tokenizer than {where} "
                              "(its files changed since); restore that tokenizer or train again")


def load_weights(model: nn.Module, path: Path, tokenizer_dirs: Sequence[str] = (TOKENIZER_DIR,)) -> None:
    """Load checkpoint ``path``'s weights into ``model``, or say which keys or shapes do not fit.

    A mismatch means the checkpoint was made for another model: another task, an edited
    ``config.json``, or a tokenizer with another vocabulary. ``tokenizer_dirs`` are the
    task's (``Task.tokenizer_dirs``): their files must be the ones the weights were trained with.
    """
    check_tokenizer(path, tokenizer_dirs)
    load_fitting(model, load_model_state(path), f"checkpoint {path}", "the run's config and tokenizer")


def best_step(run_dir: Path) -> int | None:
    """The step ``RUN/best.json`` names, None when the run has none yet."""
    file = run_dir / BEST_FILE
    if not file.exists():
        return None
    try:
        step = files.loads(files.read_text(file))["step"]  # never a pipe: it would block
    except (DataError, ValueError, KeyError, TypeError) as e:
        raise damaged(file, e) from None
    if not isinstance(step, int) or isinstance(step, bool):
        raise damaged(file, f"its step is {step!r}, not a step number")
    return step


def checkpoint_selector(which: object) -> str:
    """``which`` as the CLI's ``--checkpoint`` spells it: ``best``, ``latest`` or a step, which Python
    callers may also give as an int (``checkpoint=20``); anything else (None, a bool, a float, a path)
    is a one-line UsageError naming the argument, never an AttributeError from deep in the store."""
    if isinstance(which, str):
        return which
    if isinstance(which, numbers.Integral) and not isinstance(which, bool):
        return str(int(which))
    raise UsageError(f"checkpoint must be 'best', 'latest' or a step number, got {which!r} "
                     f"({type(which).__name__})")


def _no_checkpoint(run_dir: Path) -> str:
    """Why ``run_dir`` has no checkpoint to load, naming the run an ``--overwrite`` set aside, if one
    waits there: a replacing run killed before its first checkpoint leaves it hidden until the next
    ``tokformer train`` of ``run_dir`` puts it back, and said only "no checkpoint" meanwhile."""
    asides = asides_of(run_dir)
    if not asides:
        return f"no checkpoint in {run_dir / CHECKPOINTS}; has this run saved one yet?"
    return (f"no checkpoint in {run_dir / CHECKPOINTS}: a `tokformer train --overwrite` of it has not saved its "
            f"first one (it is running, or was stopped); the run it replaces is kept as {asides[-1]}, and the "
            f"next `tokformer train` of {run_dir} puts it back if the new one never saved a checkpoint")


def find_checkpoint(run_dir: Path, which: str | int = "latest") -> Path:
    """``latest``, ``best`` or a step number (a string of digits or an int) -> that checkpoint's directory."""
    which = checkpoint_selector(which)
    steps = list_checkpoints(run_dir)
    if not steps:
        raise ConfigError(_no_checkpoint(run_dir))
    if which == "latest":
        return step_dir(run_dir, steps[-1])
    if which == "best":
        best = best_step(run_dir)
        if best is not None and best not in steps:
            raise CheckpointError(f"{run_dir / BEST_FILE} names step {best}, which has no checkpoint in "
                                  f"{run_dir / CHECKPOINTS}; pass --checkpoint latest or one of steps {steps}")
        return step_dir(run_dir, steps[-1] if best is None else best)
    if which.isdigit() and int(which) in steps:
        return step_dir(run_dir, int(which))
    raise ConfigError(f"checkpoint '{which}' not found; use latest, best or one of steps {steps}")
