"""Checkpoints: safetensors for tensors, JSON for the rest, written atomically.

A checkpoint is a directory ``checkpoints/step-NNNNNNNN/`` holding

- ``model.safetensors``: the model's state dict (plain keys: no ``module.`` / ``_orig_mod.``);
- ``state.safetensors``: every other tensor (optimizer moments, RNG states);
- ``state.json``: everything else, with ``{"__tensor__": key}`` where a tensor was.

Nothing is pickled, so loading a checkpoint someone handed you cannot run code. The
directory is built under a temporary name, every file and the directory are fsynced,
then it is renamed into place: a crash leaves either the whole checkpoint or none.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from tokformer.errors import ConfigError

CHECKPOINTS = "checkpoints"
_STEP_DIR = re.compile(r"^step-(\d{8})$")
ALIASES = "tokformer.aliases"  # model.safetensors metadata: JSON {alias: name} of shared tensors


def split_tensors(obj: Any, prefix: str = "") -> tuple[Any, dict[str, torch.Tensor]]:
    """Replace every tensor in a nested dict/list structure by a reference; return both.

    Tuples become lists (JSON has none); :func:`join_tensors` is the inverse otherwise.
    """
    tensors: dict[str, torch.Tensor] = {}

    def walk(value: Any, path: str) -> Any:
        if isinstance(value, torch.Tensor):
            tensors[path] = value.detach().cpu().contiguous().clone()
            return {"__tensor__": path}
        if isinstance(value, dict):
            return {str(k): walk(v, f"{path}.{k}" if path else str(k)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(v, f"{path}.{i}") for i, v in enumerate(value)]
        return value

    return walk(obj, prefix), tensors


def join_tensors(obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(obj, dict):
        if set(obj) == {"__tensor__"}:
            return tensors[obj["__tensor__"]]
        return {k: join_tensors(v, tensors) for k, v in obj.items()}
    if isinstance(obj, list):
        return [join_tensors(v, tensors) for v in obj]
    return obj


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` via temp file, fsync and rename."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def step_dir(run_dir: Path, step: int) -> Path:
    return run_dir / CHECKPOINTS / f"step-{step:08d}"


def save_checkpoint(run_dir: Path, step: int, model_state: dict[str, torch.Tensor], state: dict[str, Any]) -> Path:
    """Atomically write the checkpoint of ``step``; returns its directory."""
    root = run_dir / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    final = step_dir(run_dir, step)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".tmp-{final.name}-"))
    json_state, tensors = split_tensors(state)
    unique, aliases = dedupe_shared(model_state)
    save_file(
        {k: v.detach().cpu().contiguous() for k, v in unique.items()},
        tmp / "model.safetensors",
        metadata={ALIASES: json.dumps(aliases)},
    )
    save_file(tensors, tmp / "state.safetensors")
    (tmp / "state.json").write_text(json.dumps(json_state), encoding="utf-8")
    for name in ("model.safetensors", "state.safetensors", "state.json"):
        _fsync_file(tmp / name)
    _fsync_dir(tmp)
    if final.exists():  # re-saving a step (e.g. interrupted right after a save)
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(root)
    return final


def list_checkpoints(run_dir: Path) -> list[int]:
    """Steps of complete checkpoints, ascending (temporary directories are not complete)."""
    root = run_dir / CHECKPOINTS
    if not root.is_dir():
        return []
    return sorted(int(m.group(1)) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)))


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


def dedupe_shared(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Keep one name per shared tensor (tied embeddings, a shared embedder).

    safetensors refuses tensors that share memory; each later name becomes an alias of the
    first, stored in the file's metadata, and :func:`load_model_state` restores it.
    Returns (unique tensors, alias -> name).
    """
    first: dict[tuple[int, tuple[int, ...], torch.dtype], str] = {}
    unique, aliases = {}, {}
    for name, tensor in state.items():
        key = (tensor.data_ptr(), tuple(tensor.shape), tensor.dtype)
        if tensor.numel() and key in first:
            aliases[name] = first[key]
        else:
            first.setdefault(key, name)
            unique[name] = tensor
    return unique, aliases


def load_model_state(path: Path) -> dict[str, torch.Tensor]:
    """A model state dict, shared tensors restored under every name they had."""
    file = path / "model.safetensors"
    state = load_file(file)
    with safe_open(file, framework="pt") as f:
        aliases = json.loads((f.metadata() or {}).get(ALIASES, "{}"))
    state.update({alias: state[name] for alias, name in aliases.items()})
    return state


def load_state(path: Path) -> dict[str, Any]:
    """The JSON + tensor training state of a checkpoint directory."""
    tensors = load_file(path / "state.safetensors")
    return join_tensors(json.loads((path / "state.json").read_text(encoding="utf-8")), tensors)


def find_checkpoint(run_dir: Path, which: str = "latest") -> Path:
    """``latest``, ``best`` or a step number -> that checkpoint's directory."""
    steps = list_checkpoints(run_dir)
    if not steps:
        raise ConfigError(f"no checkpoint in {run_dir / CHECKPOINTS}; has this run saved one yet?")
    if which == "latest":
        return step_dir(run_dir, steps[-1])
    if which == "best":
        best = run_dir / "best.json"
        step = json.loads(best.read_text())["step"] if best.exists() else steps[-1]
        return step_dir(run_dir, step)
    if which.isdigit() and int(which) in steps:
        return step_dir(run_dir, int(which))
    raise ConfigError(f"checkpoint '{which}' not found; use latest, best or one of steps {steps}")
