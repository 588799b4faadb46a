"""The report: ``report.md`` and ``results.json``, with the figures (:mod:`.figures`), written into one
directory from a sweep's rows (:mod:`.summary`).

Everything a reader needs to judge the claim is in ``report.md``: what the images are,
what each model can see (its readout and receptive field), accuracy over seeds, the
effective receptive fields, and where the Transformer's top-right bird looks.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from tokformer.engine import over_seeds, write_text_atomic
from tokformer.numbers import finite_float
from tokformer.tasks.birds.data import SPECIES
from tokformer.tasks.birds.design import VIEWS, bayes_accuracy, oracle_accuracies
from tokformer.tasks.birds.figures import (
    plot_accuracy,
    plot_attention,
    plot_curves,
    plot_receptive_fields,
    plot_samples,
)
from tokformer.tasks.birds.models import (
    LEARNED_POSITION_STD,
    LOCAL_TOKENIZER,
    PATIENCE,
    READOUT_HIDDEN,
    BirdTransformer,
    parse_spec,
)
from tokformer.tasks.birds.summary import (
    AttentionSummary,
    ModelRow,
    attention_summary,
    best_steps,
    budget_groups,
    mean_curve,
    table_rows,
)

if TYPE_CHECKING:
    from tokformer.tasks.birds.experiment import RunResult, Sweep


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
    """Validation accuracy at each evaluation of every run, mean over seeds: whether a model was still learning."""
    lines = ["| model | task | validation accuracy at each evaluation of the run (step: accuracy) | still rising? |",
             "|---|---|---|:---:|"]
    for name in sweep.config.models:
        for task in sweep.config.tasks:
            curve = mean_curve(sweep.results, name, task)
            if len(curve) < 2:
                continue
            points = ", ".join(f"{step}: {acc:.3f}" for step, acc in curve)
            rising = curve[-1][1] - _quarter_before_end(curve) > 0.01  # more than noise over the last quarter
            lines.append(f"| {parse_spec(name).label} | {task} | {points} | {'yes' if rising else 'no'} |")
    return "\n".join(lines)


def _quarter_before_end(curve: Sequence[tuple[int, float]]) -> float:
    """The accuracy of the last evaluation at or before three quarters of the run (the first one if none is):
    the one before the last for a run evaluated at each quarter, and for a run to convergence, evaluated every
    few hundred steps, the one a quarter of its steps back, so that "still learning" measures the same share of
    every run, not the last few hundred steps of a long one."""
    return next((acc for step, acc in reversed(curve[:-1]) if step <= 0.75 * curve[-1][0]), curve[0][1])


# -- markdown -----------------------------------------------------------------------


def machine_note(results: list[RunResult]) -> str:
    """Where the runs trained, from each run's machine record: the CPU, cores, torch threads and versions of
    each group of runs, the 1-minute load average as they started (a load well above the cores means
    another job shared the machine, and those runs' times are slow) and the share of the CPU time the host
    gave other virtual machines while they trained (steal: as slowing, and unseen by the load average).
    Empty when no run kept a record."""
    groups: dict[tuple[str, ...], list[dict]] = {}
    for run in results:
        m = run.machine if isinstance(run.machine, dict) else {}
        if recorded_number(m.get("load")) is not None:
            key = tuple(str(m.get(k)) for k in ("cpu", "cores", "threads", "versions"))
            groups.setdefault(key, []).append(m)
    if not groups:
        return ""
    runs = lambda n: f"{n} run" + ("s" if n != 1 else "")
    lines = []
    for (cpu, n_cores, threads, libraries), machines in sorted(groups.items()):
        loads = [recorded_number(m["load"]) for m in machines]
        line = (f"{runs(len(loads))} on {cpu}, {n_cores} cores, {threads} torch threads ({libraries}); 1-minute load "
                f"average as a run started: median {float(np.median(loads)):.2f}, {min(loads):.2f}-{max(loads):.2f}")
        stolen = [100 * s for m in machines if (s := recorded_number(m.get("stolen"))) is not None]
        if stolen:
            line += (f"; CPU time stolen by the host during training ({runs(len(stolen))} measured): median "
                     f"{float(np.median(stolen)):.0f}%, {min(stolen):.0f}-{max(stolen):.0f}%")
        lines.append(line)
    missing = len(results) - sum(len(machines) for machines in groups.values())
    if missing:
        lines.append(f"{runs(missing)} kept no record of their machine (trained before runs did)")
    return "\nWhere it trained: " + "; ".join(lines) + ".\n"


def recorded_number(value: object) -> float | None:
    """The number a record of a run holds (a JSON integer or float, finite, within a float's range), else
    None: a record may be damaged or edited by hand, and a bool, a string, NaN or 10**400 (a float()
    overflow) must reach no mean and no table."""
    if type(value) not in (int, float):
        return None
    try:
        return finite_float(value)
    except ValueError:
        return None


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
    local = [r for r in _first_budget(rows) if r.family in ("local", "pool")]
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


def _first_budget(rows: list[ModelRow]) -> list[ModelRow]:
    """The rows at the sweep's common budget, the first its tables show: 1x where it ran, else the smallest
    (every row of a sweep of runs to convergence alone)."""
    first = min((parse_spec(r.model).budget_order for r in rows), default=None)
    return [r for r in rows if parse_spec(r.model).budget_order == first]


def _ranking(rows: list[ModelRow]) -> list[str]:
    """Where the best Transformer at the common budget stands against every CNN at that budget."""
    same = _first_budget(rows)
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
    parts, converges = [], any(parse_spec(r.model).converges for r in rows)
    if budget_groups(rows):
        stopping = ("; a run to convergence is evaluated after every "
                    f"{sweep.config.steps:,} steps and stops after {PATIENCE} evaluations without a better "
                    "validation accuracy, keeping its best model" if converges else "")
        parts += ["Held-out test accuracy at each step budget run (the schedule stretched to fit: a *N*x run is a "
                  f"run of its own, not the 1x run continued{stopping}), mean ± sample std over seeds, then each "
                  "seed:", "",
                  budget_table(rows, sweep.config.steps, sweep.results), ""]
    if any(r.curve for r in sweep.results):
        every = (f", a run to convergence every {sweep.config.steps:,} steps, and after it stopped at the accuracy "
                 "of the model it kept" if converges else "")
        parts += ["Validation accuracy during training (the engine evaluates every run at each quarter of its "
                  f"steps on the validation images{every}; mean over seeds). \"Still rising\": more than 0.01 "
                  "gained over the last quarter, so the budget, not the architecture, may be what stops it:", "",
                  curve_table(sweep), "", "![learning curves](learning_curves.png)"]
    return "\n".join(parts) if parts else "_One budget, and no validation curves, in this sweep._"


def _markdown(cfg, rows: list[ModelRow], attention, elapsed: float, command: str, seeds_done: list[int],
              curves: str, where: str) -> str:
    seeds, so_far = ", ".join(str(s) for s in seeds_done), ""
    if len(seeds_done) < len(cfg.seeds):
        seeds += f" (**partial report: {len(seeds_done)} of {len(cfg.seeds)} seeds done so far**)"
        so_far = " so far, the runs of the seeds still under way included"  # the sweep's time, not these seeds'
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

Reproduce: `{command}` ({elapsed / 60:.1f} minutes on this machine{so_far}; torch threads: {torch.get_num_threads()}).
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
