"""What every task that names one class per sample shares (``classify`` for pictures, ``audio`` for sound):
the loss and its metrics, the confusion matrix of each evaluation pass, the class names saved beside the
model, and predictions ranked by probability. A subclass builds its own data, tokenizer and model.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from tokformer import files
from tokformer.engine import Dist, StepOutput, Task, save_figure, write_text_atomic
from tokformer.errors import DataError
from tokformer.losses import label_smoothing_cross_entropy
from tokformer.metrics import topk_correct
from tokformer.tasks.display import show_ranked

CLASSES_FILE = "classes.json"


class ClassesTask(Task):
    """A classification task: ``step`` scores ``batch["tokens"]`` against ``batch["labels"]`` (and soft
    ``batch["targets"]`` when present: mixup), every evaluation pass sums a confusion matrix and rank 0
    plots it to ``plots/confusion.png``, and :data:`CLASSES_FILE` holds the class names."""

    best_metric = "accuracy"
    higher_is_better = True
    fresh_on_mismatch = ("head.proj.",)  # the classifier layer: retrained for another class count

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.classes: list[str] = []
        self.run_dir: Path | None = None  # where plots/confusion.png goes (set by setup)
        self.dist: Dist | None = None
        self.confusion: Tensor | None = None  # [C, C] counts (true, predicted) of the last evaluation pass

    def step(self, model: nn.Module, batch: dict[str, Any]) -> StepOutput:
        logits = model(batch["tokens"]).float()  # [B, C]
        labels = batch["labels"]  # [B]
        loss = label_smoothing_cross_entropy(logits, batch.get("targets", labels), self.config.label_smoothing)
        hits = topk_correct(logits, labels, (1, 5))
        n = len(labels)
        return StepOutput(loss=loss, metrics={"accuracy": (hits[1], n), "top5": (hits[5], n)}, count=n,
                          outputs=logits.argmax(-1))

    def setup(self, run_dir: Path, dist: Dist) -> None:
        self.run_dir, self.dist = run_dir, dist

    def eval_batch(self, model: nn.Module, batch: dict[str, Any], output: StepOutput) -> Tensor:
        """This batch's ``[C, C]`` confusion counts (true, predicted)."""
        n = len(self.classes)
        return torch.bincount(batch["labels"].cpu() * n + output.outputs.cpu(), minlength=n * n).reshape(n, n)

    def eval_end(self, outputs: list[Tensor]) -> dict[str, float]:
        """Sum the pass's confusion counts into :attr:`confusion`; rank 0 plots it."""
        self.confusion = torch.stack(outputs).sum(0) if outputs else None
        if self.confusion is not None and self.run_dir is not None and self.dist is not None and self.dist.is_main:
            plot_confusion(self.confusion, self.classes, self.run_dir / "plots" / "confusion.png")
        return {}

    def save_classes(self, run_dir: Path) -> None:
        write_text_atomic(run_dir / CLASSES_FILE, json.dumps(self.classes, indent=1) + "\n")

    def load_classes(self, run_dir: Path) -> None:
        classes = files.read_json(run_dir / CLASSES_FILE)
        if not (isinstance(classes, list) and all(isinstance(x, str) for x in classes)):
            raise DataError(f"{run_dir / CLASSES_FILE}: expected a JSON list of class names")
        self.classes = classes

    def ranked(self, model: nn.Module, tokens: Any, top_k: int) -> list[list[tuple[str, float]]]:
        """The top ``top_k`` (class, probability) pairs of each sample of ``tokens`` (a TokenBatch)."""
        device = next(model.parameters()).device
        with torch.no_grad():
            probs = model(tokens.to(device)).float().softmax(-1)  # [B, C]
        top = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
        return [[(self.classes[i], p) for i, p in zip(idx.tolist(), val.tolist(), strict=True)]
                for idx, val in zip(top.indices, top.values, strict=True)]

    def show_prediction(self, source: str, prediction: Sequence[tuple[str, float]]) -> str:
        return show_ranked(source, prediction)


def plot_confusion(counts: Tensor, classes: list[str], path: Path) -> None:
    """Save a confusion matrix (rows: true class, columns: predicted) as a PNG, rows normalised."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = counts.double() / counts.sum(dim=1, keepdim=True).clamp(min=1)  # [C, C] share of each true class
    size = max(4.0, 0.45 * len(classes) + 2)
    fig, ax = plt.subplots(figsize=(size, size))
    ax.imshow(rates.numpy(), cmap="Blues", vmin=0, vmax=1)
    ticks = range(len(classes))
    ax.set_xticks(ticks, classes, rotation=90)
    ax.set_yticks(ticks, classes)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    if len(classes) <= 20:
        for i in ticks:
            for j in ticks:
                if counts[i, j]:
                    color = "white" if rates[i, j] > 0.5 else "black"
                    ax.text(j, i, int(counts[i, j]), ha="center", va="center", fontsize=7, color=color)
    ax.set_title(f"accuracy {counts.diag().sum() / counts.sum().clamp(min=1):.3f}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path, dpi=100)
