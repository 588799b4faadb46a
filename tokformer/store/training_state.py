"""A checkpoint's training state (step, schedule, RNG streams, optimizer...) without pickle.

``state.json`` holds everything but tensors, with ``{"__tensor__": key}`` where a tensor was;
``state.safetensors`` holds the tensors under those keys.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from tokformer import files
from tokformer.atomic import fsync_file
from tokformer.errors import DataError
from tokformer.store.weights import damaged

STATE_JSON = "state.json"
STATE_TENSORS = "state.safetensors"


def split_tensors(obj: Any, prefix: str = "", *, copy: bool = True) -> tuple[Any, dict[str, torch.Tensor]]:
    """Replace every tensor in a nested dict/list structure by a reference; return both.

    Tuples become lists (JSON has none); :func:`join_tensors` is the inverse otherwise.
    ``copy``: each tensor as a contiguous CPU copy, ready to save; False keeps the tensors
    themselves (sharded ones, whose local pieces the caller saves).
    """
    tensors: dict[str, torch.Tensor] = {}

    def walk(value: Any, path: str) -> Any:
        if isinstance(value, torch.Tensor):
            tensors[path] = value.detach().cpu().contiguous().clone() if copy else value
            return {"__tensor__": path}
        if isinstance(value, dict):
            return {str(k): walk(v, f"{path}.{k}" if path else str(k)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(v, f"{path}.{i}") for i, v in enumerate(value)]
        return value

    return walk(obj, prefix), tensors


def join_tensors(obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """The structure :func:`split_tensors` split, its tensors put back."""
    if isinstance(obj, dict):
        if set(obj) == {"__tensor__"}:
            return tensors[obj["__tensor__"]]
        return {k: join_tensors(v, tensors) for k, v in obj.items()}
    if isinstance(obj, list):
        return [join_tensors(v, tensors) for v in obj]
    return obj


def save_training_state(state: dict[str, Any], directory: Path) -> None:
    """``directory/state.safetensors`` (the tensors of ``state``) and ``state.json`` (the rest), fsynced."""
    json_state, tensors = split_tensors(state)
    save_file(tensors, directory / STATE_TENSORS)
    (directory / STATE_JSON).write_text(json.dumps(json_state), encoding="utf-8")
    for name in (STATE_TENSORS, STATE_JSON):
        fsync_file(directory / name)


def load_training_state(directory: Path) -> dict[str, Any]:
    """The JSON + tensor training state of a checkpoint directory."""
    try:
        tensors = load_file(files.regular(directory / STATE_TENSORS))
        state = join_tensors(files.loads(files.read_text(directory / STATE_JSON)), tensors)  # a pipe: refused
    except (SafetensorError, OSError, DataError, ValueError, KeyError, TypeError) as e:
        raise damaged(directory, e) from None
    if not isinstance(state, dict):
        raise damaged(directory / STATE_JSON, "not a JSON object")
    return state


def param_groups_from_json(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An optimizer's ``param_groups`` read back from JSON, in place: JSON has no tuples, and
    AdamW's ``betas`` is one (``load_state_dict`` keeps whatever type it is given)."""
    for group in groups:
        group.update({k: tuple(v) for k, v in group.items() if isinstance(v, list) and k != "params"})
    return groups
