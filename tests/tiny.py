"""Shared test helpers: the smallest runs of every task, and randomised reference weights."""

from __future__ import annotations

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
