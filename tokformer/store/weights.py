"""``model.safetensors``: a model's state dict on disk, in checkpoints and model folders alike.

safetensors refuses tensors that share memory (tied embeddings, a shared embedder), so each
later name of a shared tensor is stored as an alias of the first in the file's metadata and
restored on reading. Nothing is pickled. Loading checks that every key and shape fits the
model before anything is copied, so a mismatch is one line naming the keys.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from tokformer import files
from tokformer.errors import CheckpointError, ConfigError, DataError

WEIGHTS_FILE = "model.safetensors"
ALIASES = "tokformer.aliases"  # model.safetensors metadata: JSON {alias: name} of shared tensors


def damaged(file: Path, error: Exception | str) -> CheckpointError:
    """The one-line error for a weights or state file that cannot be read, and why. A DataError of
    :mod:`tokformer.files` (a pipe, a missing file, bytes that are not UTF-8) already names the file it
    could not read, so its message is the reason whole, and the path is said once."""
    if isinstance(error, DataError):
        return CheckpointError(f"checkpoint file {error}")
    return CheckpointError(f"checkpoint file {file} is damaged or not a tokformer checkpoint ({error})")


def dedupe_shared(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Keep one name per shared tensor (the same view of the same memory: tied weights); returns
    (unique tensors, alias -> name). Any other view of memory a kept tensor holds (a transpose, a
    slice) is kept as a copy: read back as the first one it would load wrong, and safetensors
    refuses two views of one memory."""
    first: dict[tuple[int, tuple[int, ...], tuple[int, ...], torch.dtype], str] = {}
    unique, aliases, storages = {}, {}, set()
    for name, tensor in state.items():
        key = (tensor.data_ptr(), tuple(tensor.shape), tensor.stride(), tensor.dtype)
        if tensor.numel() and key in first:
            aliases[name] = first[key]
            continue
        first.setdefault(key, name)
        storage = tensor.untyped_storage().data_ptr()
        unique[name] = tensor.clone() if tensor.numel() and storage in storages else tensor
        storages.add(storage)
    return unique, aliases


def is_dtensor(value: object) -> bool:
    """Whether ``value`` is a DTensor (a sharded FSDP tensor). One can exist only once
    ``torch.distributed.tensor`` is imported, so a process that never shards never pays its
    second of import time (every CLI command would)."""
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and isinstance(value, module.DTensor)


def save_model_state(state: dict[str, torch.Tensor], directory: Path) -> None:
    """Write ``directory/model.safetensors``: shared tensors stored once, on the CPU."""
    if any(is_dtensor(v) for v in state.values()):  # each process holds a slice: no whole file to write
        raise ConfigError("the model's weights are sharded over processes (--strategy fsdp); export its run "
                          "instead (tokformer export RUN_DIR, or save_pretrained of tokformer.engine.load_run's model)")
    unique, aliases = dedupe_shared(state)
    save_file(
        {k: v.detach().cpu().contiguous() for k, v in unique.items()},
        directory / WEIGHTS_FILE,
        metadata={ALIASES: json.dumps(aliases)},
    )


def read_model_state(directory: Path) -> dict[str, torch.Tensor]:
    """``directory/model.safetensors`` as a state dict, shared tensors under every name they had."""
    file = directory / WEIGHTS_FILE
    try:
        state = load_file(files.regular(file))
        with safe_open(file, framework="pt") as f:
            aliases = files.loads((f.metadata() or {}).get(ALIASES, "{}"))
        state.update({alias: state[name] for alias, name in aliases.items()})
    except (SafetensorError, OSError, DataError, ValueError, KeyError, TypeError, AttributeError) as e:  # garbage
        raise damaged(file, e) from None
    return state


def check_fits(model: nn.Module, state: dict[str, torch.Tensor], source: str, built_from: str) -> None:
    """A :class:`CheckpointError` saying which keys or shapes of ``source`` (e.g. "checkpoint RUN/...")
    do not fit ``model`` (built from ``built_from``); nothing when they all fit."""
    expected = model.state_dict()
    missing = sorted(expected.keys() - state.keys())
    unexpected = sorted(state.keys() - expected.keys())
    reshaped = [f"{k} {tuple(state[k].shape)} vs {tuple(expected[k].shape)}"
                for k in sorted(expected.keys() & state.keys()) if state[k].shape != expected[k].shape]
    # a float weight stored as integers (or the reverse) would load as garbage: load_state_dict casts silently
    retyped = [f"{k} {str(state[k].dtype).removeprefix('torch.')} vs {str(expected[k].dtype).removeprefix('torch.')}"
               for k in sorted(expected.keys() & state.keys()) if _kind(state[k]) != _kind(expected[k])]
    problems = [f"{what}: {', '.join(keys[:3])}{' ...' if len(keys) > 3 else ''}"
                for what, keys in (("missing", missing), ("unexpected", unexpected), ("shape", reshaped),
                                   ("dtype", retyped)) if keys]
    if problems:
        raise CheckpointError(f"{source} does not fit the model built from {built_from} ({'; '.join(problems)})")


def _kind(tensor: torch.Tensor) -> str:
    """float, complex, bool or integer: the dtype families a state dict may not cross."""
    if tensor.is_floating_point():
        return "float"
    if tensor.is_complex():
        return "complex"
    return "bool" if tensor.dtype == torch.bool else "integer"


def load_fitting(model: nn.Module, state: dict[str, torch.Tensor], source: str, built_from: str) -> None:
    """``model.load_state_dict(state)`` after :func:`check_fits`; weights holding NaN or infinite values
    (a damaged or diverged file) are refused, so no command predicts or evaluates with them silently."""
    check_fits(model, state, source, built_from)
    broken = [k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if broken:
        raise CheckpointError(f"{source} holds NaN or infinite values in {', '.join(broken[:3])}"
                              f"{' ...' if len(broken) > 3 else ''}: the weights are damaged or diverged")
    model.load_state_dict(state)
