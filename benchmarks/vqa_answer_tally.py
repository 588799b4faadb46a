"""What the vqa model answers to questions it never trained on: a tally of its greedy answers, per
question type, (1) to the same held-out questions asked as trained and reworded in trained words
(``vqa_data.REWORDED``), (2) to the held-out (type, quadrant) combinations asked in trained phrasings.

``benchmarks/vqa_results.py`` scores both (exact match); this says what the wrong answers are:
whether a reworded question is read as another type's, whether a question about a quadrant never
asked that way gets an answer of its type, and, for species, whether it names another bird of the
picture. It trains ``tokformer train vqa`` with its defaults for one seed (about 4-8 minutes on 2
cores), then asks the questions of trained phrasings and combinations among the first 1000 held-out
scenes (as ``vqa_results`` does) and the held-out combinations' questions among the first 3000.

    python benchmarks/vqa_answer_tally.py --seed 1     # alone: it trains
    python benchmarks/vqa_answer_tally.py --report     # re-render the .md from the .jsonl

Appends one row per seed to ``benchmarks/results/vqa_answer_tally.jsonl`` and renders the .md.
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
from tokformer.tasks.birds.data import SPECIES
from tokformer.tasks.vqa_data import HELD_OUT_COMBOS, QUADRANT_WORDS, bird_questions, reworded
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

# the held-out combinations, asked in trained phrasings, among more held-out scenes (each is about 1
# question in 25): the evaluation split's first chunks, drawn as `tokformer evaluate` draws them
named = lambda kind, quadrants: f"{kind} {' & '.join(QUADRANT_WORDS[q] for q in quadrants)}"
combos = {named(kind, quadrants): {"truth": Counter(), "answers": Counter(), "right": 0,
                                   **({"another_bird": 0} if kind == "species" else {})}
          for kind, quadrants in sorted(HELD_OUT_COMBOS)}
for chunk in range(int(sys.argv[3]) // n):
    more = bird_questions(n, task.config.data_seed, "test", size=task.config.image_size, chunk=chunk)
    pictures = torch.from_numpy(more.scenes.images).permute(0, 3, 1, 2)
    species = np.full((n, 4), -1)  # [n, 4]: each quadrant's species, -1 where empty
    species[more.scenes.bird_image, more.scenes.bird_slot] = more.scenes.bird_species
    for i in np.flatnonzero(more.held_out_combo & ~more.held_out_phrasing):
        kind, truth = more.kinds[i], more.answers[i]
        answer = task.predict(model, [pictures[i]], prompt=more.questions[i])[0]
        combo = combos[named(kind, more.quadrants[i])]
        combo["truth"][truth] += 1
        combo["answers"][answer] += 1
        combo["right"] += answer == truth
        if kind == "species":  # a wrong species that another bird of the picture has: the wrong quadrant read
            combo["another_bird"] += answer != truth and answer in {SPECIES[s].name for s in species[i] if s >= 0}
print(json.dumps({"tally": tally, "combos": combos}))
"""

JSONL = RESULTS / "vqa_answer_tally.jsonl"
COMBO_SCENES = 3000  # held-out scenes searched for the held-out combinations' questions (chunks of 1000)


def counts(tally: dict[str, int]) -> str:
    """``{"left": 3, "robin": 1}`` -> ``left 3, robin 1`` (most frequent first)."""
    return ", ".join(f"{answer or '(nothing)'} {n}" for answer, n in sorted(tally.items(), key=lambda x: (-x[1], x[0])))


def render(rows: list[dict]) -> str:
    """Two tables per seed (its latest row): per type, the true answers and the model's, as asked and reworded;
    per held-out combination, the true answers and the model's."""
    rows = list({r["seed"]: r for r in rows}.values())
    sections = []
    for row in rows:
        table = markdown_table(
            ["type", "questions", "true answers", "answers as asked (right)", "answers reworded (right)"],
            [[kind, str(sum(t["truth"].values())), counts(t["truth"]),
              f"{counts(t['as_asked'])} ({t['as_asked_right']})", f"{counts(t['reworded'])} ({t['reworded_right']})"]
             for kind in TYPES if (t := row["tally"].get(kind))])
        combos = markdown_table(
            ["held-out combination", "questions", "true answers", "answers (right)",
             "wrong ones naming another bird of the picture"],
            [[name, str(sum(c["truth"].values())), counts(c["truth"]), f"{counts(c['answers'])} ({c['right']})",
              str(c["another_bird"]) if "another_bird" in c else "-"] for name, c in row["combos"].items()])
        sections.append(f"## Seed {row['seed']}\n\nAs asked and reworded:\n\n{table}\n\n"
                        f"The held-out (type, quadrant) combinations, in trained phrasings:\n\n{combos}")
    machines = latest_per_process([r["machine"] for r in rows])
    return ("# vqa: the answers to questions never trained on\n\n"
            "`tokformer train vqa` with its defaults, the last checkpoint's greedy answers to the questions of "
            f"trained phrasings and combinations among the first {ATTENTION_EXAMPLES} held-out scenes, asked as "
            "trained and in `vqa_data.REWORDED`'s wording (same pictures and answers), and to the questions of "
            f"held-out (type, quadrant) combinations in trained phrasings among the first {COMBO_SCENES} "
            "(`python benchmarks/vqa_answer_tally.py --seed N`).\n\n"
            + "\n\n".join(sections) + "\n\n" + "\n".join(machines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1, help="the training seed (default 1)")
    parser.add_argument("--report", action="store_true", help="only re-render the .md from the .jsonl")
    args = parser.parse_args()
    if not args.report:
        machine = Machine(("torch", "tokformer"))
        with tempfile.TemporaryDirectory(prefix="tokformer-vqa-tally-") as workdir:
            run_dir = Path(workdir) / f"seed{args.seed}"
            trained = python(TRAIN, str(run_dir), str(args.seed), "{}")
            asked = python(TALLY, str(run_dir), str(ATTENTION_EXAMPLES), str(COMBO_SCENES))
        row = {"seed": args.seed, **asked, "machine": machine.line(f"{trained['threads']} torch thread(s)"),
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        with JSONL.open("a", encoding="utf-8") as out:
            out.write(json.dumps(row) + "\n")
    write_results(JSONL.with_suffix(".md").name, render(read_jsonl(JSONL)))


if __name__ == "__main__":
    main()
