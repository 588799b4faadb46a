"""FSDP: weights, gradients and optimizer state sharded over the processes (``--strategy fsdp``).

DDP keeps the whole model, its gradients and AdamW's two moments on every process: 16 bytes
per fp32 parameter each. FSDP2 (``torch.distributed.fsdp.fully_shard``) keeps 1/world of
each and all-gathers one unit's weights just before the unit runs (forward and backward),
frees them after, and reduce-scatters its gradients: the same updates as DDP (gradients
are averaged over the processes in both), in a fraction of the memory.

Units: every Transformer block is one (found by type, :func:`~tokformer.engine.recompute.transformer_blocks`),
then the root takes what is left (embeddings, heads, final norms; tied weights stay together
there). A model without Transformer blocks is one unit.

Precision comes from ``--precision``: ``fp32`` keeps fp32 weights and communication (the
default policy); ``bf16`` casts the gathered weights to bf16 for compute (half the all-gather
traffic) and reduces gradients in fp32, while the sharded master weights and AdamW's moments
stay fp32. Autocast wraps the forward as in every strategy.

Evaluation runs under :func:`gathered`: each unit's weights are gathered once and kept until
the pass ends, because evaluation may run different code on each process (beam search for
BLEU stops when its beams do; task hooks call submodules directly), and a sharded forward
there would wait forever for a collective the other processes never join. The full weights
then live on every process during evaluation; gradients and optimizer state, 3/4 of fp32
AdamW's training memory, stay sharded.

Tested with 2 CPU processes and gloo (torch 2.14), where FSDP2 runs unchanged; NCCL and CUDA
are not tested here (docs/scaling.md).
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from tokformer.engine.recompute import transformer_blocks
from tokformer.runtime.distributed import Dist
from tokformer.store.weights import is_dtensor

if TYPE_CHECKING:  # torch.distributed's FSDP and checkpoint modules take ~2 s to import: only a sharded run does
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy


def mixed_precision(precision: str) -> MixedPrecisionPolicy:
    """The FSDP policy of ``--precision``: fp32 throughout, or bf16 compute with fp32 gradient reduction."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if precision == "bf16":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()


def shard_model(model: nn.Module, d: Dist, precision: str) -> int:
    """Shard ``model`` in place over the processes of ``d``: each Transformer block, then the
    root. Returns the number of units. Parameter names do not change (FSDP2 swaps classes, it
    does not wrap), so state dicts and checkpoints keep the model's own keys."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(d.device.type, (d.world,))
    policy = mixed_precision(precision)
    blocks = transformer_blocks(model)
    for block in blocks:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    # The root's output is the head's logits, which F.linear returns as a view of a 2-D matmul;
    # FSDP2 warns about in-place edits of such views, which no task makes (losses read them).
    root = type(model).__name__  # FSDP<class> now: fully_shard swapped the class
    warnings.filterwarnings("ignore", message=rf"FSDP2-wrapped module \({re.escape(root)}\) returned a view tensor")
    return len(blocks) + 1


def _units(model: nn.Module) -> list[FSDPModule]:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]


@contextlib.contextmanager
def no_gradient_sync(model: nn.Module) -> Iterator[None]:
    """Accumulate gradients locally (the micro-batches before the last), as DDP's ``no_sync``."""
    model.set_requires_gradient_sync(False)  # type: ignore[operator]
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)  # type: ignore[operator]


@contextlib.contextmanager
def gathered(model: nn.Module) -> Iterator[None]:
    """Every unit's full weights, gathered once (a collective: every process enters together)
    and kept through the block, so forwards inside it communicate nothing."""
    units = _units(model)
    for unit in units:
        unit.set_reshard_after_forward(False, recurse=False)
        unit.unshard()
    try:
        yield
    finally:
        for unit in units:
            unit.reshard()
            # fully_shard keeps the root gathered after forward (backward needs it at once): restore that
            unit.set_reshard_after_forward(unit is not model, recurse=False)


def full(value: torch.Tensor) -> torch.Tensor:
    """A plain tensor of ``value`` (a sharded DTensor is gathered: a collective)."""
    return value.full_tensor() if is_dtensor(value) else value


def load_full_state(model: nn.Module, optimizer: torch.optim.Optimizer, weights: dict[str, torch.Tensor],
                    optimizer_state: dict[str, Any]) -> None:
    """Whole tensors into a sharded or plain ``model`` and its ``optimizer`` (AdamW state keyed
    by parameter name): each process keeps its own slice, so a checkpoint loads on any number
    of processes. ``torch.distributed.checkpoint.state_dict`` does the slicing; it only moves
    tensors in memory (its file format, pickled, is not used)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict, set_optimizer_state_dict

    full_state = StateDictOptions(full_state_dict=True)  # whole tensors in, each process keeps its shard
    set_model_state_dict(model, weights, options=full_state)
    set_optimizer_state_dict(model, optimizer, optimizer_state, options=full_state)


def optimizer_state_by_name(state: dict[str, Any], model: nn.Module,
                            optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """``optimizer.state_dict()``'s form (parameters numbered in group order) keyed by parameter
    name instead, the form :func:`load_full_state` takes: how an unsharded checkpoint's AdamW
    state reaches a sharded model (a DDP run resumed with ``--strategy fsdp``)."""
    names = {id(p): name for name, p in model.named_parameters()}
    order = [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
    return {"state": {order[int(i)]: value for i, value in state["state"].items()},
            "param_groups": [{**group, "params": [order[i] for i in group["params"]]}
                             for group in state["param_groups"]]}
