"""Checkpoint directories of a run: ``RUN/checkpoints/step-NNNNNNNN/``, named, listed, published.

A checkpoint is built in a temporary directory (``.tmp-step-...``) that :func:`list_checkpoints`
does not see, and :func:`publish` renames it into place once every file is fsynced. Both
layouts (whole and sharded) use these; which one a directory holds is
:mod:`tokformer.store.checkpoints`' question alone.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from safetensors import SafetensorError

from tokformer.atomic import fsync_dir, shareable
from tokformer.errors import CheckpointError

CHECKPOINTS = "checkpoints"
_STEP_DIR = re.compile(r"^step-(\d{8})$")
# What a failed checkpoint write raises: the disk (full, read-only, quota) or safetensors on its behalf.
WRITE_ERRORS = (OSError, SafetensorError)


def step_dir(run_dir: Path, step: int) -> Path:
    return run_dir / CHECKPOINTS / f"step-{step:08d}"


def list_checkpoints(run_dir: Path) -> list[int]:
    """Steps of complete checkpoints, ascending (temporary directories are not complete)."""
    root = run_dir / CHECKPOINTS
    if not root.is_dir():
        return []
    return sorted(int(m.group(1)) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)) and p.is_dir())


def temp_step_dir(run_dir: Path, step: int) -> Path:
    """A new, empty directory in which the checkpoint of ``step`` is built: its temporary name makes
    it invisible to :func:`list_checkpoints` until :func:`publish` renames it."""
    root = run_dir / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(dir=root, prefix=f".tmp-{step_dir(run_dir, step).name}-"))


def publish(tmp: Path, run_dir: Path, step: int) -> Path:
    """Rename the finished ``tmp`` into place as the checkpoint of ``step`` and fsync the parent; it gets the
    user's usual permissions (``mkdtemp`` made it owner-only), so a colleague can resume or evaluate it."""
    shareable(tmp)
    final = step_dir(run_dir, step)
    if final.exists():  # re-saving a step (e.g. interrupted right after a save)
        shutil.rmtree(final)
    os.replace(tmp, final)
    fsync_dir(final.parent)
    return final


def write_failed(run_dir: Path, step: int, error: BaseException | str) -> CheckpointError:
    """The one-line error of a checkpoint write that failed (``error``: the exception or its reason)."""
    reason = getattr(error, "strerror", None) or error
    return CheckpointError(f"could not write the checkpoint of step {step} in {run_dir / CHECKPOINTS}: {reason}; "
                           "earlier checkpoints are intact")


def remove_partial(run_dir: Path) -> None:
    """Delete leftovers of a save that a crash interrupted."""
    root = run_dir / CHECKPOINTS
    if root.is_dir():
        for p in root.glob(".tmp-*"):
            shutil.rmtree(p, ignore_errors=True)


def prune(run_dir: Path, keep_last: int, keep: set[int]) -> None:
    """Delete all checkpoints but the last ``keep_last`` and the steps in ``keep`` (the best)."""
    steps = list_checkpoints(run_dir)
    for step in steps[:-keep_last]:
        if step not in keep:
            shutil.rmtree(step_dir(run_dir, step))
