"""The lm task's defaults on three small corpora of plain English: what docs/lm.md's table quotes.

The corpora are made from what a Linux machine with Python has, one document per file:

- ``pkg200``: the descriptions (``*.dist-info/METADATA``) of the installed Python packages,
  sorted by name, until 200 KB (the corpus the defaults were chosen on);
- ``licenses``: the licence texts of ``/usr/share/common-licenses`` (very repetitive);
- ``man``: every third man page of ``/usr/share/man/man1`` (``man -l`` then ``col -bx``) whose
  name does not start with ``gcloud``, until 200 KB.

Each is trained with every default (``tokformer train lm --data DIR``: early stopping on, as for
any user data), then ``tokformer evaluate RUN --json`` gives the best checkpoint's held-out
perplexity beside the unigram baseline's; the held-out loss of every evaluation comes from the
run's ``metrics.jsonl``. The corpora depend on the machine (its packages and man pages), so the
machine line says where they were made.

    OMP_NUM_THREADS=1 python benchmarks/lm_corpora.py     # about 10 minutes at one thread
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from harness import Machine, markdown_table, write_results

TOKFORMER = [sys.executable, "-m", "tokformer.cli"]
LIMIT = 200_000  # bytes per corpus


def _fill(out: Path, documents: list[tuple[str, str]]) -> Path:
    out.mkdir(parents=True)
    total = 0
    for name, text in documents:
        if total >= LIMIT:
            break
        if text.strip():
            (out / f"{name}.txt").write_text(text, encoding="utf-8")
            total += len(text.encode("utf-8"))
    return out


def pkg200(out: Path) -> Path:
    site = Path(sysconfig.get_paths()["purelib"])
    files = sorted(site.glob("*.dist-info/METADATA"), key=lambda p: p.parent.name.lower())
    return _fill(out, [(p.parent.name, p.read_text(encoding="utf-8", errors="replace")) for p in files])


def licenses(out: Path) -> Path:
    files = sorted(p for p in Path("/usr/share/common-licenses").iterdir() if p.is_file() and not p.is_symlink())
    return _fill(out, [(p.name, p.read_text(encoding="utf-8", errors="replace")) for p in files])


def man(out: Path) -> Path:
    pages = sorted(p for p in Path("/usr/share/man/man1").iterdir() if not p.name.startswith("gcloud"))[::3]

    def render(page: Path) -> str:
        env = {"MANWIDTH": "80", "PATH": "/usr/bin:/bin"}
        shown = subprocess.run(["man", "-l", str(page)], capture_output=True, env=env).stdout
        return subprocess.run(["col", "-bx"], input=shown, capture_output=True).stdout.decode("utf-8", "replace")

    documents = []
    for page in pages:  # rendered one at a time, until the corpus is full
        if sum(len(text) for _, text in documents) >= LIMIT:
            break
        documents.append((page.name, render(page)))
    return _fill(out, documents)


CORPORA: dict[str, Callable[[Path], Path]] = {"pkg200": pkg200, "licenses": licenses, "man": man}


def measure(name: str, workdir: Path) -> dict:
    data = CORPORA[name](workdir / name)
    run_dir = workdir / f"run-{name}"
    start, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([*TOKFORMER, "train", "lm", "--data", str(data), "--run-dir", str(run_dir), "--device", "cpu",
                    "--quiet"], check=True)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    evaluation = json.loads(subprocess.run([*TOKFORMER, "evaluate", str(run_dir), "--json", "--quiet"], check=True,
                                           capture_output=True, text=True).stdout)
    curve = [row for row in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
             if row.get("split") == "eval"]
    best = json.loads((run_dir / "best.json").read_text())
    files = sorted(data.iterdir())
    return {"corpus": name, "files": len(files), "bytes": sum(p.stat().st_size for p in files),
            "metrics": evaluation["metrics"], "baselines": evaluation["baselines"],
            "eval_losses": [(row["step"], round(row["loss"], 4)) for row in curve], "best": best,
            "train_wall_s": round(wall, 1), "train_cpu_s": round(after.ru_utime - cpu.ru_utime, 1)}


def row(result: dict) -> list[str]:
    unigram = next(iter(result["baselines"].values()))["perplexity"]
    ppl = result["metrics"]["perplexity"]
    steps = result["eval_losses"][-1][0] if result["eval_losses"] else 0
    return [result["corpus"], f"{result['files']}, {result['bytes']:,}", f"**{ppl:.1f}**", f"{unigram:.1f}",
            f"**{ppl / unigram:.3f}**", str(result["best"].get("step")), str(steps),
            ", ".join(f"{loss:.3f}" for _, loss in result["eval_losses"]),
            f"{result['train_cpu_s']:.0f} s CPU, {result['train_wall_s']:.0f} s wall"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", nargs="+", choices=list(CORPORA), default=list(CORPORA))
    parser.add_argument("--out", default="lm_corpora.md", help="file name under benchmarks/results/")
    args = parser.parse_args()
    machine = Machine(("torch", "tokformer"))
    with tempfile.TemporaryDirectory(prefix="tokformer-lm-corpora-") as workdir:
        results = [measure(name, Path(workdir)) for name in args.corpora]
    table = markdown_table(["corpus", "files, bytes", "model ppl", "unigram ppl", "ratio", "best step",
                            "steps run", "held-out loss at each evaluation", "train time"],
                           [row(r) for r in results])
    text = (f"# lm defaults on small corpora\n\n`OMP_NUM_THREADS=1 python benchmarks/lm_corpora.py`: "
            f"`tokformer train lm --data DIR` with every default (early stopping on), then "
            f"`tokformer evaluate RUN --json` (best checkpoint, held-out split).\n\n{table}\n\n"
            f"{machine.line(f'{torch.get_num_threads()} torch thread(s) per run (OMP_NUM_THREADS)')}\n")
    write_results(args.out, text)
    (Path(__file__).parent / "results" / Path(args.out).with_suffix(".json").name).write_text(
        json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
