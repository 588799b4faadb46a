"""Task ``sort``: read a sequence of digits, output the same digits sorted.

The engine's own test task and the README demo: tiny, fully synthetic, learnable to
high accuracy in well under a minute on a CPU. One prediction per token: a
bidirectional encoder reads the whole input, and a linear head at position ``i``
predicts the ``i``-th smallest digit. Every token has to look at every other token,
so it exercises attention, not just a per-token lookup.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import Dataset

from tokformer.batch import TokenBatch
from tokformer.config import ARCHITECTURE
from tokformer.embedding import Embedder
from tokformer.engine import TOKENIZER_DIR, StepOutput, Task, check_data_fits, register_task, write_text_atomic
from tokformer.errors import DataError
from tokformer.positional import LearnedPositions
from tokformer.transformer import Encoder, TransformerConfig


@dataclass
class SortConfig:
    seq_len: int = field(default=8, metadata={"help": "digits per sequence", ARCHITECTURE: True})
    vocab: int = field(default=10, metadata={"help": "distinct symbols (digits 0..vocab-1)", ARCHITECTURE: True})
    train_size: int = field(default=20000, metadata={"help": "training sequences"})
    eval_size: int = field(default=1000, metadata={"help": "held-out sequences"})
    data_seed: int = field(default=1234, metadata={"help": "seed of the sequence generator"})
    d_model: int = field(default=64, metadata={"help": "token width", ARCHITECTURE: True})
    n_heads: int = field(default=4, metadata={"help": "attention heads (must divide d_model)", ARCHITECTURE: True})
    n_layers: int = field(default=2, metadata={"help": "encoder blocks", ARCHITECTURE: True})
    d_ff: int | None = field(default=None,
        metadata={"help": "feed-forward width (default 4*d_model)", ARCHITECTURE: True})
    dropout: float = field(default=0.0, metadata={"help": "dropout"})

    def __post_init__(self) -> None:
        for name in ("seq_len", "vocab", "train_size", "eval_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        self.transformer()  # validate the model shape now, not halfway into a run

    def transformer(self) -> TransformerConfig:
        return TransformerConfig(d_model=self.d_model, n_heads=self.n_heads, n_layers=self.n_layers,
                                 d_ff=self.d_ff, dropout=self.dropout, activation="gelu")


def make_sequences(n: int, seq_len: int, vocab: int, seed: int) -> Tensor:  # [n, seq_len] long
    """``n`` random sequences; the same (n, seq_len, vocab, seed) always gives the same data."""
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.integers(0, vocab, size=(n, seq_len))).long()


class SortDataset(Dataset):
    """Items are ``(digits, sorted digits)``, each ``[seq_len]`` long."""

    def __init__(self, sequences: Tensor) -> None:
        self.inputs = sequences
        self.targets = sequences.sort(dim=1).values

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        return self.inputs[i], self.targets[i]


class SortModel(nn.Module):
    """Embedder (digit + learned position) -> bidirectional Encoder -> per-token linear head."""

    def __init__(self, cfg: SortConfig) -> None:
        super().__init__()
        self.embed = Embedder(cfg.d_model, vocab_size=cfg.vocab, position=LearnedPositions(cfg.d_model, cfg.seq_len))
        self.encoder = Encoder(cfg.transformer())
        self.head = nn.Linear(cfg.d_model, cfg.vocab)

    def forward(self, tokens: TokenBatch) -> Tensor:  # -> [B, N, vocab] logits
        return self.head(self.encoder(self.embed(tokens), mask=tokens.mask, attn_mask=tokens.attention_bias))


@register_task("sort")
class SortTask(Task):
    """Sort digits: per-token cross-entropy; metrics are token and whole-sequence accuracy."""

    Config = SortConfig
    best_metric = "accuracy"
    higher_is_better = True

    def train_dataset(self) -> SortDataset:
        c = self.config
        self._check_data_fits()
        return SortDataset(make_sequences(c.train_size, c.seq_len, c.vocab, c.data_seed))

    def eval_dataset(self) -> SortDataset:
        c = self.config
        self._check_data_fits()
        return SortDataset(make_sequences(c.eval_size, c.seq_len, c.vocab, c.data_seed + 1))

    def _check_data_fits(self) -> None:
        """Both splits, made up front: a digit takes 24 bytes while they are (int64 digits, sorted
        digits, and the sort's indices)."""
        c = self.config
        check_data_fits((c.train_size + c.eval_size) * c.seq_len * 24,
                        f"train_size + eval_size = {c.train_size + c.eval_size:,} sequences of {c.seq_len:,} digits")

    def collate(self, samples: list[tuple[Tensor, Tensor]], train: bool) -> dict[str, TokenBatch | Tensor]:
        tokens = TokenBatch.unpadded(torch.stack([s[0] for s in samples]))  # [B, N]
        return {"tokens": tokens, "targets": torch.stack([s[1] for s in samples])}

    def build_model(self) -> SortModel:
        return SortModel(self.config)

    def step(self, model: nn.Module, batch: dict[str, TokenBatch | Tensor]) -> StepOutput:
        logits = model(batch["tokens"]).float()  # [B, N, vocab]
        targets = batch["targets"]  # [B, N]
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        correct = logits.argmax(-1) == targets  # [B, N]
        return StepOutput(
            loss=loss,
            metrics={
                "accuracy": (correct.sum(), correct.numel()),
                "seq_accuracy": (correct.all(dim=1).sum(), len(targets)),
            },
            count=len(targets),
        )

    def baselines(self, eval_set: SortDataset) -> dict[str, dict[str, float]]:
        """Copying the input: the per-token accuracy of leaving digits where they are, and the
        share of sequences that are sorted already."""
        same = eval_set.inputs == eval_set.targets  # [n, seq_len]
        return {"identity (copy the input)": {"accuracy": same.float().mean().item(),
                                              "seq_accuracy": same.all(dim=1).float().mean().item()}}

    def save_assets(self, run_dir: Path) -> None:
        """The vocabulary, written like any tokenizer's files so inference can read it back."""
        (run_dir / TOKENIZER_DIR).mkdir(exist_ok=True)
        vocab = {str(i): i for i in range(self.config.vocab)}
        write_text_atomic(run_dir / TOKENIZER_DIR / "vocab.json", json.dumps(vocab))

    def predict(self, model: nn.Module, inputs: Sequence[Sequence[int] | str]) -> list[list[int]]:
        """Each sequence sorted by the model; a sequence is digits (``[3, 1, 2]``) or a string of
        them (``"3 1 2"`` or ``"312"``, as ``tokformer predict`` passes it)."""
        device, out = next(model.parameters()).device, []
        with torch.no_grad():
            for row in map(self._digits, inputs):  # one at a time: sequences may differ in length
                tokens = self.collate([(row, row)], train=False)["tokens"].to(device)
                out.append(model(tokens).argmax(-1)[0].tolist())
        return out

    def show_prediction(self, source: str, prediction: list[int]) -> str:
        return " ".join(map(str, prediction))

    def _digits(self, value: Sequence[int] | str) -> Tensor:  # [n]
        c = self.config
        digits = _whole_numbers(value)
        if not 0 < len(digits) <= c.seq_len or not all(0 <= x < c.vocab for x in digits):
            raise DataError(f"{value!r}: the model sorts 1 to {c.seq_len} numbers in 0..{c.vocab - 1}")
        return torch.tensor(digits)

    def export_example(self) -> tuple[TokenBatch]:
        """``model(*args)`` arguments to trace for export: two random digit sequences, collated
        as for training (2 samples, so the traced batch dimension stays dynamic)."""
        c = self.config
        digits = make_sequences(2, c.seq_len, c.vocab, c.data_seed)  # [2, seq_len]
        return (self.collate([(row, row) for row in digits], train=False)["tokens"],)


def _whole_numbers(value: Sequence[int] | str) -> list[int]:
    """The numbers of one input sequence: a string of digits (``"3 1 2"``, ``"312"``) or a sequence of
    whole numbers (ints, numpy or torch integers, strings of digits). Anything else is a DataError naming
    it: ``int()`` made ``[1.5, 2]`` the sequence ``[1, 2]`` and ``True`` a 1, and a bare number (a flat
    ``[3, 1, 2]`` given as the inputs) was a TypeError."""
    if isinstance(value, str):
        parts = value.split()
        value = list(parts[0]) if len(parts) == 1 else parts
        if not all(_is_whole(x) for x in value):
            return []  # the caller's message says what the model sorts
    try:
        items = list(value)
    except TypeError:
        raise DataError(f"{value!r} is no sequence of numbers: each input is a list ([3, 1, 2]) or a string "
                        "('3 1 2') of them; give a list of inputs ([[3, 1, 2]]) or one string") from None
    if bad := [x for x in items if not _is_whole(x)]:
        raise DataError(f"{value!r}: {bad[0]!r} is not a whole number; the model sorts whole numbers")
    return [int(x) for x in items]


def _is_whole(x: object) -> bool:
    """An integer (not a bool, a float or a float tensor) or a string ``int()`` reads as one."""
    if isinstance(x, str):
        try:
            int(x)
        except ValueError:
            return False
        return True
    if isinstance(x, bool):
        return False
    try:
        operator.index(x)
    except TypeError:
        return False
    return True
