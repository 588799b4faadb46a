"""Which comparison scenes need the two compared birds: the exact best accuracy of partial views.

For each scene the bird generator can draw, the best accuracy any classifier reaches on "are the
top-right and bottom-left birds the same species?" from one view of the layout alone (the set of
species present, their counts, one bird, what units seeing two neighbouring quadrants can
compare), computed exactly by enumerating every layout with its probability
(``tokformer.tasks.birds.design``). No model is trained: this fixes the design before any model
is looked at. 0.5 is chance; a view above it is a way to answer without relating the two birds.

    python benchmarks/birds_design.py
"""

from __future__ import annotations

from harness import Machine, markdown_table, write_results

from tokformer.tasks.birds.design import VIEWS, bayes_accuracy

SCENES = (("pair", 0.0, "the pair only (the experiment's default until now)"),
          ("pair", 0.5, "the pair, a distractor of any species in each other quadrant with probability 0.5"),
          ("pair", 1.0, "the pair, a distractor of any species in each other quadrant"),
          ("twins", 0.0, "twins: four birds, three species, the twins on one diagonal"))


def main() -> None:
    machine = Machine(("tokformer",))
    rows = [[view, *(f"{float(bayes_accuracy(scene, feature, extra)):.3f}" for scene, extra, _ in SCENES)]
            for view, feature in VIEWS.items()]
    header = ["view of the layout", *(f"{scene}, extra_birds={extra:g}" if scene == "pair" else scene
                                      for scene, extra, _ in SCENES)]
    scenes = "\n".join(f"- `{scene}`{f', extra_birds={extra:g}' if scene == 'pair' else ''}: {text}"
                       for scene, extra, text in SCENES)
    text = (f"# Bird comparison scenes: what partial views can know\n\n{__doc__.split(chr(10) + chr(10))[1]}\n\n"
            f"{scenes}\n\nBest accuracy on the comparison label (exact; 0.500 = chance):\n\n"
            f"{markdown_table(header, rows)}\n\n{machine.line('exact enumeration, no training')}\n")
    write_results("birds_design.md", text)


if __name__ == "__main__":
    main()
