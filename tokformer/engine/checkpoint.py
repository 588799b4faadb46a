"""Checkpoints: safetensors for tensors, JSON for the rest, written atomically.

A checkpoint is a directory ``checkpoints/step-NNNNNNNN/`` holding

- ``model.safetensors``: the model's state dict (plain keys: no ``module.`` / ``_orig_mod.``);
- ``state.safetensors``: every other tensor (optimizer moments, RNG states);
- ``state.json``: everything else, with ``{"__tensor__": key}`` where a tensor was.

Nothing is pickled, so loading a checkpoint someone handed you cannot run code. The
directory is built under a temporary name, every file and the directory are fsynced,
then it is renamed into place: a crash leaves either the whole checkpoint or none, and a
failed write (a full disk) removes its temporary directory and leaves earlier checkpoints
as they were. A damaged file is reported as a :class:`CheckpointError` naming it.

Under ``--strategy fsdp`` every process writes its own shard instead of ``model.safetensors``
(:mod:`tokformer.engine.sharded_checkpoint`, built on the helpers here); :func:`load_model_state`
reads either layout.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import nn
from torch.distributed.tensor import DTensor

from tokformer.errors import CheckpointError, ConfigError

CHECKPOINTS = "checkpoints"
_STEP_DIR = re.compile(r"^step-(\d{8})$")
ALIASES = "tokformer.aliases"  # model.safetensors metadata: JSON {alias: name} of shared tensors
TOKENIZER_DIR = "tokenizer"  # where every task saves its tokenizer inside the run directory
TOKENIZER_HASH = "tokenizer_sha256"  # state.json key: the tokenizer the weights were trained with


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
    if isinstance(obj, dict):
        if set(obj) == {"__tensor__"}:
            return tensors[obj["__tensor__"]]
        return {k: join_tensors(v, tensors) for k, v in obj.items()}
    if isinstance(obj, list):
        return [join_tensors(v, tensors) for v in obj]
    return obj


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file, fsync and rename: a crash leaves the old
    file or the new one, never half of one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` atomically (:func:`write_text_atomic`)."""
    write_text_atomic(path, json.dumps(data, indent=2))


def step_dir(run_dir: Path, step: int) -> Path:
    return run_dir / CHECKPOINTS / f"step-{step:08d}"


def save_checkpoint(run_dir: Path, step: int, model_state: dict[str, torch.Tensor], state: dict[str, Any]) -> Path:
    """Atomically write the checkpoint of ``step``; returns its directory."""
    tmp = temp_step_dir(run_dir, step)
    try:
        _write_files(tmp, model_state, state)
    except WRITE_ERRORS as e:  # e.g. a full disk: earlier checkpoints were never touched
        shutil.rmtree(tmp, ignore_errors=True)
        raise write_failed(run_dir, step, e) from e
    return publish(tmp, run_dir, step)


# What a failed checkpoint write raises: the disk (full, read-only, quota) or safetensors on its behalf.
WRITE_ERRORS = (OSError, SafetensorError)


def temp_step_dir(run_dir: Path, step: int) -> Path:
    """A new, empty directory in which the checkpoint of ``step`` is built: its temporary name makes
    it invisible to :func:`list_checkpoints` until :func:`publish` renames it."""
    root = run_dir / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(dir=root, prefix=f".tmp-{step_dir(run_dir, step).name}-"))


def publish(tmp: Path, run_dir: Path, step: int) -> Path:
    """Rename the finished ``tmp`` into place as the checkpoint of ``step`` and fsync the parent."""
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


def _write_files(directory: Path, model_state: dict[str, torch.Tensor], state: dict[str, Any]) -> None:
    """The three files of a checkpoint, each fsynced, then the directory."""
    save_model_state(model_state, directory)
    save_training_state(state, directory)
    fsync_file(directory / "model.safetensors")
    fsync_dir(directory)


def save_training_state(state: dict[str, Any], directory: Path) -> None:
    """``directory/state.safetensors`` (the tensors of ``state``) and ``state.json`` (the rest), fsynced."""
    json_state, tensors = split_tensors(state)
    save_file(tensors, directory / "state.safetensors")
    (directory / "state.json").write_text(json.dumps(json_state), encoding="utf-8")
    for name in ("state.safetensors", "state.json"):
        fsync_file(directory / name)


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


def save_model_state(state: dict[str, torch.Tensor], directory: Path) -> None:
    """Write ``directory/model.safetensors``: shared tensors stored once (:func:`dedupe_shared`),
    on the CPU; :func:`load_model_state` reads it back. Used by checkpoints and model folders."""
    if any(isinstance(v, DTensor) for v in state.values()):  # each process holds a slice: no whole file to write
        raise ConfigError("the model's weights are sharded over processes (--strategy fsdp); export its run "
                          "instead (tokformer export RUN_DIR, or save_pretrained of tokformer.engine.load_run's model)")
    unique, aliases = dedupe_shared(state)
    save_file(
        {k: v.detach().cpu().contiguous() for k, v in unique.items()},
        directory / "model.safetensors",
        metadata={ALIASES: json.dumps(aliases)},
    )


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


def damaged(file: Path, error: Exception | str) -> CheckpointError:
    """The one-line error for a checkpoint file that cannot be read, and why."""
    return CheckpointError(f"checkpoint file {file} is damaged or not a tokformer checkpoint ({error})")


def param_groups_from_json(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An optimizer's ``param_groups`` read back from JSON, in place: JSON has no tuples, and
    AdamW's ``betas`` is one (``load_state_dict`` keeps whatever type it is given)."""
    for group in groups:
        group.update({k: tuple(v) for k, v in group.items() if isinstance(v, list) and k != "params"})
    return groups


def load_model_state(path: Path) -> dict[str, torch.Tensor]:
    """A model state dict, shared tensors restored under every name they had; of a sharded
    checkpoint (``--strategy fsdp``), the whole tensors reassembled from its shards."""
    from tokformer.engine import sharded_checkpoint  # it builds on this module

    if sharded_checkpoint.is_sharded(path):
        return sharded_checkpoint.load_model_state(path)
    file = path / "model.safetensors"
    try:
        state = load_file(file)
        with safe_open(file, framework="pt") as f:
            aliases = json.loads((f.metadata() or {}).get(ALIASES, "{}"))
        state.update({alias: state[name] for alias, name in aliases.items()})
    except (SafetensorError, OSError, ValueError, KeyError) as e:  # truncated, garbage, missing
        raise damaged(file, e) from None
    return state


def load_weights(model: nn.Module, path: Path, tokenizer_dirs: Sequence[str] = (TOKENIZER_DIR,)) -> None:
    """Load checkpoint ``path`` into ``model``, or say which keys or shapes do not fit.

    A mismatch means the checkpoint was made for another model: another task, an edited
    ``config.json``, or a tokenizer with another vocabulary. ``tokenizer_dirs`` are the
    task's (``Task.tokenizer_dirs``): their files must be the ones the weights were trained with.
    """
    check_tokenizer(path, tokenizer_dirs)
    load_fitting(model, load_model_state(path), f"checkpoint {path}", "the run's config and tokenizer")


def load_fitting(model: nn.Module, state: dict[str, torch.Tensor], source: str, built_from: str) -> None:
    """``model.load_state_dict(state)``, or a :class:`CheckpointError` saying which keys or shapes of
    ``source`` (e.g. "checkpoint RUN/...") do not fit the model built from ``built_from``."""
    check_fits(model, state, source, built_from)
    model.load_state_dict(state)


def check_fits(model: nn.Module, state: dict[str, torch.Tensor], source: str, built_from: str) -> None:
    """The check of :func:`load_fitting` alone, for models that load otherwise (sharded ones)."""
    expected = model.state_dict()
    missing = sorted(expected.keys() - state.keys())
    unexpected = sorted(state.keys() - expected.keys())
    reshaped = [f"{k} {tuple(state[k].shape)} vs {tuple(expected[k].shape)}"
                for k in sorted(expected.keys() & state.keys()) if state[k].shape != expected[k].shape]
    problems = [f"{what}: {', '.join(keys[:3])}{' ...' if len(keys) > 3 else ''}"
                for what, keys in (("missing", missing), ("unexpected", unexpected), ("shape", reshaped)) if keys]
    if problems:
        raise CheckpointError(f"{source} does not fit the model built from {built_from} ({'; '.join(problems)})")


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
    :func:`load_weights`' shape check; this catches same-size swaps and edits too."""
    try:
        saved = json.loads((path / "state.json").read_text(encoding="utf-8")).get(TOKENIZER_HASH)
    except (OSError, ValueError) as e:
        raise damaged(path / "state.json", e) from None
    run_dir = path.parent.parent
    if saved is not None and saved != tokenizer_fingerprint(run_dir, tokenizer_dirs):
        where = ", ".join(str(run_dir / name) for name in tokenizer_dirs)
        raise CheckpointError(f"checkpoint {path} was trained with another tokenizer than {where} "
                              "(its files changed since); restore that tokenizer or train again")


def load_state(path: Path) -> dict[str, Any]:
    """The JSON + tensor training state of a checkpoint directory."""
    try:
        tensors = load_file(path / "state.safetensors")
        return join_tensors(json.loads((path / "state.json").read_text(encoding="utf-8")), tensors)
    except (SafetensorError, OSError, ValueError, KeyError) as e:
        raise damaged(path, e) from None


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
