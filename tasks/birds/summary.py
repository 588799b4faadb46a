"""What a sweep's runs say, before any of it is written: one row per model (mean, sample std and every seed
on each task), the validation curves averaged over seeds, the runs grouped by step budget, and where the
analysed Transformer's attention goes. The report (:mod:`.report`) writes these as tables and the figures
(:mod:`.figures`) draw them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tokformer.tasks.birds.attention import attention_maps, bird_attention, corner_attention, own_bird_attention
from tokformer.tasks.birds.data import BOTTOM_LEFT, TOP_RIGHT, generate
from tokformer.tasks.birds.models import BirdTransformer, LocalCNN, parse_spec
from tokformer.tasks.birds.receptive_field import analytic_receptive_field, covers_both

if TYPE_CHECKING:
    from tokformer.tasks.birds.experiment import RunResult, Sweep


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
    """``name``'s validation accuracy on ``task`` at each evaluation its runs share, averaged over seeds.

    A run to convergence that stopped sooner than another seed's counts, after its last evaluation, with the
    accuracy of the model it kept (its best): that is the model it holds from then on, and cutting every seed's
    curve at the first stop would hide how far the others went. Other points not in every run go: a run cut
    short and resumed before 9a10e92 has one more point where its stop saved (the committed full sweep holds
    such runs)."""
    runs = [r for r in results if r.model == name and r.task == task and r.curve]
    if not runs:
        return []
    curves = [dict(r.curve) for r in runs]
    if parse_spec(name).converges:
        horizon = set().union(*curves)
        curves = [curve | dict.fromkeys((s for s in horizon if s > max(curve)), best_point(run.curve)[1])
                  for curve, run in zip(curves, runs, strict=True)]
    steps = sorted(set.intersection(*(set(c) for c in curves)))
    return [(step, float(np.mean([c[step] for c in curves]))) for step in steps]


def budget_groups(rows: list[ModelRow]) -> dict[str, dict[str, ModelRow]]:
    """Models run at more than one step budget, or to convergence: base model name -> budget (``3x``,
    ``early stop``) -> its row, the budgets in the order tables show them. A run to convergence counts alone
    too: where it kept its model is the budget it found."""
    groups: dict[str, dict[str, ModelRow]] = {}
    for r in sorted(rows, key=lambda r: parse_spec(r.model).budget_order):
        groups.setdefault(parse_spec(r.model).base, {})[parse_spec(r.model).budget_name] = r
    return {base: by_budget for base, by_budget in groups.items()
            if len(by_budget) > 1 or any(parse_spec(r.model).converges for r in by_budget.values())}


def best_point(curve: Sequence[tuple[int, float]]) -> tuple[int, float]:
    """(step, validation accuracy) of a run's best evaluation, the first if tied: what a run to convergence keeps."""
    return max(curve, key=lambda point: point[1])


def best_steps(results: Sequence[RunResult], name: str, task: str) -> list[int]:
    """The step of each seed's best validation accuracy, in seed order: where a run to convergence found the
    model it keeps."""
    runs = sorted((r for r in results if r.model == name and r.task == task and r.curve), key=lambda r: r.seed)
    return [best_point(r.curve)[0] for r in runs]


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
