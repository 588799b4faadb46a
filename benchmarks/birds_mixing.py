"""The birds mixing-only track: the same frozen tokens for every contestant, only the token mixing differs.

Per seed, the shared patch encoder is trained once on single-bird images and frozen
(``tokformer.tasks.birds.mixing``); then every mixer (conv stacks of depth 1-6, attention with 1-2
layers, a learned N x N matrix with 1-2 layers, one fully connected layer over all tokens) is
trained on the comparison's fresh training images at each image size (64 px: 16 tokens; 96 px: 36
tokens; the matrix and the fully connected layer are rebuilt, with their N²-sized weights, for the
second size; the others keep their shapes) and tested on that size's held-out images. Every mixer
gets the same budget, learning rate and readout.

    OMP_NUM_THREADS=1 python benchmarks/birds_mixing.py               # seeds 0-2, both sizes
    OMP_NUM_THREADS=1 python benchmarks/birds_mixing.py --seeds 0     # one seed
    python benchmarks/birds_mixing.py --report                        # the table from what ran

Each run is appended to ``benchmarks/results/birds_mixing.jsonl`` as it ends (runs already there are
skipped); the table goes to ``birds_mixing.md``.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict

import torch
from harness import RESULTS, Machine, latest_per_process, over_seeds, read_jsonl

from tokformer.tasks.birds.experiment import BirdsConfig, TrainStream, make_split
from tokformer.tasks.birds.mixing import (
    MIXERS,
    EncodedStream,
    MixingResult,
    corner_attention_of,
    encode,
    encoder_at,
    mixing_parameters,
    token_accuracy,
    train_encoder,
    train_mixer,
)

OUT = RESULTS / "birds_mixing"
SIZES = (64, 96)


def run(args: argparse.Namespace) -> None:
    log = OUT.with_suffix(".jsonl")
    done = {(r["mixer"], r["task"], r["seed"], r["image_size"]) for r in read_jsonl(OUT.with_suffix(".jsonl"))}
    machine, threads = Machine(), f"{torch.get_num_threads()} torch thread(s)"
    for seed in args.seeds:
        encoder = None
        for size in args.sizes:
            cfg = BirdsConfig(image_size=size, steps=args.steps, lr=args.lr, per_family={})
            for task in args.tasks:
                todo = [m for m in args.mixers if (m, task, seed, size) not in done]
                if not todo:
                    continue
                encoder = encoder or train_encoder(seed, steps=args.encoder_steps)  # at 64 px, for every size
                tokens = EncodedStream(TrainStream(cfg, task, seed), encoder_at(encoder, size))
                test = make_split(cfg, task, seed, "test")
                test_tokens = encode(tokens.encoder, test)
                for mixer in todo:
                    model, seconds = train_mixer(tokens, mixer, task, cfg, seed)
                    result = MixingResult(mixer, task, seed, size, model.encoder.tokenizer.grid_size[0] ** 2,
                                          token_accuracy(model, test_tokens, test.labels), mixing_parameters(model),
                                          round(seconds, 1))
                    row = asdict(result) | {"steps": args.steps, "lr": args.lr, "machine": machine.line(threads),
                                            "time": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
                    if mixer.startswith("attention") and task == "compare":
                        row["corner_attention"] = corner_attention_of(model, test)  # [layer][head] = [mass, share]
                    print(json.dumps(row), flush=True)
                    with log.open("a") as f:
                        f.write(json.dumps(row) + "\n")


def render(rows: list[dict]) -> str:
    sizes = sorted({r["image_size"] for r in rows})
    tasks = sorted({r["task"] for r in rows}, reverse=True)
    budget = sorted({(r["steps"], r["lr"]) for r in rows})
    header = ["mixer", *(f"parameters at {s} px ({next(r['tokens'] for r in rows if r['image_size'] == s)} tokens)"
                         for s in sizes),
              *(f"{task} at {s} px" for task in tasks for s in sizes)]
    lines = ["# Birds mixing-only track", "",
             "Written by `benchmarks/birds_mixing.py` from `birds_mixing.jsonl`. One frozen patch encoder per seed "
             "(trained on single-bird images); each mixer trained on fresh images of the `twins` comparison "
             f"({', '.join(f'{s} steps of 64 at lr {lr:g}' for s, lr in budget)}), tested on 1,000 held-out images "
             "of its size. Parameters: the mixer, its norm and the per-token readout (the encoder is everyone's). "
             "Cells: mean ± sample std (ddof 1) over seeds, then each seed.", "",
             "| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for mixer in dict.fromkeys(m for m in MIXERS if any(r["mixer"] == m for r in rows)):
        mine = [r for r in rows if r["mixer"] == mixer]
        params = [str(next((f"{r['parameters']:,}" for r in mine if r["image_size"] == s), "—")) for s in sizes]
        accs = [over_seeds([r["accuracy"] for r in sorted(mine, key=lambda r: r["seed"])
                       if r["task"] == task and r["image_size"] == s]) for task in tasks for s in sizes]
        lines.append(f"| {mixer} | " + " | ".join(params + accs) + " |")
    machines = latest_per_process([r["machine"] for r in rows])
    return "\n".join(lines + attention_table(rows) + ["", "Where they ran (one line per process):", "",
                                                       *(f"- {m}" for m in machines)]) + "\n"


def attention_table(rows: list[dict]) -> list[str]:
    """Per attention mixer, size and layer: the attention of the top-right bird's tokens on the bottom-left
    bird's, as a multiple of their token share (uniform attention = 1x), for the head that attends most."""
    measured = [r for r in rows if "corner_attention" in r]
    if not measured:
        return []
    lines = ["", "## Where the attention mixers look", "",
             "The top-right bird's tokens' attention on the bottom-left bird's tokens, as a multiple of the share "
             "uniform attention would give them (1x), in the head of each layer that attends there most; averaged "
             "over the first 200 held-out comparison images, then mean ± sample std over seeds (per seed after). "
             "The issue's target is >= 3x in the model that compares best.", "",
             "| mixer | image size | layer | top-right -> bottom-left, best head | comparison accuracy |",
             "|---|---:|---:|---:|---:|"]
    for mixer in dict.fromkeys(r["mixer"] for r in measured):
        for size in sorted({r["image_size"] for r in measured if r["mixer"] == mixer}):
            mine = sorted((r for r in measured if r["mixer"] == mixer and r["image_size"] == size),
                          key=lambda r: r["seed"])
            for layer in range(len(mine[0]["corner_attention"])):
                ratios = [max(mass / share for mass, share in r["corner_attention"][layer]) for r in mine]
                lines.append(f"| {mixer} | {size} | {layer + 1} | {over_seeds(ratios, digits=1, unit='x')} | "
                             f"{over_seeds([r['accuracy'] for r in mine])} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mixers", nargs="+", default=list(MIXERS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--sizes", nargs="+", type=int, default=list(SIZES))
    parser.add_argument("--tasks", nargs="+", default=["compare"], choices=["compare", "count"])
    parser.add_argument("--steps", type=int, default=BirdsConfig().steps)
    parser.add_argument("--lr", type=float, default=BirdsConfig().lr)
    parser.add_argument("--encoder-steps", type=int, default=300, help="steps of the shared encoder's training")
    parser.add_argument("--report", action="store_true", help="only write the table from the runs so far")
    args = parser.parse_args()
    if not args.report:
        run(args)
    OUT.with_suffix(".md").write_text(render(read_jsonl(OUT.with_suffix(".jsonl"))))
    print(OUT.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
