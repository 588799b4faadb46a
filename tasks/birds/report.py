"""The report: a Markdown page with one table and four figures, written into one directory.

Everything a reader needs to judge the claim is in ``report.md``: what the images are,
what each model can see (its readout and receptive field), accuracy over seeds, the
effective receptive fields, and where the Transformer's top-right bird looks.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from tokformer.engine import over_seeds, save_figure, write_text_atomic
from tokformer.tasks.birds.attention import attention_maps, bird_attention, corner_attention, own_bird_attention
from tokformer.tasks.birds.data import BOTTOM_LEFT, N_CLASSES, SPECIES, TOP_RIGHT, generate
from tokformer.tasks.birds.design import VIEWS, bayes_accuracy, oracle_accuracies
from tokformer.tasks.birds.models import (
    LEARNED_POSITION_STD,
    LOCAL_TOKENIZER,
    PATIENCE,
    READOUT_HIDDEN,
    BirdTransformer,
    LocalCNN,
    parse_spec,
)
from tokformer.tasks.birds.receptive_field import (
    analytic_receptive_field,
    centre_unit,
    covers_both,
    effective_receptive_field,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from tokformer.tasks.birds.experiment import RunResult, Sweep

FIGURES = ("samples.png", "accuracy_vs_depth.png", "learning_curves.png", "receptive_fields.png", "attention.png")
CHANCE = {"count": 0.25, "compare": 0.5}
REFERENCE_COLOURS = ["tab:green", "tab:red", "tab:purple", "tab:brown"]


@dataclass
class ModelRow:
    """One line of the results table (accuracies as mean and std over seeds)."""

    model: str
    label: str
    family: str
    depth: int
    receptive_field: int | None  # pixels; None = the whole image
    both_birds: float  # fraction of comparison test images where one output unit sees both birds' centres
    parameters: int
    count_mean: float
    count_std: float
    compare_mean: float
    compare_std: float
    seconds: float  # median training seconds over every run of the model (both tasks, all seeds)
    budget: int = 1  # times the sweep's step budget
    count_second: float = math.nan  # mean accuracy at the second image size (NaN: one size only)
    compare_second: float = math.nan
    count_seeds: tuple[float, ...] = ()  # the per-seed test accuracies behind the mean, in seed order
    compare_seeds: tuple[float, ...] = ()


@dataclass
class Summary:
    """One model on one task over its seeds."""

    mean: float
    std: float  # sample std (ddof 1); 0 for one seed
    second: float  # mean accuracy at the second image size (NaN: not run there)
    seeds: tuple[float, ...]  # per-seed accuracies, in seed order


def summarise(results: list[RunResult], name: str, task: str) -> Summary:
    """``name`` on ``task`` over its seeds (NaN everywhere when it did not run)."""
    runs = sorted((r for r in results if r.model == name and r.task == task), key=lambda r: r.seed)
    if not runs:
        return Summary(math.nan, math.nan, math.nan, ())
    accs = np.array([r.accuracy for r in runs])
    seconds = [r.accuracy_second for r in runs if r.accuracy_second is not None]
    second = float(np.mean(seconds)) if seconds else math.nan
    std = float(accs.std(ddof=1)) if len(accs) > 1 else 0.0
    return Summary(float(accs.mean()), std, second, tuple(float(a) for a in accs))


def table_rows(sweep: Sweep) -> list[ModelRow]:
    """Accuracy, receptive field and size of every model in the sweep."""
    cfg = sweep.config
    pairs = _corner_pairs(sweep)
    rows = []
    for name in cfg.models:
        spec = parse_spec(name)
        model = next(m for (n, _), m in sweep.models.items() if n == name)
        if isinstance(model, LocalCNN):
            rf = analytic_receptive_field(model, cfg.image_size)
            size, both = rf.size, float(covers_both(rf, cfg.image_size, *pairs).mean())
        else:
            size, both = None, 1.0  # a global head / attention: every output sees every pixel
        count = summarise(sweep.results, name, "count")
        compare = summarise(sweep.results, name, "compare")
        params = next(r.parameters for r in sweep.results if r.model == name)
        # the median: one run slowed by a neighbouring job moves a mean, not this
        seconds = np.median([r.train_seconds for r in sweep.results if r.model == name])
        rows.append(ModelRow(name, spec.label, spec.family, spec.depth, size, both, params,
                             count.mean, count.std, compare.mean, compare.std, float(seconds), spec.budget,
                             count.second, compare.second, count.seeds, compare.seeds))
    return rows


def mean_curve(results: list[RunResult], name: str, task: str) -> list[tuple[int, float]]:
    """``name``'s validation accuracy on ``task`` at each evaluation its runs share, averaged over seeds
    (points not in every run go: a run to convergence that stopped sooner, or a run cut short and resumed
    before 9a10e92, which has one more point where its stop saved: the committed full sweep holds such runs)."""
    curves = [dict(r.curve) for r in results if r.model == name and r.task == task and r.curve]
    if not curves:
        return []
    steps = sorted(set.intersection(*(set(c) for c in curves)))
    return [(step, float(np.mean([c[step] for c in curves]))) for step in steps]


def budget_groups(rows: list[ModelRow]) -> dict[str, dict[str, ModelRow]]:
    """Models run at more than one step budget: base model name -> budget (``3x``, ``early stop``) -> its row,
    the budgets in the order tables show them."""
    groups: dict[str, dict[str, ModelRow]] = {}
    for r in sorted(rows, key=lambda r: parse_spec(r.model).budget_order):
        groups.setdefault(parse_spec(r.model).base, {})[parse_spec(r.model).budget_name] = r
    return {base: by_budget for base, by_budget in groups.items() if len(by_budget) > 1}


def best_point(curve: Sequence[tuple[int, float]]) -> tuple[int, float]:
    """(step, validation accuracy) of a run's best evaluation, the first if tied: what a run to convergence keeps."""
    return max(curve, key=lambda point: point[1])


def best_steps(results: Sequence[RunResult], name: str, task: str) -> list[int]:
    """The step of each seed's best validation accuracy, in seed order: where a run to convergence found the
    model it keeps."""
    runs = sorted((r for r in results if r.model == name and r.task == task and r.curve), key=lambda r: r.seed)
    return [best_point(r.curve)[0] for r in runs]


def budget_table(rows: list[ModelRow], steps: int, results: Sequence[RunResult] = ()) -> str:
    """Held-out accuracy, time and size at each step budget, per model run at more than one; for runs to
    convergence also the step each seed's kept model comes from (found in ``results``)."""
    groups = budget_groups(rows)
    specs = {parse_spec(r.model).budget_name: parse_spec(r.model) for by in groups.values() for r in by.values()}
    budgets = sorted(specs, key=lambda b: specs[b].budget_order)
    size = lambda b: (f"up to {specs[b].budget * steps:,} steps" if specs[b].converges
                      else f"{specs[b].budget * steps:,} steps")
    heads = " | ".join(f"{task} {b} ({size(b)})" for task in ("counting", "comparison") for b in budgets)
    converged = [b for b in budgets if specs[b].converges]
    extra = "".join(f" {b}: step of the kept model, counting; comparison |" for b in converged)
    lines = [f"| model | parameters | {heads} | seconds / run at {', '.join(budgets)} |{extra}",
             "|---|---:|" + "---:|" * (2 * len(budgets)) + "---:|" + "---:|" * len(converged)]
    for by_budget in groups.values():
        first = next(iter(by_budget.values()))
        cells = [over_seeds(getattr(by_budget[b], f"{task}_seeds")) if b in by_budget else "—"
                 for task in ("count", "compare") for b in budgets]
        seconds = " / ".join(f"{by_budget[b].seconds:.0f}" if b in by_budget else "—" for b in budgets)
        kept = ["; ".join(" / ".join(map(str, best_steps(results, by_budget[b].model, task)))
                          for task in ("count", "compare")) if b in by_budget else "—" for b in converged]
        lines.append(f"| {parse_spec(first.model).base_label} | {first.parameters:,} | {' | '.join(cells)} | "
                     f"{seconds} |" + "".join(f" {k} |" for k in kept))
    return "\n".join(lines)


def curve_table(sweep: Sweep) -> str:
    """Validation accuracy at each quarter of every run, mean over seeds: whether a model was still learning."""
    lines = ["| model | task | validation accuracy at each quarter of the run (step: accuracy) | still rising? |",
             "|---|---|---|:---:|"]
    for name in sweep.config.models:
        for task in sweep.config.tasks:
            curve = mean_curve(sweep.results, name, task)
            if len(curve) < 2:
                continue
            points = ", ".join(f"{step}: {acc:.3f}" for step, acc in curve)
            rising = curve[-1][1] - curve[-2][1] > 0.01  # more than noise over the last quarter
            lines.append(f"| {parse_spec(name).label} | {task} | {points} | {'yes' if rising else 'no'} |")
    return "\n".join(lines)


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


def _corner_pairs(sweep: Sweep) -> tuple[np.ndarray, np.ndarray]:
    """Centres ``[n, 2]`` of the top-right and bottom-left birds of comparison test images."""
    cfg = sweep.config
    meta = sweep.test_sets["compare"].meta if "compare" in sweep.test_sets else generate(
        "compare", cfg.n_test, cfg.seeds[0], size=cfg.image_size, split="test", extra_birds=cfg.extra_birds,
        scene=cfg.scene)
    order = np.argsort(meta.bird_image, kind="stable")
    tr = meta.bird_xy[order][meta.bird_slot[order] == TOP_RIGHT]
    bl = meta.bird_xy[order][meta.bird_slot[order] == BOTTOM_LEFT]
    return tr, bl


# -- figures ------------------------------------------------------------------------


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


@dataclass
class AttentionSummary:
    """Where the analysed Transformer's tokens look, on the comparison test images (first seed).

    corner: ``[layers, heads, 2]`` (top-right bird -> bottom-left bird mass, uniform mass);
    own: ``[layers, heads, 3]`` (own-bird mass, own-bird mass without self, bird's token share);
    maps: each layer's ``[3, heads, N, N]`` attention of the first three images;
    counting: the same model's counting weights on the counting test images, ``[layers, heads, 2]``
    (patch tokens -> all birds' tokens mass, the birds' token share); None without counting.
    """

    model: str
    corner: np.ndarray
    own: np.ndarray
    maps: list
    counting: np.ndarray | None = None


def analysed_transformer(sweep: Sweep) -> str | None:
    """The Transformer whose attention the report analyses: the one that compares best on the validation
    images at any budget (the last evaluation of its first-seed run, or the best of a run to convergence,
    whose model is the one analysed: a model
    at chance shows no strategy, and the issue asks about the model that compares best), ties to the common
    budget, the local tokenizer, then the deepest; None without one. Accuracies within two standard errors of
    a guesser of chance (0.532 on 1,000 images) count as chance alike, so noise among models that learned
    nothing does not pick one."""
    names = [n for n in sweep.config.models if parse_spec(n).family in ("transformer", "transformer-local")]
    above_chance = 0.5 + 2 * math.sqrt(0.25 / sweep.config.n_test)
    kept = lambda r: (best_point(r.curve) if parse_spec(r.model).converges else r.curve[-1])[1]
    validation = {r.model: kept(r) if kept(r) > above_chance else 0.0 for r in sweep.results
                  if r.task == "compare" and r.seed == sweep.config.seeds[0] and r.curve}
    rank = lambda n: (validation.get(n, 0.0), parse_spec(n).budget == 1, parse_spec(n).family == "transformer-local",
                      parse_spec(n).depth)
    return max(names, key=rank) if names else None


def attention_summary(sweep: Sweep, n_images: int = 200) -> AttentionSummary | None:
    """Attention statistics of :func:`analysed_transformer`, or None without a Transformer or comparison task."""
    name = analysed_transformer(sweep)
    if name is None or ("compare" not in sweep.test_sets):
        return None
    model: BirdTransformer = sweep.models[(name, "compare")]
    test = sweep.test_sets["compare"]
    indices = np.arange(min(n_images, len(test.labels)))
    maps = attention_maps(model, test.images[indices].float() / 255)
    patch = model.tokenizer.patch_size
    counting = None
    if (name, "count") in sweep.models and "count" in sweep.test_sets:
        count_test = sweep.test_sets["count"]
        counted = np.arange(min(n_images, len(count_test.labels)))
        count_maps = attention_maps(sweep.models[(name, "count")], count_test.images[counted].float() / 255)
        counting = bird_attention(count_maps, count_test.meta, counted, patch)
    return AttentionSummary(name, corner_attention(maps, test.meta, indices, patch),
                            own_bird_attention(maps, test.meta, indices, patch), [m[:3] for m in maps], counting)


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


# -- markdown -----------------------------------------------------------------------


def machine_note(results: list[RunResult]) -> str:
    """Where the runs trained, from each run's machine record: the CPU, cores, torch threads and versions of
    each group of runs, and the 1-minute load average as they started (a load well above the cores means
    another job shared the machine, and those runs' times are slow). Empty when no run kept a record."""
    groups: dict[tuple[str, ...], list[float]] = {}
    for run in results:
        m = run.machine if isinstance(run.machine, dict) else {}
        if isinstance(m.get("load"), (int, float)):
            key = tuple(str(m.get(k)) for k in ("cpu", "cores", "threads", "versions"))
            groups.setdefault(key, []).append(float(m["load"]))
    if not groups:
        return ""
    runs = lambda n: f"{n} run" + ("s" if n != 1 else "")
    lines = [f"{runs(len(loads))} on {cpu}, {n_cores} cores, {threads} torch threads ({libraries}); 1-minute load "
             f"average as a run started: median {float(np.median(loads)):.2f}, {min(loads):.2f}-{max(loads):.2f}"
             for (cpu, n_cores, threads, libraries), loads in sorted(groups.items())]
    missing = len(results) - sum(len(loads) for loads in groups.values())
    if missing:
        lines.append(f"{runs(missing)} kept no record of their machine (trained before runs did)")
    return "\nWhere it trained: " + "; ".join(lines) + ".\n"


def _preset_note(command: str, n_test: int) -> str:
    if "--quick" not in command:
        return ""
    return ("\n> This is the **quick** preset: one seed, fewer models and a shorter budget. It shows that every "
            "family trains and roughly where each lands; it cannot show a spread over seeds, and with one seed of "
            f"{n_test} test images a difference under about 0.05 between two rows is within noise. `tokformer birds` "
            "(no `--quick`) runs the full sweep over 3 seeds.\n")


def _compare_text(cfg) -> str:
    """The comparison scene, in words."""
    if cfg.scene == "twins":
        return ("a bird in every quadrant, of three species, one of them twice and on a diagonal: on the "
                "top-right/bottom-left one (\"same\") or on the other (\"different\"). So every image holds one "
                "species twice and two once, each bird's species alone is uninformative, and no two neighbouring "
                "quadrants ever hold one species: only relating the two compared birds answers")
    if cfg.extra_birds <= 0:
        return ("birds top-right and bottom-left and nowhere else (so \"same species\" means only one species is "
                "present: a histogram of species answers without relating the birds)")
    return (f"birds top-right and bottom-left, plus a distractor bird of any species in each other quadrant with "
            f"probability {cfg.extra_birds:g}")


def design_table(cfg, seed: int) -> str:
    """What each view of the comparison layout can know (exact), and what a logistic regression on the
    exact feature reaches on this report's test layouts: the comparison must need the compared pair."""
    exact = {name: float(bayes_accuracy(cfg.scene, view, cfg.extra_birds)) for name, view in VIEWS.items()}
    fitted = oracle_accuracies(cfg.scene, cfg.extra_birds, seed, cfg.n_test)
    lines = ["| what a model could know | best possible accuracy from it (exact) |", "|---|---:|",
             *(f"| {name} | {value:.3f} |" for name, value in exact.items()), "",
             f"| oracle: logistic regression on the exact feature (fitted on 20,000 training layouts) | "
             f"test accuracy ({cfg.n_test} test images, seed {seed}) |", "|---|---:|",
             *(f"| {name} | {value:.3f} |" for name, value in fitted.items())]
    return "\n".join(lines)


def _aux_text(cfg) -> str:
    if cfg.species_aux <= 0:
        return "Each model is trained on the task label alone."
    return (f"Besides the task label, every model (all families, both tasks) also predicts which species "
            f"appear in the image (multi-label, loss weight {cfg.species_aux:g}; the reported accuracy is "
            "the task head's). That auxiliary target is a sum of local detections, so local-readout CNNs learn "
            "it as well as anyone; it gives every model species features. Without it, a 1-bit same/different "
            "signal taught no model anything within this budget (all at chance in the first version's calibration "
            "runs, Transformer and global-head CNN included): learning the species concept from same/different "
            "alone is a sample-efficiency problem, separate from the receptive-field question asked here.")


def _token_text(cfg) -> str:
    return {"none": "The token models (Transformers, token mixer) add the position code to their patch embeddings "
                    "as the projection scales them (the first version's tokens).",
            "affine": "The token models (Transformers, token mixer) normalise each patch embedding with a LayerNorm "
                      "with a learned gain and bias (timm's `patch_embed.norm`) before the 2-D position code is "
                      "added.",
            "standardise": "The token models (Transformers, token mixer) standardise each patch embedding (a "
                           "LayerNorm without parameters) before the 2-D position code is added, so that the code "
                           "is not drowned by the embedding's scale."}[cfg.token_norm]


def _learned_positions_text(cfg) -> str:
    """The ``-lpos`` rows' one difference, where the sweep has them (a bullet of the model list, or nothing)."""
    if not any(parse_spec(name).learned_positions for name in cfg.models):
        return ""
    return ("- **Learned positions** (rows marked so, names ending `-lpos`): the same Transformer with a learned "
            "position table (timm's `pos_embed`, resampled for another grid) in place of the 2-D sin/cos code, its "
            f"entries drawn with std {LEARNED_POSITION_STD:g}, a standardised token's scale. Added after the "
            "sweep's Transformers sat at chance, for a measured reason: on a small grid the sin/cos codes are "
            "nearly parallel (mean pairwise cosine 0.91 on the 4 x 4 grid), so where a token sits is a small part "
            "of it (`benchmarks/birds_positions.py`). The sin/cos rows stay as they ran.\n")


def _lr_text(cfg) -> str:
    """The learning rates, as the runs used them."""
    common = f"lr {cfg.lr:g} with warmup over {100 * cfg.warmup:g}% of the steps, then cosine"
    if not cfg.per_family:
        return common + ", the same for every family"
    chosen = ", ".join(f"{family} {lr:g} ({100 * warmup:g}% warmup)" for family, (lr, warmup) in cfg.per_family.items())
    return (f"learning rate and warmup per family, chosen on validation images over seeds 0-2 "
            f"(`benchmarks/birds_calibration.py`): {chosen}; any other family {common}")


def _second_text(cfg) -> str:
    if not cfg.second_size:
        return ""
    return (f"Every model is also tested, unchanged, on {cfg.second_size}x{cfg.second_size} test images (birds keep "
            "their share of the image); models sized for one image size cannot run there.")


def _acc(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.3f}"


def results_table(rows: list[ModelRow], second_size: int) -> str:
    second = f" at {second_size} px: counting / comparison |" if second_size else ""
    lines = [
        "| model | layers | receptive field (px) | one unit sees both birds | parameters | counting acc | "
        f"comparison acc |{second} train time / run (s) |",
        "|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if second_size else "") + "---:|",
    ]
    for r in rows:
        rf = "whole image" if r.receptive_field is None else str(r.receptive_field)
        other = ""
        if second_size:
            transfer = math.isnan(r.count_second) and math.isnan(r.compare_second)
            other = " cannot run (sized for one image) |" if transfer else \
                f" {_acc(r.count_second)} / {_acc(r.compare_second)} |"
        lines.append(f"| {r.label} | {r.depth} | {rf} | {100 * r.both_birds:.0f}% | {r.parameters:,} | "
                     f"{over_seeds(r.count_seeds)} | "
                     f"{over_seeds(r.compare_seeds)} |{other} "
                     f"{r.seconds:.0f} |")
    return "\n".join(lines)


def findings(rows: list[ModelRow], attention: AttentionSummary | None) -> list[str]:
    """Plain statements computed from the numbers, whatever they are."""
    out = []
    local = [r for r in rows if r.family in ("local", "pool") and r.budget == 1]
    blind = [r for r in local if r.both_birds == 0]
    seeing = [r for r in local if r.both_birds > 0]
    if local:
        out.append(f"Counting, local-readout CNNs: accuracy {_span([r.count_mean for r in local])} (chance 0.25).")
    if blind:
        out.append(f"Comparison, local-readout CNNs in which no output unit can see both birds ({len(blind)} "
                   f"model{'s' if len(blind) > 1 else ''}): accuracy {_span([r.compare_mean for r in blind])} "
                   "(chance 0.50).")
    if seeing:
        parts = ", ".join(f"{r.model} {r.compare_mean:.2f} (sees both in {100 * r.both_birds:.0f}%)" for r in seeing)
        out.append(f"Comparison, local-readout CNNs whose receptive field can hold both birds: {parts}.")
    for r in rows:
        if r.family not in ("local", "pool"):
            out.append(f"{r.label}: counting {r.count_mean:.2f}, comparison {r.compare_mean:.2f}.")
    out += _ranking(rows)
    out += _transfer(rows)
    if attention is not None:
        out += _attention_findings(attention)
    return out


def _span(values: Sequence[float]) -> str:
    """``0.49–0.52``, or ``0.49`` when the values print alike (one model, or several that agree)."""
    low, high = f"{min(values):.2f}", f"{max(values):.2f}"
    return low if low == high else f"{low}–{high}"


def _ranking(rows: list[ModelRow]) -> list[str]:
    """Where the best Transformer at the common budget stands against every CNN at that budget."""
    same = [r for r in rows if r.budget == 1]
    vits = [r for r in same if r.family in ("transformer", "transformer-local")]
    cnns = [r for r in same if r.family in ("local", "pool", "global")]
    if not vits or not cnns:
        return []
    out = []
    for task, title in (("count", "counting"), ("compare", "comparison")):
        vit = max(vits, key=lambda r: getattr(r, f"{task}_mean"))
        cnn = max(cnns, key=lambda r: getattr(r, f"{task}_mean"))
        a, b = getattr(vit, f"{task}_mean"), getattr(cnn, f"{task}_mean")
        verdict = "above" if a > b else "below" if a < b else "level with"
        out.append(f"At the common budget, {title}: the best Transformer ({vit.label}, {a:.3f}) is {verdict} "
                   f"the best CNN ({cnn.label}, {b:.3f}).")
    return out


def _transfer(rows: list[ModelRow]) -> list[str]:
    """What happens at the second image size."""
    runs = [r for r in rows if not math.isnan(r.compare_second) or not math.isnan(r.count_second)]
    fixed = [r.model for r in rows if r.family in ("global", "mlp", "mixer")]
    out = []
    if fixed:
        out.append("At the second image size, " + ", ".join(fixed) + " cannot run at all: a flattened map, a "
                   "pixel MLP and an N x N mixing matrix are sized for the training image.")
    for r in runs:
        if r.family in ("transformer", "transformer-local"):
            out.append(f"{r.label} runs unchanged at the second size (more tokens, same weights): counting "
                       f"{r.count_second:.2f} (was {r.count_mean:.2f}), comparison {r.compare_second:.2f} "
                       f"(was {r.compare_mean:.2f}).")
    return out


def _attention_findings(attention: AttentionSummary) -> list[str]:
    out = []
    name, stats, own = attention.model, attention.corner, attention.own
    for layer in range(stats.shape[0]):
        head = int(stats[layer, :, 0].argmax())
        mass, uniform = stats[layer, head]
        out.append(f"{name}, layer {layer + 1}: in its most long-range head (head {head + 1}), tokens of the "
                   f"top-right bird put {100 * mass:.1f}% of their attention on the bottom-left bird's tokens, "
                   f"{mass / uniform:.1f}x the {100 * uniform:.1f}% uniform attention would give (all heads: "
                   f"{', '.join(f'{100 * m:.1f}%' for m in stats[layer, :, 0])}).")
    for layer in range(own.shape[0]):
        mean = own[layer].mean(axis=0)  # over heads: own, own without self, share
        best = int(own[layer, :, 1].argmax())
        out.append(f"{name}, layer {layer + 1}: a compared bird's tokens put {100 * mean[0]:.1f}% of their "
                   f"attention on their own bird ({100 * mean[1]:.1f}% on its other tokens; head {best + 1}: "
                   f"{100 * own[layer, best, 1]:.1f}%), where the bird holds {100 * mean[2]:.1f}% of the tokens.")
    for layer, heads in enumerate(attention.counting if attention.counting is not None else []):
        mass, share = heads.mean(axis=0)  # [heads, 2] -> over heads
        best = int(heads[:, 0].argmax())
        out.append(f"{name} trained to count, layer {layer + 1}: its patch tokens put {100 * mass:.1f}% of their "
                   f"attention on the birds' tokens, {mass / share:.1f}x the {100 * share:.1f}% the birds hold "
                   f"(head {best + 1}: {100 * heads[best, 0]:.1f}%).")
    return out


def write_report(sweep: Sweep, out_dir: str | Path, *, elapsed: float, command: str) -> Path:
    """Write ``report.md``, ``results.json`` and the four figures into ``out_dir``; returns the Markdown path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = sweep.config
    rows = table_rows(sweep)
    attention = attention_summary(sweep)
    plot_samples(out / "samples.png", cfg.image_size, cfg.seeds[0], cfg.extra_birds, cfg.scene)
    plot_accuracy(out / "accuracy_vs_depth.png", rows)
    plot_curves(out / "learning_curves.png", sweep, rows)
    plot_receptive_fields(out / "receptive_fields.png", sweep)
    if attention is not None:
        plot_attention(out / "attention.png", sweep, attention)
    write_text_atomic(out / "results.json", json.dumps({
        "config": asdict(cfg), "elapsed_seconds": elapsed,
        "runs": [asdict(r) for r in sweep.results], "table": [asdict(r) for r in rows],
    }, indent=2) + "\n")
    seeds_done = sorted({r.seed for r in sweep.results})
    markdown = _markdown(cfg, rows, attention, elapsed, command, seeds_done, curve_section(sweep, rows),
                         machine_note(sweep.results))
    write_text_atomic(out / "report.md", markdown)
    return out / "report.md"


def curve_section(sweep: Sweep, rows: list[ModelRow]) -> str:
    """The learning curves: accuracy at each step budget run, and validation accuracy during every run."""
    parts = []
    if budget_groups(rows):
        stopping = ("; a run to convergence is evaluated after every "
                    f"{sweep.config.steps:,} steps and stops after {PATIENCE} evaluations without a better "
                    "validation accuracy, keeping its best model" if any(parse_spec(r.model).converges for r in rows)
                    else "")
        parts += ["Held-out test accuracy at each step budget run (the schedule stretched to fit: a *N*x run is a "
                  f"run of its own, not the 1x run continued{stopping}), mean ± sample std over seeds, then each "
                  "seed:", "",
                  budget_table(rows, sweep.config.steps, sweep.results), ""]
    if any(r.curve for r in sweep.results):
        parts += ["Validation accuracy during training (the engine evaluates every run at each quarter of its "
                  "steps on the validation images; mean over seeds). \"Still rising\": more than 0.01 gained over "
                  "the last quarter, so the budget, not the architecture, may be what stops it:", "",
                  curve_table(sweep), "", "![learning curves](learning_curves.png)"]
    return "\n".join(parts) if parts else "_One budget, and no validation curves, in this sweep._"


def _markdown(cfg, rows: list[ModelRow], attention, elapsed: float, command: str, seeds_done: list[int],
              curves: str, where: str) -> str:
    seeds = ", ".join(str(s) for s in seeds_done)
    if len(seeds_done) < len(cfg.seeds):
        seeds += f" (**partial report: {len(seeds_done)} of {len(cfg.seeds)} seeds done so far**)"
    bullets = "\n".join(f"- {line}" for line in findings(rows, attention))
    vit = BirdTransformer.__init__.__kwdefaults__  # the Transformer's shape, as the sweep builds it
    patch, d_model, heads = vit["patch"], vit["d_model"], vit["n_heads"]
    tokens = (cfg.image_size // patch) ** 2
    local_patch = LOCAL_TOKENIZER["patch"]
    local_tokens = (cfg.image_size // local_patch) ** 2
    learned = _learned_positions_text(cfg)
    attention_section = (
        "![attention](attention.png)\n\nAttention weights are recomputed from each layer's `qkv` projection "
        "(softmax(q kᵀ/√d) per head) on the first 200 comparison test images (the counting lines of the findings: "
        "the same model trained to count, on the first 200 counting test images)."
        if attention is not None else "_No Transformer in this sweep._"
    )
    return f"""# Birds: counting vs comparing far-apart birds — CNNs vs a Transformer

Reproduce: `{command}` ({elapsed / 60:.1f} minutes on this machine; torch threads: {torch.get_num_threads()}).
{where}{_preset_note(command, cfg.n_test)}
## The question

A convolutional network is built on locality: an output unit depends only on the pixels in its
*receptive field* (RF). To relate two objects at opposite corners it needs enough layers for one
unit's RF to cover both. Counting birds is a sum of local detections, so any CNN can do it; asking
whether the **top-right** and **bottom-left** birds are the **same species** needs one unit that
sees both. Attention lets every patch look at every other patch in a single layer.

## The data

Generated {cfg.image_size}x{cfg.image_size} images (no downloads): {len(SPECIES)} species
({", ".join(s.name for s in SPECIES)}) that differ in body shape, beak and colour pattern; pose,
scale and colours vary within a species; smooth random backgrounds with texture, 2-6 distractor
shapes (half of them in bird colours) and pixel noise. Each quadrant holds at most one bird.

- **count**: 1-4 birds, label = number of birds (balanced, chance 0.25).
- **compare** (scene `{cfg.scene}`): are the top-right and bottom-left birds the same species? Layout:
  {_compare_text(cfg)} (balanced, chance 0.50).

Every model trains on fresh images at every step ({cfg.steps * cfg.batch_size:,} per run at the common budget: no
image is seen twice, so no family gains by memorising), the same images in the same order for every model of
a task and seed; {cfg.n_test} held-out test images per task and seed come from an independent random stream.
Every model gets the same budget: {cfg.steps} AdamW steps of {cfg.batch_size} images, weight decay
{cfg.weight_decay}, {_lr_text(cfg)}; seeds {seeds}.
Rows marked *N*x steps train the same model *N* times as many steps (the schedule stretched to fit), one
model of each family alike ("Learning curves" below). Each run is task `birds` trained by tokformer's engine
(`tokformer train birds`: checkpoints, so an interrupted run resumes where it stopped; validation at each
quarter of the run).
{_second_text(cfg)}
The step budget, the Transformer's patch size and the local tokenizer's CNN were calibrated for the
first version of this experiment (the `pair` scene, a fixed training set) on a validation split, a
random stream of its own, never a reported test set. {_token_text(cfg)}

![samples](samples.png)

### Does the comparison need the two birds?

The layout was fixed before any model was trained on it. What a partial view of it can know,
computed exactly by enumerating every layout (`tokformer.tasks.birds.design`), and what a logistic
regression reaches on the exact feature (no pixels: the layout itself) on this report's test images:

{design_table(cfg, cfg.seeds[0])}

## The models

- **CNN, local readout** (no pooling / max-pool): *N* 3x3 conv + ReLU layers (16 channels; with
  max-pool, a 2x2 max-pool after each conv while the map is larger than 1x1), then a pointwise
  readout (1x1 conv → ReLU → 1x1 conv) giving class scores **at every location**, and the image's
  logits are the **mean of those per-location scores** (a sum divided by a constant). Each location's
  score depends only on its RF, and the mean is additive, so the two birds can only interact inside
  one receptive field. "One unit sees both birds" is the share of comparison test images in which
  some output unit's analytic RF contains both birds' centres.
- **CNN, global head**: 4 conv + max-pool layers (32 channels), then flatten + the readout: every logit
  sees every pixel. A stronger, non-local baseline, reported separately.
- **The readout** of every model that sees the whole image (global-head CNN, both Transformers, the
  token mixer) is the same: Linear → ReLU → Linear with {READOUT_HIDDEN} hidden units, on the flattened map
  (CNN) or the mean of the tokens (the others), so a nonlinearity after the mixing is no family's privilege.
- **Transformer, linear patches**: tokformer's image patch tokenizer ({patch}x{patch} patches, so {tokens} patch
  tokens, 2-D sin/cos positions, plus a class token) → shared pre-norm encoder (d_model {d_model}, {heads} heads)
  → mean of the patch tokens → the readout. Every token attends to every other from the first layer.
- **Transformer, local CNN tokenizer**: the same, but with {local_patch}x{local_patch} patches ({local_tokens} tokens),
  each computed by a small CNN ({LOCAL_TOKENIZER["cnn_depth"]} stages of 3x3 conv + ReLU + 2x2 max-pool, width
  {LOCAL_TOKENIZER["cnn_width"]} doubling per stage, then a linear map) that sees **its own patch only**
  (`tokformer.tokenizers.image_local`; the tests check that a token's gradient is exactly zero on
  every pixel outside its patch). The locality prior sits in the tokenizer; attention remains the
  only path between patches, so between the two corners.
{learned}- **Token-mixing matrix**: the local-tokenizer Transformer with attention replaced by one learned
  {local_tokens}x{local_tokens} matrix per layer (`x + W · norm(x)`, the same for every image): global mixing from
  the first layer, but fixed instead of computed from the data, with parameters growing as N² (attention's as d²).
- **Fully connected on raw pixels**: two hidden layers of 256 units on the {3 * cfg.image_size ** 2} pixel values:
  global at once, with a first layer that grows with the pixel count.

**Training signal.** {_aux_text(cfg)}

## Results

{results_table(rows, cfg.second_size)}

Accuracies: held-out test set, mean ± sample std (ddof 1) over {len(seeds_done)} seed(s), then each
seed's value in seed order. Training time: median
wall-clock seconds per training run of the model on this machine (both tasks, every seed).

{bullets}

![accuracy vs depth](accuracy_vs_depth.png)

## Learning curves

{curves}

## Receptive fields

Analytic RF: from kernel sizes and strides (3x3 convs add 2·jump pixels, a 2x2 max-pool adds
1·jump and doubles the jump). Effective RF (Luo et al. 2016): |∂ score / ∂ input| of the central
output unit's score for the predicted class, averaged over 64 test images (trained comparison models,
first seed). The gradient is exactly zero outside the analytic box (checked by the tests).

![receptive fields](receptive_fields.png)

## Attention

{attention_section}
"""
