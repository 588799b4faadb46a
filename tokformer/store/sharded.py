"""Sharded checkpoints: every process writes the pieces of weights and optimizer state it holds.

Under ``--strategy fsdp`` no process holds whole tensors, and gathering them on rank 0 to
write one file would need the very memory sharding saves. So each rank writes its own
pieces, and the checkpoint directory of a step holds::

    shard-00000-of-00002.safetensors   rank 0's pieces of the model.* and optimizer.* tensors; the header's
    shard-00001-of-00002.safetensors   metadata (JSON) names the step, the rank and, per piece, the whole
                                       tensor's shape and the piece's offset in it
    state.json, state.safetensors      rank 0: step, schedule, data position, every rank's RNG streams, best,
                                       metrics (as in an unsharded checkpoint, less the weights and AdamW moments)
    manifest.json                      rank 0, written last: format, step, world size, each shard's size, each
                                       tensor's shape, the optimizer's layout and the tied-weight aliases

Nothing is pickled. (``torch.distributed.checkpoint`` is not used for files: its default
metadata file, ``.metadata``, is a pickle.) The directory is built under a temporary name
and renamed into place only after every shard and the manifest are written and fsynced
(:mod:`tokformer.store.steps`), so a checkpoint is complete or invisible.

Loading checks the manifest and every shard before reading a tensor (a missing shard, a
shard of another step or world size are one-line :class:`CheckpointError`\\ s, and resume
falls back to the previous checkpoint), then reassembles each whole tensor from its pieces,
for the loader to re-shard to its own processes (:func:`tokformer.engine.fsdp.load_full_state`).
So a checkpoint written by 2 processes resumes on 1 or 4, and ``tokformer export`` writes
one consolidated ``model.safetensors``. Every process holds all whole tensors at once while
loading: a few hundred MB at tokformer's model sizes, fine; a model too big for that would
need each rank to read only the pieces overlapping its own.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import nn

from tokformer import files
from tokformer.atomic import fsync_dir, fsync_file
from tokformer.errors import CheckpointError, DataError
from tokformer.runtime.distributed import Dist, broadcast, gather
from tokformer.store.steps import WRITE_ERRORS, publish, temp_step_dir, write_failed
from tokformer.store.training_state import join_tensors, param_groups_from_json, save_training_state, split_tensors
from tokformer.store.weights import damaged, dedupe_shared, is_dtensor

MANIFEST = "manifest.json"
FORMAT = "tokformer-sharded-checkpoint"
FORMAT_VERSION = 1
SHARD_META = "tokformer.shard"  # safetensors header metadata key of a shard's JSON description
MODEL, OPTIMIZER = "model", "optimizer"  # tensor key prefixes: "model.<name>", "optimizer.state.<name>.exp_avg"


def shard_name(rank: int, world: int) -> str:
    return f"shard-{rank:05d}-of-{world:05d}.safetensors"


def is_sharded(path: Path) -> bool:
    """Whether checkpoint directory ``path`` is sharded (a manifest, or shards whose manifest is lost)."""
    return (path / MANIFEST).exists() or any(path.glob("shard-*.safetensors"))


def _piece(tensor: torch.Tensor, rank: int) -> tuple[torch.Tensor, list[int]] | None:
    """This rank's piece of ``tensor`` and its offset in the whole tensor; None when another rank
    saves it. FSDP2 shards dim 0 as ``torch.chunk`` does; a plain or replicated tensor is saved by
    rank 0 alone."""
    if not is_dtensor(tensor):
        return (tensor, [0] * tensor.dim()) if rank == 0 else None
    from torch.distributed.tensor import Replicate, Shard  # imported already: tensor is a DTensor

    local = tensor.to_local()
    placements = tuple(tensor.placements)
    if placements == (Replicate(),):
        return (local, [0] * tensor.dim()) if tensor.device_mesh.get_local_rank() == 0 else None
    if placements != (Shard(0),):
        raise CheckpointError(f"sharded checkpoints take tensors sharded on dim 0 over one mesh dimension, "
                              f"got placements {placements}")
    rows, parts, index = tensor.shape[0], tensor.device_mesh.size(), tensor.device_mesh.get_local_rank()
    chunk = math.ceil(rows / parts)
    start = min(index * chunk, rows)
    if local.shape[0] != min(chunk, rows - start):  # a layout this code does not know: never save it wrongly
        raise CheckpointError(f"unexpected shard of {tuple(tensor.shape)} on rank {index}: {tuple(local.shape)}")
    return (local, [start] + [0] * (tensor.dim() - 1)) if local.numel() else None


def save_checkpoint(run_dir: Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
                            state: dict[str, Any], d: Dist) -> None:
    """Write the checkpoint of ``step`` from every process (a collective): each its shard, rank
    0 the training ``state`` and, once every shard is on disk, the manifest; then it is renamed
    into place. A write that fails on any rank (a full disk) fails on all of them alike."""
    made = broadcast(_temp_dir(run_dir, step) if d.is_main else None, d)  # (directory, None) or (None, reason)
    if made[1] is not None:
        raise write_failed(run_dir, step, made[1])
    tmp = Path(made[0])
    contents: dict = {}
    try:
        tensors, contents = _contents(model, optimizer)
        size = _write_shard(tmp, tensors, step, d)
        if d.is_main:
            save_training_state(state, tmp)
        outcome: tuple[str | None, int] = (None, size)
    except Exception as e:  # noqa: BLE001 - any failure on one rank must reach the gather below, or the others hang
        outcome = (getattr(e, "strerror", None) or str(e), 0)
    outcomes = gather(outcome, d)  # a collective: every rank learns whether all shards are written
    failure = next((f for f, _ in outcomes if f is not None), None)
    if d.is_main:
        try:
            if failure is None:
                shards = {shard_name(r, d.world): size for r, (_, size) in enumerate(outcomes)}
                manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, "step": step, "world": d.world,
                            "shards": shards, **contents}
                (tmp / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
                fsync_file(tmp / MANIFEST)
                fsync_dir(tmp)
                publish(tmp, run_dir, step)
        except WRITE_ERRORS as e:
            failure = getattr(e, "strerror", None) or str(e)
        if failure is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    failure = broadcast(failure, d)  # every rank returns once the checkpoint is in place, or raises alike
    if failure is not None:
        raise write_failed(run_dir, step, failure)


def _contents(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Every tensor to save by key (``model.<name>``, ``optimizer.state.<name>.<moment>``; sharded
    ones as DTensors) and the manifest's description of them (shapes, dtypes, aliases, optimizer layout)."""
    weights = {name: value.detach() for name, value in model.state_dict().items()}
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict  # ~1 s to import: only here

    local = {name: value.to_local() if is_dtensor(value) else value for name, value in weights.items()}
    unique, aliases = dedupe_shared(local)  # tied weights: one copy, as in model.safetensors
    layout, optimizer_tensors = split_tensors(get_optimizer_state_dict(model, optimizer), OPTIMIZER, copy=False)
    # a sharded tensor's DTensor (its placement says which piece is whose); a whole one as deduped (a view of
    # memory another holds is a copy: safetensors refuses shared memory)
    tensors = {f"{MODEL}.{name}": weights[name] if is_dtensor(weights[name]) else unique[name]
               for name in unique} | optimizer_tensors
    described = {key: {"shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch.")}
                 for key, value in tensors.items()}
    return tensors, {"tensors": described, "aliases": aliases, OPTIMIZER: layout}


def _write_shard(directory: Path, tensors: dict[str, torch.Tensor], step: int, d: Dist) -> int:
    """This rank's pieces of ``tensors`` as ``directory/shard-R-of-N.safetensors``, fsynced; returns its size."""
    pieces = {key: piece for key, value in tensors.items() if (piece := _piece(value, d.rank)) is not None}
    meta = {"format": FORMAT, "step": step, "rank": d.rank, "world": d.world,
            "pieces": {key: {"shape": list(tensors[key].shape), "offset": offset}
                       for key, (_, offset) in pieces.items()}}
    file = directory / shard_name(d.rank, d.world)
    save_file({key: local.detach().cpu().contiguous() for key, (local, _) in pieces.items()}, file,
              metadata={SHARD_META: json.dumps(meta)})
    fsync_file(file)
    return file.stat().st_size


def _temp_dir(run_dir: Path, step: int) -> tuple[str | None, str | None]:
    """Rank 0's temporary checkpoint directory, or why it could not be made (told to every rank)."""
    try:
        return str(temp_step_dir(run_dir, step)), None
    except OSError as e:
        return None, e.strerror or str(e)


def _incomplete(path: Path, what: str) -> CheckpointError:
    return CheckpointError(f"checkpoint {path} is incomplete: {what}; resuming falls back to the checkpoint "
                           "before it (tokformer train --resume)")


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest of sharded checkpoint ``path``, checked against its shards: every shard present,
    of the recorded size, of this step and world size. Reads no tensor."""
    file = path / MANIFEST
    if not file.exists():
        raise _incomplete(path, f"no {MANIFEST} (it is written last, after every shard)")
    try:
        manifest = files.loads(files.read_text(file))  # never a pipe: it would block
    except (DataError, ValueError) as e:
        raise damaged(file, e) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or not _is_int(
            manifest.get("format_version", 0)) or manifest.get("format_version", 0) > FORMAT_VERSION:
        raise CheckpointError(f"{file} is not a tokformer sharded checkpoint of format version <= {FORMAT_VERSION}")
    _check_fields(manifest, file)
    step, world, shards = manifest["step"], manifest["world"], manifest["shards"]
    for rank, (name, size) in enumerate(shards.items()):
        shard = path / name
        if not shard.is_file():
            raise _incomplete(path, f"shard {name} is missing ({len(shards)} processes wrote it)")
        meta = _shard_meta(shard)
        if (meta.get("step"), meta.get("world"), meta.get("rank")) != (step, world, rank):
            raise CheckpointError(
                f"checkpoint {path}: {name} is a shard of step {meta.get('step')} ({_processes(meta.get('world'))}), "
                f"not of step {step} ({_processes(world)}): copied from another checkpoint? Restore the right file "
                "or resume from an earlier checkpoint")
        if shard.stat().st_size != size:
            raise damaged(shard, f"{shard.stat().st_size} bytes, the manifest says {size}")
    return manifest


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_fields(manifest: dict[str, Any], file: Path) -> None:
    """Every field of a manifest has the type and shape this code reads, before anything is opened or
    allocated: shard names are exactly ``shard-R-of-N`` (no path can be smuggled in), and the tensors
    it describes fit in the bytes its shards hold (a few edited bytes cannot ask for gigabytes)."""
    step, world, shards = manifest.get("step"), manifest.get("world"), manifest.get("shards")
    if not (_is_int(step) and step >= 0 and _is_int(world) and world >= 1 and isinstance(shards, dict)):
        raise damaged(file, "step, world and shards must be a step number, a process count and a name -> size map")
    expected = [shard_name(rank, world) for rank in range(world)] if world == len(shards) else []
    if list(shards) != expected or not all(_is_int(size) and size >= 0 for size in shards.values()):
        raise damaged(file, f"its shards must be {world} files shard-00000-of-{world:05d}.safetensors, ... with "
                            "their sizes")
    tensors, aliases = manifest.get("tensors"), manifest.get("aliases")
    if not isinstance(tensors, dict) or not isinstance(aliases, dict) or OPTIMIZER not in manifest:
        raise damaged(file, "tensors, aliases and optimizer must be present")
    claimed = 0
    for key, spec in tensors.items():
        dtype = getattr(torch, spec.get("dtype", ""), None) if isinstance(spec, dict) else None
        shape = spec.get("shape") if isinstance(spec, dict) else None
        if not (isinstance(dtype, torch.dtype) and isinstance(shape, list) and all(_is_int(n) and n >= 0
                                                                                     for n in shape)):
            raise damaged(file, f"tensor {key!r} has no valid shape and dtype")
        claimed += math.prod(shape) * dtype.itemsize
    if claimed > sum(shards.values()):
        raise damaged(file, f"its tensors would take {claimed} bytes, more than its shards hold")
    if not all(isinstance(k, str) and isinstance(v, str) and f"{MODEL}.{v}" in tensors for k, v in aliases.items()):
        raise damaged(file, "an alias names no saved tensor")


def _processes(n: Any) -> str:
    return f"{n} process" if n == 1 else f"{n} processes"


def _shard_meta(shard: Path) -> dict[str, Any]:
    try:
        with safe_open(files.regular(shard), framework="pt") as f:
            meta = files.loads((f.metadata() or {})[SHARD_META])
    except (SafetensorError, OSError, DataError, ValueError, KeyError) as e:
        raise damaged(shard, e) from None
    if not isinstance(meta, dict) or not isinstance(meta.get("pieces"), dict):
        raise damaged(shard, "its header describes no pieces")
    return meta


def load_tensors(path: Path, prefix: str, manifest: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The whole tensors of sharded checkpoint ``path`` (its checked ``manifest``) whose keys start
    with ``prefix + '.'``, each reassembled from its pieces in every shard."""
    wanted = {key: spec for key, spec in manifest["tensors"].items() if key.startswith(prefix + ".")}
    try:
        whole = {key: torch.empty(spec["shape"], dtype=getattr(torch, spec["dtype"])) for key, spec in wanted.items()}
    except (AttributeError, KeyError, TypeError, RuntimeError) as e:
        raise damaged(path / MANIFEST, e) from None
    rows: dict[str, list[tuple[int, int]]] = {key: [] for key in wanted}  # the rows each piece filled
    for name in manifest["shards"]:
        pieces = _shard_meta(path / name)["pieces"]
        try:
            with safe_open(path / name, framework="pt") as f:
                for key in (k for k in pieces if k in wanted):
                    piece = f.get_tensor(key)
                    start, end = _rows_of(piece, pieces[key].get("offset"), whole[key])
                    whole[key][slice(start, end) if whole[key].dim() else ()] = piece
                    rows[key].append((start, end))
        except (SafetensorError, OSError, RuntimeError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise damaged(path / name, e) from None
    short = [key for key, filled in rows.items() if not _tile(filled, whole[key])]
    if short:
        raise CheckpointError(f"checkpoint {path} is damaged: its shards do not cover {', '.join(short[:3])} "
                              "once each")
    return whole


def _rows_of(piece: torch.Tensor, offset: Any, whole: torch.Tensor) -> tuple[int, int]:
    """The rows ``[start, end)`` of ``whole`` that ``piece`` fills. :func:`_piece` cuts whole rows of dim 0
    (a 0-dim tensor is one row), so any other offset, shape or dtype is a damaged header."""
    if whole.dim() == 0:
        if offset != [] or piece.shape != whole.shape or piece.dtype != whole.dtype:
            raise ValueError(f"a piece of shape {list(piece.shape)} at {offset} of a 0-dim {whole.dtype} tensor")
        return 0, 1
    start = offset[0] if isinstance(offset, list) and offset else None
    if not (_is_int(start) and offset[1:] == [0] * (whole.dim() - 1) and piece.dtype == whole.dtype
            and piece.shape[1:] == whole.shape[1:] and 0 <= start <= start + piece.shape[0] <= whole.shape[0]):
        raise ValueError(f"a {piece.dtype} piece of shape {list(piece.shape)} at {offset} does not fit a "
                         f"{whole.dtype} tensor of shape {list(whole.shape)} as whole rows")
    return start, start + piece.shape[0]


def _tile(filled: list[tuple[int, int]], whole: torch.Tensor) -> bool:
    """Whether the row ranges ``filled`` cover ``whole`` exactly once: any gap would be left as the
    uninitialised memory of ``torch.empty``, and an overlap hides one."""
    end = 0
    for start, stop in sorted(filled):
        if start != end:
            return False
        end = stop
    return end == (whole.shape[0] if whole.dim() else 1)


def load_model_state(path: Path) -> dict[str, torch.Tensor]:
    """The whole model state dict of sharded checkpoint ``path``, tied weights under every name."""
    manifest = read_manifest(path)
    state = {key[len(MODEL) + 1:]: value for key, value in load_tensors(path, MODEL, manifest).items()}
    return state | {alias: state[name] for alias, name in manifest["aliases"].items()}


def load_optimizer_state(path: Path) -> dict[str, Any]:
    """The whole optimizer state of sharded checkpoint ``path``, keyed by parameter name (the form
    :func:`tokformer.engine.fsdp.load_full_state` takes)."""
    manifest = read_manifest(path)
    try:
        state = join_tensors(manifest[OPTIMIZER], load_tensors(path, OPTIMIZER, manifest))
        param_groups_from_json(state["param_groups"])
    except (KeyError, TypeError, AttributeError) as e:  # a layout naming tensors it lacks, or of the wrong shape
        raise damaged(path / MANIFEST, f"its optimizer layout: {e!r}") from None
    return state
