"""Choose the vqa task's default budget and shape on a validation stream, never on the reported test split.

Each candidate trains with ``tokformer.engine.train`` on the built-in questions (the task's own
data pipeline, one seed) and is scored on the ``val`` split of the generator (an independent
stream: no scene of it is in training or in the test split that ``tokformer evaluate`` and
``benchmarks/vqa_results.py`` report). The table gives exact match overall and per question type
with the steps trained and the train wall time; the defaults are the best candidate that trains
in under 10 minutes on 2 cores. The last checkpoint is validated: the run's "best" one is chosen
on the test split. Run alone:

    python benchmarks/vqa_calibration.py                  # every candidate of CANDIDATES
    python benchmarks/vqa_calibration.py --only local-p32-lr1e-3  # some of them

Appends to ``benchmarks/results/vqa_calibration.jsonl`` and renders ``vqa_calibration.md``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from harness import RESULTS, Machine, machine_cpu, markdown_table, over_seeds, read_jsonl, write_results

from tokformer.engine import train
from tokformer.store.loader import load
from tokformer.tasks.vqa import Example
from tokformer.tasks.vqa_data import QUESTION_TYPES, bird_questions

JSONL = RESULTS / "vqa_calibration.jsonl"
VAL_SIZE = 2000
# `tokformer train vqa`'s defaults (its train defaults, patch size and CNN width), which each later candidate
# varies in one or two options; the first three ran with a width-32 CNN for 3,000 steps
DEFAULTS = dict(steps=9000, batch_size=32, lr=1e-3, warmup_steps=200, eval_every=1000, patch_size=32, cnn_width=8)
WIDTH32_3K = dict(steps=3000, batch_size=32, lr=1e-3, warmup_steps=200, eval_every=500, patch_size=32, cnn_width=32)
CANDIDATES: dict[str, dict] = {  # each about 8 minutes on 2 cores
    # 16 px patches: a bird (about 23 px wide, jittered about its quadrant's centre) falls across
    # its quadrant's four patches; 32 px patches: one token per quadrant, the whole bird in it
    # its row was measured by this script's previous version (every 100 steps an evaluation, the best checkpoint
    # validated), its rerun stopped for time
    "local-p16-lr1e-3": {**WIDTH32_3K, "patch_size": 16},
    "local-p32-lr1e-3": WIDTH32_3K,
    "local-p32-lr2e-3": {**WIDTH32_3K, "lr": 2e-3},
    # the same 10 minutes spent on more steps: the question-routing types left their plateau only after
    # 5,000-11,500 steps (vqa_12000.md at commit 0d9d729: the width-32 CNN at 12,000 steps, 1465 s), and that
    # CNN took 80% of a step's time
    "local-w8-9k": DEFAULTS,
    "local-w16-d1-9k": {**DEFAULTS, "cnn_width": 16, "cnn_depth": 1},
    # the same budget over more scenes: with 20,000 the held-out loss rose after 2,000-4,000 steps (14 epochs
    # in all); drawing a scene takes about 1 ms and holding one 13 kB
    "local-w8-9k-60k": {**DEFAULTS, "train_size": 60000},
    "local-w8-9k-100k": {**DEFAULTS, "train_size": 100000},
    # the picture tokens' 2-D sin/cos codes on the 2 x 2 grid are 1.17 apart between neighbours (1.66 across a
    # diagonal; cosines 0.96-0.98) against a code norm of 5.66 (d = 64); the birds experiment's Transformers
    # compared birds only with a learned table (docs/birds.md, "The position code"): the same one here, drawn at
    # unit variance
    "local-w8-9k-lpos": {**DEFAULTS, "position": "learned"},
    # facing is in the pixels but the defaults' tokens barely carry it (vqa.md: a linear probe reads 0.62 from
    # them, the same tokenizer trained on facing alone 0.98), and the answer does not gather a comparison's second
    # bird: both are what more steps or a faster start might buy; the channels-last CNN (patch_cnn.md) makes a
    # step cheaper, and 12,000 steps is what the width-32 CNN needed to route (vqa_12000.md at commit 0d9d729)
    "local-w8-12k": {**DEFAULTS, "steps": 12000},
    "local-w8-9k-lr2e-3": {**DEFAULTS, "lr": 2e-3},
    # the width-32 CNN learnt facing at 12,000 steps, the width-8 one did not (above): twice the width, same steps
    "local-w16-9k": {**DEFAULTS, "cnn_width": 16},
    # a comparison needs a picture token to learn it is asked about (from the question) and the answer to gather
    # two such tokens, a facing answer one bird's shape: a third block gives both more room at the same steps
    "local-w8-9k-l3": {**DEFAULTS, "n_layers": 3},
    # the training loss falls while the held-out one rises after 2,000-4,000 steps (14 passes over 20,000 scenes),
    # and the routing types leave a plateau late: memorising and generalising compete, which a stronger decay of
    # the weight matrices shifts toward the general solution in small Transformers (the grokking studies: 1.0)
    "local-w8-9k-wd1": {**DEFAULTS, "weight_decay": 1.0},
    # facing is which end of a bird its beak is at: a relation across the whole bird (about 19 px beak to tail at
    # scale 1, up to 23 px), while the default CNN's units see 10 px (two 3x3 convs, each then a 2x2 max-pool), so
    # only its final linear map could relate beak to tail, and that at every position a bird takes in its patch;
    # a third stage sees 22 px and leaves a 4 x 4 map: the whole bird in one unit's field
    "local-w8-9k-d3": {**DEFAULTS, "cnn_depth": 3},
    "linear-12k": dict(steps=12000, batch_size=32, lr=1e-3, warmup_steps=200, eval_every=1000, patch_size=32,
                       tokenizer="linear"),
}


@torch.no_grad()
def validate(run_dir: Path, seed: int) -> dict[str, float]:
    """Exact match on the generator's ``val`` split, overall and per question type."""
    predictor = load(run_dir, checkpoint="latest")  # the best one is chosen on the test split: not here
    task, model = predictor.task, predictor.model.eval()
    c = task.config
    data = bird_questions(VAL_SIZE, c.data_seed + seed, "val", size=c.image_size)
    images = torch.from_numpy(data.scenes.images).permute(0, 3, 1, 2)
    exact = torch.cat([task.step(model, task.collate(
        [Example(images[i], data.questions[i], data.answers[i]) for i in range(start, min(start + 256, VAL_SIZE))],
        train=False)).outputs for start in range(0, VAL_SIZE, 256)])
    kinds = data.kinds
    return {"exact": float(exact.float().mean()),
            **{kind: float(exact[[k == kind for k in kinds]].float().mean()) for kind in QUESTION_TYPES}}


def render(rows: list[dict]) -> str:
    """One line per candidate: each measure as mean ± sample std (every seed's value) over the seeds it ran."""
    by_name: dict[tuple[str, str], list[dict]] = {}
    for r in rows:  # a candidate's runs on one CPU model: another one rounds differently and runs at its own speed
        by_name.setdefault((r["name"], machine_cpu(r["machine"])), []).append(r)
    table = markdown_table(["candidate", "CPU", "options", "seeds", "steps trained", "val exact", *QUESTION_TYPES,
                            "train wall (s)"], [
        [name, cpu, f"`{json.dumps(runs[0]['options'])}`", ", ".join(str(r["seed"]) for r in runs),
         str(runs[0]["steps_trained"]), *[over_seeds([r["val"][k] for r in runs]) for k in ("exact", *QUESTION_TYPES)],
         over_seeds([r["seconds"] for r in runs], digits=0)] for (name, cpu), runs in by_name.items()])
    machines = "\n".join(sorted({r["machine"] for r in rows}))
    return (f"# vqa: choosing the defaults on a validation stream\n\nExact match on {VAL_SIZE} scenes of the "
            "generator's `val` split (`python benchmarks/vqa_calibration.py --seed S`), each cell mean ± sample "
            "std (ddof 1) over the seeds run, with each seed's value: whether a run learns the question-routing "
            "types varies from seed to seed by more than some candidates differ, so a choice rests on three. "
            "Rows whose options name no `cnn_width` ran when its default was 32, the width the script "
            "now names for them. A candidate run on two CPU models is two rows: each rounds differently and runs "
            "at its own speed, so compare rows of one CPU; the Intel rows ran the per-patch CNN in channels-last "
            f"memory order (the same function, summed in another order).\n\n{table}\n\n{machines}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=list(CANDIDATES), default=list(CANDIDATES))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    machine = Machine(("torch", "tokformer"))
    with tempfile.TemporaryDirectory(prefix="tokformer-vqa-cal-") as workdir:
        for name in args.only:
            start = time.perf_counter()
            run = Path(workdir) / name
            result = train("vqa", run_dir=str(run), seed=args.seed, quiet=True, **CANDIDATES[name])
            seconds = time.perf_counter() - start
            row = {"name": name, "options": CANDIDATES[name], "seed": args.seed, "seconds": round(seconds, 1),
                   "steps_trained": result.step,
                   "val": validate(run, args.seed), "machine": machine.line("2 torch threads")}
            with JSONL.open("a", encoding="utf-8") as out:
                out.write(json.dumps(row) + "\n")
            print(f"{name}: val exact {row['val']['exact']:.3f} in {seconds:.0f} s", flush=True)
    write_results("vqa_calibration.md", render(read_jsonl(JSONL)))


if __name__ == "__main__":
    main()
