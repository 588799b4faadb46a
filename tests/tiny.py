"""Shared test helpers: the smallest runs of every task, and randomised reference weights."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

# Two optimizer steps of a model as small as each task allows: enough to write every artifact.
TRAIN = {"steps": 2, "eval_every": 2, "warmup_steps": 1, "device": "cpu", "quiet": True}
TINY = {
    "sort": {"seq_len": 6, "train_size": 64, "eval_size": 16, "d_model": 16, "n_heads": 2, "n_layers": 1,
             "batch_size": 16},
    "classify": {"train_size": 32, "eval_size": 16, "d_model": 16, "n_heads": 2, "n_layers": 1, "patch_size": 8,
                 "image_size": 16, "batch_size": 8},
    "graph": {"d_model": 16, "n_heads": 2, "n_layers": 1, "k": 4, "batch_size": 4, "per_class": 4},
    "translate": {"vocab_size": 300, "d_model": 32, "n_heads": 2, "encoder_layers": 1, "decoder_layers": 1,
                  "batch_size": 8, "train_size": 64, "eval_size": 8},
    "audio": {"train_size": 24, "eval_size": 12, "d_model": 16, "n_heads": 2, "n_layers": 1, "batch_size": 8,
              "max_seconds": 0.5},
    "lm": {"vocab_size": 300, "context_len": 16, "d_model": 16, "n_heads": 2, "n_layers": 1, "val_fraction": 0.2,
           "batch_size": 4, "stdlib_bytes": 30_000, "tokenizer_chars": 20_000},
}


def randomised(model: torch.nn.Module) -> torch.nn.Module:
    """Every parameter random, norms and layer scales around 1 (a zero gamma would hide the branch), eval mode."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            around_one = p.dim() == 1 and ("norm" in name or "gamma" in name)
            p.copy_((1.0 if around_one else 0.0) + torch.randn(p.shape, generator=g) * 0.1)
    return model.eval()


def torchrun_cli(*args: str) -> subprocess.CompletedProcess:
    """``tokformer ARGS`` with 2 CPU processes (gloo) under torchrun, one thread each; asserts it ran."""
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "tokformer.cli", *args],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def torchrun_sort(run: Path, task: dict, engine: dict, *extra: str, steps: int) -> subprocess.CompletedProcess:
    """`tokformer train sort` with 2 CPU processes (gloo) under torchrun (:func:`torchrun_cli`)."""
    args = ["train", "sort", "--quiet", "--steps", str(steps), "--run-dir", str(run), *extra]
    args += [a for k, v in task.items() for a in ("-o", f"{k}={v}")]
    args += [a for k, v in engine.items() for a in (f"--{k.replace('_', '-')}", str(v))]
    return torchrun_cli(*args)
