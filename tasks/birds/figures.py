"""The report's figures: sample images, accuracy against depth, learning curves, receptive fields and
attention maps, each drawn from a sweep's rows and models into one PNG (matplotlib, files only)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tokformer.engine import save_figure
from tokformer.tasks.birds.data import BOTTOM_LEFT, N_CLASSES, SPECIES, TOP_RIGHT, generate
from tokformer.tasks.birds.models import BirdTransformer, parse_spec
from tokformer.tasks.birds.receptive_field import analytic_receptive_field, centre_unit, effective_receptive_field
from tokformer.tasks.birds.summary import AttentionSummary, ModelRow, budget_groups, mean_curve

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from tokformer.tasks.birds.experiment import Sweep

FIGURES = ("samples.png", "accuracy_vs_depth.png", "learning_curves.png", "receptive_fields.png", "attention.png")
CHANCE = {"count": 0.25, "compare": 0.5}
REFERENCE_COLOURS = ["tab:green", "tab:red", "tab:purple", "tab:brown"]
BUDGET_STYLES = ("-", "--", "-.", (0, (5, 1, 1, 1, 1, 1)))  # the fixed budgets, smallest first
CONVERGENCE_STYLE = ":"


def budget_style(name: str, budgets: Sequence[int]) -> str | tuple[int, tuple[int, ...]]:
    """Model ``name``'s line style in a figure of the fixed ``budgets`` (step multiples, ascending): one
    per budget, so 3x and 10x differ by more than their length (budgets past the styles share the last),
    dotted for a run to convergence."""
    spec = parse_spec(name)
    if spec.converges:
        return CONVERGENCE_STYLE
    return BUDGET_STYLES[min(budgets.index(spec.budget), len(BUDGET_STYLES) - 1)]


def plot_curves(path: Path, sweep: Sweep, rows: list[ModelRow]) -> None:
    """Validation accuracy during training, per task: one colour per model run at several budgets
    (every model when none is), a line style per budget (:func:`budget_style`), mean over seeds."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    grouped = list(budget_groups(rows)) or list(dict.fromkeys(parse_spec(r.model).base for r in rows))
    colours = dict(zip(grouped, plt.get_cmap("tab10").colors, strict=False))
    budgets = sorted({spec.budget for spec in map(parse_spec, sweep.config.models) if not spec.converges})
    for ax, task, title in ((axes[0], "count", "How many birds?"), (axes[1], "compare", "Same species?")):
        for name in sweep.config.models:
            spec = parse_spec(name)
            curve = mean_curve(sweep.results, name, task)
            if spec.base not in colours or not curve:
                continue
            ax.plot(*zip(*curve, strict=True), marker="o", markersize=3, color=colours[spec.base],
                    linestyle=budget_style(name, budgets), label=f"{spec.base}, {spec.budget_name}")
        ax.axhline(CHANCE[task], color="grey", linestyle=":", label="chance")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("training step")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="lower right", ncol=2)
    axes[0].set_ylabel("validation accuracy (mean over seeds)")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def _pyplot():
    """matplotlib.pyplot, drawing to files only (no display on CI machines); imported when a figure
    is drawn, not with the module (a second of every command's start)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _show(ax: Axes, image: np.ndarray, title: str = "") -> None:
    ax.imshow(image, interpolation="nearest")
    ax.set_title(title, fontsize=8)
    ax.set_xticks([])
    ax.set_yticks([])


def _box(ax: Axes, x0: float, y0: float, x1: float, y1: float, colour: str, style: str = "-") -> None:
    from matplotlib.patches import Rectangle

    ax.add_patch(Rectangle((x0 - 0.5, y0 - 0.5), x1 - x0 + 1, y1 - y0 + 1, fill=False, edgecolor=colour,
                           linewidth=1.2, linestyle=style))


def plot_samples(path: Path, image_size: int, seed: int, extra_birds: float, scene: str) -> None:
    """Six counting and six comparison images with their labels; the compared birds boxed."""
    count = generate("count", 6, seed, size=image_size, split="sample")
    compare = generate("compare", 6, seed, size=image_size, split="sample", extra_birds=extra_birds, scene=scene)
    plt = _pyplot()
    fig, axes = plt.subplots(2, 6, figsize=(12, 4.6))
    for i in range(6):
        _show(axes[0, i], count.images[i], f"count: {count.labels[i] + 1} bird(s)")
        boxes = compare.bird_boxes(i)
        species = {int(compare.bird_slot[m]): SPECIES[compare.bird_species[m]].name
                   for m in np.flatnonzero(compare.bird_image == i)}
        verdict = "same" if compare.labels[i] else "different"
        _show(axes[1, i], compare.images[i], f"{verdict}: {species[TOP_RIGHT]} / {species[BOTTOM_LEFT]}")
        for slot, colour in ((TOP_RIGHT, "yellow"), (BOTTOM_LEFT, "cyan")):
            _box(axes[1, i], *boxes[slot], colour)
    axes[0, 0].set_ylabel("task: how many birds?", fontsize=9)
    axes[1, 0].set_ylabel("task: top-right (yellow) vs\nbottom-left (cyan) same species?", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def plot_accuracy(path: Path, rows: list[ModelRow]) -> None:
    """Accuracy vs conv depth for both CNN families, the global CNN and Transformer as reference lines."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    for ax, task, title in ((axes[0], "count", "How many birds? (4 classes)"),
                            (axes[1], "compare", "Top-right vs bottom-left: same species? (2 classes)")):
        for family, marker, colour in (("local", "o", "tab:blue"), ("pool", "s", "tab:orange")):
            fam = sorted((r for r in rows if r.family == family), key=lambda r: r.depth)
            if not fam:
                continue
            mean = [getattr(r, f"{task}_mean") for r in fam]
            std = [getattr(r, f"{task}_std") for r in fam]
            label = {"local": "CNN, local readout, no pooling", "pool": "CNN, local readout, max-pool"}[family]
            ax.errorbar([r.depth for r in fam], mean, yerr=std, marker=marker, color=colour, capsize=3, label=label)
            if task == "compare":
                for r in fam:
                    ax.annotate(f"RF {r.receptive_field}", (r.depth, getattr(r, f"{task}_mean")), fontsize=6,
                                textcoords="offset points", xytext=(3, -9), color=colour)
        references = [r for r in rows if r.family not in ("local", "pool")]
        for r, colour in zip(references, REFERENCE_COLOURS * len(references), strict=False):
            value = getattr(r, f"{task}_mean")
            ax.axhline(value, color=colour, linestyle="-.", linewidth=1.2, label=f"{r.label}: {value:.2f}")
        ax.axhline(CHANCE[task], color="grey", linestyle=":", label=f"chance ({CHANCE[task]:.2f})")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("number of 3x3 conv layers")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    axes[0].set_ylabel("held-out accuracy (mean ± std over seeds)")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def _gradient_reaches(erf: np.ndarray, box: tuple[float, float, float, float]) -> bool:
    """Whether the gradient map ``[H, W]`` is non-zero anywhere inside an (x0, y0, x1, y1) box."""
    x0, y0, x1, y1 = (int(round(v)) for v in box)
    h, w = erf.shape
    return bool(erf[max(y0, 0) : min(y1 + 1, h), max(x0, 0) : min(x1 + 1, w)].max(initial=0.0) > 0)


def plot_receptive_fields(path: Path, sweep: Sweep) -> None:
    """For each local-readout CNN (trained on comparison), on one test image: the central output
    unit's analytic receptive field (box) and effective receptive field (gradient heat map), and
    whether that gradient reaches both compared birds."""
    names = [n for n in sweep.config.models if parse_spec(n).family in ("local", "pool")]
    test = sweep.test_sets["compare"]
    index = 0
    image = test.images[index : index + 1].float() / 255  # [1, 3, H, W]
    boxes = test.meta.bird_boxes(index)
    cols = min(4, max(1, len(names)))
    rows = max(1, math.ceil(len(names) / cols))
    plt = _pyplot()
    fig, axes = plt.subplots(rows, cols, figsize=(2.9 * cols, 3.4 * rows), squeeze=False)
    size = sweep.config.image_size
    for ax, name in zip(axes.flat, names, strict=False):  # spare axes are blanked below
        model = sweep.models[(name, "compare")]
        rf = analytic_receptive_field(model, size)
        unit = centre_unit(model, size)
        erf = effective_receptive_field(model, image, N_CLASSES["compare"], unit).numpy()  # [H, W]
        _show(ax, test.meta.images[index])
        ax.imshow(erf / (erf.max() + 1e-12), cmap="magma", alpha=0.6, interpolation="nearest")
        r0, c0, r1, c1 = rf.box(*unit, size)
        _box(ax, c0, r0, c1, r1, "white", "--")
        for slot, colour in ((TOP_RIGHT, "yellow"), (BOTTOM_LEFT, "cyan")):
            _box(ax, *boxes[slot], colour)
        both = _gradient_reaches(erf, boxes[TOP_RIGHT]) and _gradient_reaches(erf, boxes[BOTTOM_LEFT])
        ax.set_title(f"{name}: RF {rf.size}px\ngradient reaches both birds: {'yes' if both else 'no'}", fontsize=8)
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    fig.suptitle("Central output unit: analytic receptive field (white dashed) and effective receptive field\n"
                 "(|d score / d pixel|, heat); yellow / cyan: the two birds to compare", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def plot_attention(path: Path, sweep: Sweep, summary: AttentionSummary) -> None:
    """Where a top-right-bird token looks, per layer (head with the most top-right -> bottom-left
    attention), and where the class token looks in the last layer, for three test images."""
    name, stats, maps = summary.model, summary.corner, summary.maps
    model: BirdTransformer = sweep.models[(name, "compare")]
    test = sweep.test_sets["compare"]
    patch, grid = model.tokenizer.patch_size, model.grid_size
    n_layers = len(maps)
    plt = _pyplot()
    fig, axes = plt.subplots(3, n_layers + 2, figsize=(2.6 * (n_layers + 2), 8), squeeze=False)
    up = lambda a: np.kron(a.reshape(grid), np.ones((patch, patch)))  # patch grid -> pixels
    for row in range(3):
        boxes = test.meta.bird_boxes(row)
        x0, y0, x1, y1 = boxes[TOP_RIGHT]
        query = 1 + int((y0 + y1) / 2 // patch) * grid[1] + int((x0 + x1) / 2 // patch)  # patch at the bird's centre
        _show(axes[row, 0], test.meta.images[row], "same species" if test.labels[row] else "different species")
        for slot, colour in ((TOP_RIGHT, "yellow"), (BOTTOM_LEFT, "cyan")):
            _box(axes[row, 0], *boxes[slot], colour)
        qr, qc = divmod(query - 1, grid[1])
        for layer in range(n_layers):
            head = int(stats[layer, :, 0].argmax())
            att = maps[layer][row, head, query, 1:].numpy()  # attention over the patches
            ax = axes[row, layer + 1]
            _show(ax, test.meta.images[row], f"layer {layer + 1}, head {head + 1}:\nfrom the yellow patch")
            ax.imshow(up(att / att.max()), cmap="magma", alpha=0.65)
            _box(ax, qc * patch, qr * patch, (qc + 1) * patch - 1, (qr + 1) * patch - 1, "yellow")
        cls = maps[-1][row, :, 0, 1:].mean(dim=0).numpy()  # class token, mean over heads
        ax = axes[row, -1]
        _show(ax, test.meta.images[row], "last layer: class token\n(mean over heads)")
        ax.imshow(up(cls / cls.max()), cmap="magma", alpha=0.65)
    fig.suptitle(f"{name} trained on the comparison task: attention from a top-right-bird patch", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
