"""How big a model a config asks for, known before any weight is allocated.

A config is a few bytes: a ``config.json`` with a hidden size of 8192 and 64 layers asks for
51 billion parameters, and building that model would allocate until the process is killed.
So a model is first built on PyTorch's ``meta`` device (shapes only, no memory, no
initialisation work) and its size is checked: against the weights a folder holds (a config
that describes a model far bigger than its own weights file is damaged or hostile), and
against the memory this machine has (a model whose training state cannot fit is refused).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from tokformer.errors import ConfigError

log = logging.getLogger(__name__)
#: Bytes per parameter of a training run: fp32 weights, gradients and AdamW's two moments.
TRAINING_BYTES_PER_PARAMETER = 16
#: The fewest bytes a stored parameter takes (bf16/fp16): a weights file smaller than that cannot hold the model.
STORED_BYTES_PER_PARAMETER = 2


def on_meta(build: Callable[[], nn.Module | None]) -> nn.Module | None:
    """The model ``build`` makes, built on the meta device (shapes only: no memory, no initialisation
    work); None if the builder makes none or cannot run there (then the caller's other checks still apply)."""
    try:
        with torch.device("meta"):
            model = build()
    except (NotImplementedError, RuntimeError, TypeError, ValueError) as e:  # a builder that reads tensor values
        if "overflow" in str(e):  # a tensor past 2^63 bytes: no machine has it, and building it for real fills memory
            raise ConfigError(f"the config asks for a tensor too large to allocate ({e}); make the model smaller"
                              ) from None
        log.debug("cannot size the model on the meta device: %s", e)
        return None
    return model if isinstance(model, nn.Module) else None


def planned_size(build: Callable[[], nn.Module | None]) -> int | None:
    """Parameters and buffers (elements) of the model ``build`` makes, built on the meta device
    (:func:`on_meta`); None if it cannot be built there."""
    model = on_meta(build)
    return None if model is None else sum(t.numel() for t in (*model.parameters(), *model.buffers()))


def check_against_weights(size: int | None, weight_files: list[Path], described_by: str) -> None:
    """Refuse a model of ``size`` elements whose weights cannot be in ``weight_files``: the config
    (``described_by``) asks for more than the files could hold even at 2 bytes a parameter."""
    if size is None:
        return
    stored = sum(f.stat().st_size for f in weight_files if f.is_file())
    if size * STORED_BYTES_PER_PARAMETER > stored * 1.01 + (1 << 20):
        raise ConfigError(f"{described_by} describes a model of {size:,} parameters, but its weights hold only "
                          f"{stored:,} bytes: the config does not match its weights (damaged or edited)")


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation (Linux ``MemAvailable``), None where unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def memory_limit() -> int | None:
    """Bytes a new allocation may take: ``TOKFORMER_MEMORY_LIMIT`` if set, else the memory available now
    (None where unknown)."""
    override = os.environ.get("TOKFORMER_MEMORY_LIMIT")
    return int(override) if override and override.isdigit() else available_memory()


def check_memory(size: int | None, bytes_per_parameter: int, what: str, *, limit: int | None = None) -> None:
    """Refuse ``what`` (a model of ``size`` elements, ``bytes_per_parameter`` each) when it cannot fit in
    ``limit`` bytes (default: the memory available now); ``TOKFORMER_MEMORY_LIMIT`` (bytes) overrides it."""
    if size is None:
        return
    limit = memory_limit() if limit is None else limit
    if limit is None:
        return
    need = size * bytes_per_parameter
    if need > limit:
        raise ConfigError(f"{what} asks for a model of {size:,} parameters, about {need / 2**30:.1f} GiB, more than "
                          f"the {limit / 2**30:.1f} GiB of memory available; make it smaller (or set "
                          "TOKFORMER_MEMORY_LIMIT to the bytes it may use)")


def check_data_fits(need: int, what: str) -> None:
    """Refuse built-in data that take about ``need`` bytes when they cannot fit in memory
    (:func:`memory_limit`). They are made up front, so a few digits of ``--train-size`` could ask for
    a terabyte, and the run would be killed, or the machine thrash, before it said why. Checked when
    the data are made, not when a config is read: a trained model loads on a smaller machine."""
    limit = memory_limit()
    if limit is not None and need > limit:
        raise ConfigError(f"{what} take about {need / 2**30:.1f} GiB, more than the {limit / 2**30:.1f} GiB of "
                          "memory available; ask for fewer (or set TOKFORMER_MEMORY_LIMIT to the bytes they may use)")
