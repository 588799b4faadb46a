"""The built-in tasks' headline results, from their own commands: what README's tables quote.

Each task is trained exactly as the README shows it (``tokformer train TASK`` with every
default, on its built-in data), then evaluated on its held-out split with
``tokformer evaluate RUN --json``, which prints the model's metrics beside the task's trivial
baselines. translate also reports beam-4 BLEU, chrF and exact match (``tokformer translate RUN
--eval``). Wall times are of the train command on this machine; run it alone.

    OMP_NUM_THREADS=1 python benchmarks/task_results.py     # every task (about 15 minutes at 1 thread)
    python benchmarks/task_results.py --tasks sort lm       # some of them

Writes ``benchmarks/results/task_results.md`` (and ``.json`` beside it); every figure the
README's "Results on built-in data" table and Quickstart outputs quote comes from this file
(``tests/test_published_numbers.py`` checks it).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from harness import Machine, markdown_table, write_results

TASKS = ("sort", "classify", "lm", "translate")
TOKFORMER = [sys.executable, "-m", "tokformer.cli"]


def run(*args: str) -> str:
    """A ``tokformer`` command's stdout; its failure stops the script with the command's output."""
    done = subprocess.run([*TOKFORMER, *args], capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"tokformer {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


def measure(task: str, workdir: Path) -> dict:
    """Train ``task`` with its defaults, then its held-out metrics and baselines (and translate's beam scores)."""
    run_dir = workdir / task
    start = time.perf_counter()
    run("train", task, "--run-dir", str(run_dir), "--quiet")
    wall = time.perf_counter() - start
    result = {"task": task, "command": f"tokformer train {task}", "train_seconds": round(wall, 1),
              **json.loads(run("evaluate", str(run_dir), "--json", "--quiet"))}
    if task == "translate":
        scores = run("translate", str(run_dir), "--eval", "--quiet")
        result["beam"] = {key: float(value) for key, value in re.findall(r"^(\w+)\s*[:=]?\s*([\d.]+)", scores, re.M)}
    return result


def percent(value: float) -> str:
    return f"{100 * value:.1f}%"


def row(result: dict) -> list[str]:
    """One table row: the model's headline metric beside each baseline's, as the README quotes them."""
    metrics, baselines = result["metrics"], result["baselines"]
    if "perplexity" in metrics:
        headline = f"perplexity {metrics['perplexity']:.1f}"
        others = [f"{name}: perplexity {values['perplexity']:.1f}" for name, values in baselines.items()]
    else:
        key = "accuracy" if "accuracy" in metrics else "exact_match"
        headline = f"{key} {percent(metrics[key])}"
        others = [f"{name}: {percent(values[key])}" for name, values in baselines.items() if key in values]
    if "beam" in result:
        beam = result["beam"]
        headline += (f"; `translate --eval`: exact match {percent(beam['exact_match'])} of {int(beam['sentences'])}, "
                     f"BLEU {beam['bleu']:.2f}, chrF {beam['chrf']:.2f}")
    return [result["task"], f"`{result['command']}`", headline, "; ".join(others) or "-",
            f"{result['train_seconds']:.0f} s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--out", default="task_results.md", help="file name under benchmarks/results/")
    args = parser.parse_args()
    machine = Machine(("torch", "tokformer"))
    with tempfile.TemporaryDirectory(prefix="tokformer-task-results-") as workdir:
        results = [measure(task, Path(workdir)) for task in args.tasks]
    table = markdown_table(["task", "command", "held-out result", "baselines (same data)", "train wall time"],
                           [row(r) for r in results])
    text = (f"# Built-in tasks: held-out results beside their baselines\n\n"
            f"Each task trained with its defaults on its built-in data (`python benchmarks/task_results.py`), "
            f"then `tokformer evaluate RUN --json` on its held-out split.\n\n{table}\n\n"
            f"{machine.line(f'{torch.get_num_threads()} torch thread(s) per run (OMP_NUM_THREADS)')}\n")
    write_results(args.out, text)
    (Path(__file__).parent / "results" / Path(args.out).with_suffix(".json").name).write_text(
        json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
