"""What the vqa model answers when a question is reworded: a tally, per question type, of the greedy
answers to the same held-out questions asked as trained and in ``vqa_data.REWORDED``'s wording.

``benchmarks/vqa_results.py`` scores the rewording (exact match, as asked vs reworded); this says
what the wrong answers are, e.g. whether a reworded question is read as another type's. It trains
``tokformer train vqa`` with its defaults for one seed (about 4-8 minutes on 2 cores), then asks
the questions of trained phrasings and combinations among the first 1000 held-out scenes, as
``vqa_results`` does.

    python benchmarks/vqa_reworded_answers.py --seed 1     # alone: it trains
    python benchmarks/vqa_reworded_answers.py --report     # re-render the .md from the .jsonl

Appends one row per seed to ``benchmarks/results/vqa_reworded_answers.jsonl`` and renders the .md.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from harness import RESULTS, Machine, latest_per_process, markdown_table, read_jsonl, write_results
from vqa_results import ATTENTION_EXAMPLES, TRAIN, TYPES, python

TALLY = """
import json, sys
from collections import Counter
import numpy as np
import torch
from tokformer.store.loader import load
from tokformer.tasks.vqa_data import bird_questions, reworded
predictor = load(sys.argv[1], checkpoint="latest")
task, model, n = predictor.task, predictor.model, int(sys.argv[2])
data = bird_questions(n, task.config.data_seed, "test", size=task.config.image_size)
images = torch.from_numpy(data.scenes.images).permute(0, 3, 1, 2)  # [n, 3, H, W] uint8
asked = np.flatnonzero(~(data.held_out_phrasing | data.held_out_combo))
wordings = {"as_asked": data.questions, "reworded": reworded(data)}
tally = {}
for kind in sorted(set(data.kinds)):
    rows = [int(i) for i in asked if data.kinds[i] == kind]
    tally[kind] = {"truth": Counter(data.answers[i] for i in rows)}
    for name, questions in wordings.items():
        answers = [task.predict(model, [images[i]], prompt=questions[i])[0] for i in rows]
        tally[kind][name] = Counter(answers)
        tally[kind][name + "_right"] = sum(a == data.answers[i] for a, i in zip(answers, rows))
print(json.dumps(tally))
"""

JSONL = RESULTS / "vqa_reworded_answers.jsonl"


def counts(tally: dict[str, int]) -> str:
    """``{"left": 3, "robin": 1}`` -> ``left 3, robin 1`` (most frequent first)."""
    return ", ".join(f"{answer or '(nothing)'} {n}" for answer, n in sorted(tally.items(), key=lambda x: (-x[1], x[0])))


def render(rows: list[dict]) -> str:
    """One table per seed (its latest row): per type, the true answers and the model's, as asked and reworded."""
    rows = list({r["seed"]: r for r in rows}.values())
    sections = []
    for row in rows:
        table = markdown_table(
            ["type", "questions", "true answers", "answers as asked (right)", "answers reworded (right)"],
            [[kind, str(sum(t["truth"].values())), counts(t["truth"]),
              f"{counts(t['as_asked'])} ({t['as_asked_right']})", f"{counts(t['reworded'])} ({t['reworded_right']})"]
             for kind in TYPES if (t := row["tally"].get(kind))])
        sections.append(f"## Seed {row['seed']}\n\n{table}")
    machines = latest_per_process([r["machine"] for r in rows])
    return ("# vqa: the answers to reworded questions\n\n"
            "`tokformer train vqa` with its defaults, the last checkpoint's greedy answers to the questions of "
            f"trained phrasings and combinations among the first {ATTENTION_EXAMPLES} held-out scenes, asked as "
            "trained and in `vqa_data.REWORDED`'s wording (same pictures and answers) "
            "(`python benchmarks/vqa_reworded_answers.py --seed N`).\n\n"
            + "\n\n".join(sections) + "\n\n" + "\n".join(machines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1, help="the training seed (default 1)")
    parser.add_argument("--report", action="store_true", help="only re-render the .md from the .jsonl")
    args = parser.parse_args()
    if not args.report:
        machine = Machine(("torch", "tokformer"))
        with tempfile.TemporaryDirectory(prefix="tokformer-vqa-reworded-") as workdir:
            run_dir = Path(workdir) / f"seed{args.seed}"
            trained = python(TRAIN, str(run_dir), str(args.seed), "{}")
            tally = python(TALLY, str(run_dir), str(ATTENTION_EXAMPLES))
        row = {"seed": args.seed, "tally": tally, "machine": machine.line(f"{trained['threads']} torch thread(s)"),
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        with JSONL.open("a", encoding="utf-8") as out:
            out.write(json.dumps(row) + "\n")
    write_results(JSONL.with_suffix(".md").name, render(read_jsonl(JSONL)))


if __name__ == "__main__":
    main()
