"""Export a model to a ``torch.export`` program or an ONNX file, with dynamic batch and sequence length.

Every model takes :class:`~tokformer.TokenBatch` inputs (a registered pytree), so the
dynamic dimensions follow from the example's structure: in every batch, the batch dim
(dim 0) of each tensor, and the sequence dim of ``mask``, ``ids``, ``features`` and
``positions`` (dim 1) and of ``attn_bias`` (its last two). The tracer itself works out
which are equal (one batch size across a translation's source and target, one length per
TokenBatch, the source's and the target's independent). Tensors in ``extras`` get a
dynamic batch dim only (their other dims are the tokenizer's business, e.g. ``k``
eigenvalues); plain tensor arguments stay static.

Examples must have at least 2 samples of at least 2 tokens: a size of 1 in the example
would be specialised to 1 by the tracer. The program still runs on one sample.

ONNX export needs the optional extra (``pip install 'tokformer[onnx]'``); it is imported
only when used. Typical use, after :func:`tokformer.engine.load_run`::

    task, model = load_run("runs/classify-...")
    path = export_onnx(model, task.export_example(), "model.onnx")
    run_onnx(path, task.export_example())  # [logits as a numpy array]

:func:`export_run` is ``tokformer export``: a run's checkpoint as a model folder, with the ONNX
file inside it, the folder appearing whole (ONNX included) or not at all.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch._dynamo
from torch import Tensor, nn
from torch.export import Dim, ExportedProgram, ShapesCollection
from torch.utils import _pytree as pytree
from tqdm import tqdm

from tokformer.atomic import staged_folder
from tokformer.batch import TokenBatch
from tokformer.errors import ConfigError, UsageError
from tokformer.store.folder import check_free, write_model_folder
from tokformer.store.loader import load_run
from tokformer.store.lock import hold
from tokformer.store.source import RUN, describe

ONNX_EXTRA = "pip install 'tokformer[onnx]'"


def export_program(model: nn.Module, example_args: tuple, *, dynamic: bool = True) -> ExportedProgram:
    """``torch.export`` of ``model(*example_args)``, batch and sequence dims dynamic unless ``dynamic=False``.

    The model is traced in its current mode (call ``eval()`` first for inference).
    """
    shapes = dynamic_shapes(model, example_args) if dynamic else None
    return torch.export.export(model, tuple(example_args), dynamic_shapes=shapes)


def dynamic_shapes(model: nn.Module, example_args: tuple) -> Any:
    """The ``dynamic_shapes`` argument of ``torch.export`` for ``model(*example_args)`` (see the module doc)."""
    shapes = ShapesCollection()
    for leaf in pytree.tree_leaves(tuple(example_args), is_leaf=lambda value: isinstance(value, TokenBatch)):
        if isinstance(leaf, TokenBatch):
            _mark_token_batch(shapes, leaf)
    return shapes.dynamic_shapes(model, tuple(example_args))


def _mark_token_batch(shapes: ShapesCollection, tokens: TokenBatch) -> None:
    # Dim.DYNAMIC rather than named Dims with ranges: tracing may guard on a condition no
    # range states (a classifier's N - 1 patch tokens != 1), which fails an export with named
    # Dims; DYNAMIC lets the exporter settle it, and still fails if a dim would become static.
    # (The ONNX file's dims get their names afterwards: _dim_names.)
    for tensor, dims in _dynamic_dims(tokens, "tokens"):
        shapes[tensor] = dict.fromkeys(dims, Dim.DYNAMIC)


def _dynamic_dims(tokens: TokenBatch, length: str) -> list[tuple[Tensor, dict[int, str]]]:
    """Each tensor of ``tokens`` with its dynamic dims, named ``batch`` or ``length``."""
    dims = [(tensor, {0: "batch", 1: length})  # [B, N, ...]
            for tensor in (tokens.mask, tokens.ids, tokens.features, tokens.positions) if tensor is not None]
    if tokens.attn_bias is not None:  # [B, N, N] or [B, H, N, N]
        last = tokens.attn_bias.dim() - 1
        dims.append((tokens.attn_bias, {0: "batch", last - 1: length, last: length}))
    dims += [(value, {0: "batch"}) for value in tokens.extras.values()
             if isinstance(value, Tensor) and value.dim() > 0]  # [B, ...]
    return dims


def _dim_names(model: nn.Module, example_args: tuple) -> list[dict[int, str]]:
    """Per tensor input of the ONNX file (flattening order): its dynamic dims' names, ``batch`` and
    ``tokens`` (``src_tokens``, ``tgt_tokens``: the argument's name, when the forward takes several
    TokenBatch arguments)."""
    params = list(inspect.signature(model.forward).parameters)
    batches = [(i, arg) for i, arg in enumerate(example_args) if isinstance(arg, TokenBatch)]
    named: dict[int, dict[int, str]] = {}  # id(tensor) -> its dims' names
    for i, tokens in batches:
        length = "tokens" if len(batches) == 1 else f"{params[i] if i < len(params) else f'arg{i}'}_tokens"
        named.update((id(tensor), dims) for tensor, dims in _dynamic_dims(tokens, length))
    return [named.get(id(leaf), {}) for leaf in pytree.tree_leaves(tuple(example_args)) if isinstance(leaf, Tensor)]


def _name_dims(graph: Any, dim_names: list[dict[int, str]]) -> None:
    """Rename the symbols torch gives dynamic dims (``s27``, ``s21*s29``) in every shape of the
    ``onnx_ir`` graph after the names of ``dim_names`` (one dict per graph input)."""
    import onnx_ir as ir
    from onnx_ir.traversal import RecursiveGraphIterator

    rename: dict[str, str] = {}
    for value, dims in zip(graph.inputs, dim_names, strict=False):
        for axis, name in dims.items():
            dim = value.shape[axis] if value.shape is not None else None
            if isinstance(dim, ir.SymbolicDim) and dim.value is not None:
                rename.setdefault(str(dim.value), name)
    if not rename:
        return
    symbol = re.compile(r"\b(" + "|".join(map(re.escape, rename)) + r")\b")
    values = [*graph.inputs, *graph.outputs, *(out for node in RecursiveGraphIterator(graph) for out in node.outputs)]
    for value in values:
        if value.shape is not None and any(isinstance(d, ir.SymbolicDim) for d in value.shape.dims):
            value.shape = ir.Shape([ir.SymbolicDim(symbol.sub(lambda m: rename[m[1]], str(d.value)))
                                    if isinstance(d, ir.SymbolicDim) and d.value is not None else d
                                    for d in value.shape.dims])


def export_onnx(model: nn.Module, example_args: tuple, path: str | Path, *, dynamic: bool = True) -> Path:
    """Write ``model`` as one self-contained ``.onnx`` file (weights embedded) and return its path.

    Inputs are named after the forward's arguments and the batch fields (``batch_mask``,
    ``src_ids``, ``batch_extras_grid``, ...), in the order :func:`run_onnx` feeds them; a single
    output is named ``logits``. Dynamic dims are named ``batch`` and ``tokens`` (``src_tokens``,
    ``tgt_tokens`` for a translation), as ``docs/interop.md`` lists them per task.
    The file is an inference artifact, so the model is traced in eval mode (its mode is
    restored afterwards). ONNX protobuf files hold at most 2 GB.
    """
    for module in ("onnx", "onnxscript"):
        _require(module)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    was_training = model.training
    model.eval()
    try:
        program = export_program(model, example_args, dynamic=dynamic)
    finally:
        model.train(was_training)
    single = len(program.graph_signature.user_outputs) == 1
    onnx_program = torch.onnx.export(program, tuple(example_args), dynamo=True, verbose=False,
                                     output_names=["logits"] if single else None)
    _name_dims(onnx_program.model.graph, _dim_names(model, example_args) if dynamic else [])
    onnx_program.save(path, external_data=False)
    return path


def run_onnx(path: str | Path, example_args: tuple) -> list[np.ndarray]:
    """Run an ONNX file written by :func:`export_onnx` on CPU with onnxruntime; one array per output.

    ``example_args`` are ``model(*args)``'s arguments; their tensors are fed in flattening
    order, which is the order of the file's inputs.
    """
    ort = _require("onnxruntime")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    tensors = [leaf for leaf in pytree.tree_leaves(tuple(example_args)) if isinstance(leaf, Tensor)]
    inputs = session.get_inputs()
    if len(inputs) != len(tensors):
        raise UsageError(f"{path} takes {len(inputs)} inputs ({', '.join(i.name for i in inputs)}), "
                         f"but the arguments hold {len(tensors)} tensors")
    feed = {spec.name: tensor.detach().cpu().numpy() for spec, tensor in zip(inputs, tensors, strict=True)}
    return session.run(None, feed)


def graph_breaks(model: nn.Module | Callable[..., Any], example_args: tuple) -> int:
    """How many times ``torch.compile`` would split ``model(*example_args)`` into separate graphs.

    0 means the forward compiles whole. Uses ``torch._dynamo.explain``, which resets
    dynamo's caches: code compiled earlier in the process recompiles on its next call.
    """
    return torch._dynamo.explain(model)(*example_args).graph_break_count


def _require(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UsageError(f"ONNX export needs the optional package '{module}': {ONNX_EXTRA}") from None


def export_run(run_dir: str | os.PathLike, out: str | os.PathLike, *, checkpoint: str = "best",
               format: Literal["folder", "onnx"] = "folder", show_progress: bool = False) -> Path:
    """A run's checkpoint as a model folder at ``out``; with ``format="onnx"`` also ``out/model.onnx``.
    The Python form of ``tokformer export``. ``out`` must not exist (or be an empty directory); the
    folder is built under a temporary name and appears whole, ONNX file included, or not at all."""
    source = describe(run_dir)
    if source.kind != RUN:
        raise ConfigError(f"{run_dir} is not a run directory (tokformer train makes one); export reads its checkpoints")
    out = Path(out)
    if format == "onnx":
        for module in ("onnx", "onnxscript"):  # refuse a missing extra before any work
            _require(module)
    with hold(out, "tokformer export"):  # one writer per output folder; clears a killed export's staging folder
        check_free(out)
        task, model = load_run(source, checkpoint)  # every input checked before a progress bar shows
        stages = ["model folder", *(["ONNX (trace and write)"] * (format == "onnx"))]
        with staged_folder(out) as tmp, tqdm(stages, disable=not show_progress, desc="export", unit="stage",
                                             file=sys.stderr) as bar:
            for stage in bar:
                bar.set_postfix_str(stage)
                if stage == "model folder":
                    write_model_folder(task, model, tmp)
                else:
                    export_onnx(model, task.export_example(), tmp / "model.onnx")
    return out
