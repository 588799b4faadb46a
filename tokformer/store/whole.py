"""The whole checkpoint layout: one process writes every tensor.

``checkpoints/step-NNNNNNNN/`` holds ``model.safetensors`` (the model's state dict, plain keys:
no ``module.`` / ``_orig_mod.``), ``state.safetensors`` and ``state.json`` (the training state,
optimizer included). Built under a temporary name, every file and the directory fsynced, then
renamed into place: a crash leaves either the whole checkpoint or none, and a failed write (a
full disk) removes its temporary directory and leaves earlier checkpoints as they were.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

from tokformer.atomic import fsync_dir, fsync_file
from tokformer.store.steps import WRITE_ERRORS, publish, temp_step_dir, write_failed
from tokformer.store.training_state import param_groups_from_json, save_training_state
from tokformer.store.weights import WEIGHTS_FILE, damaged, save_model_state


def save_checkpoint(run_dir: Path, step: int, model_state: dict[str, torch.Tensor], state: dict[str, Any]) -> Path:
    """Atomically write the checkpoint of ``step`` (``state`` holds the optimizer's); returns its directory."""
    tmp = temp_step_dir(run_dir, step)
    try:
        save_model_state(model_state, tmp)
        save_training_state(state, tmp)
        fsync_file(tmp / WEIGHTS_FILE)
        fsync_dir(tmp)
    except WRITE_ERRORS as e:  # e.g. a full disk: earlier checkpoints were never touched
        shutil.rmtree(tmp, ignore_errors=True)
        raise write_failed(run_dir, step, e) from e
    return publish(tmp, run_dir, step)


def optimizer_state(path: Path, state: dict[str, Any]) -> dict[str, Any]:
    """The optimizer's ``state_dict`` as saved in checkpoint ``path``'s training ``state`` (keyed by
    parameter index, as ``torch.optim.Optimizer.state_dict`` makes it)."""
    try:
        optim_state = state["optimizer"]
        optim_state["state"] = {int(k): v for k, v in optim_state["state"].items()}  # JSON keys are strings
        param_groups_from_json(optim_state["param_groups"])
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise damaged(path / "state.json", f"its optimizer state: {e}") from None
    return optim_state
