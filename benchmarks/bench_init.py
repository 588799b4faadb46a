"""The initialisation trap and denormals: why models initialise themselves.

Run: ``python benchmarks/bench_init.py [--repeats 5]``; writes ``benchmarks/results/init.md``.

A ``CausalLM`` whose tied token table keeps ``nn.Embedding``'s N(0, 1) init (what the
library gave before its parts initialised themselves) starts with logits of standard
deviation ~sqrt(d_model): the softmax is nearly one-hot, its gradient underflows to
denormal floats, and the vocabulary-head matmuls of the backward pass crawl through them.
This measures one training step (forward, cross-entropy, backward, AdamW) of the same
GPT-2-shaped model built both ways, each with and without ``torch.set_flush_denormal``
(flush-to-zero), at 1 thread and all cores: interleaved rounds, a new batch each round,
median (min-max). It also records each model's first loss beside ln(vocab).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

import torch
from harness import (
    MIN_REPEATS,
    Machine,
    interleave,
    markdown_table,
    ratio_cell,
    thread_counts,
    torch_threads,
    write_results,
)
from torch import nn

from tokformer.config import TransformerConfig
from tokformer.embedding import Embedder
from tokformer.language_model import CausalLM
from tokformer.positional import LearnedPositions
from tokformer.tasks.lm import token_nll


def build(args: argparse.Namespace, trap: bool) -> CausalLM:
    """The library's model; ``trap`` restores nn.Embedding's N(0, 1) token table."""
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=args.d_model, n_heads=args.d_model // 64, n_layers=args.layers, dropout=0.0,
                            activation="gelu")
    embedder = Embedder(args.d_model, vocab_size=args.vocab, position=LearnedPositions(args.d_model, args.context))
    model = CausalLM(embedder, cfg, args.vocab)
    if trap:
        nn.init.normal_(model.embedder.tokens.weight, std=1.0)
    return model


def batch(args: argparse.Namespace, round_: int) -> torch.Tensor:  # [B, N+1]
    gen = torch.Generator().manual_seed(100 + round_)
    return torch.randint(0, args.vocab, (args.batch, args.context + 1), generator=gen)


def forward_loss(model: CausalLM, windows: torch.Tensor) -> torch.Tensor:
    """Mean next-token loss of ``windows`` ``[B, N+1]``, the lm task's own (:func:`token_nll`)."""
    nll, n = token_nll(model, windows)
    return nll / n


def step_case(args: argparse.Namespace, trap: bool, flush: bool) -> Callable[[int], None]:
    model = build(args, trap)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def run(round_: int) -> None:
        torch.set_flush_denormal(flush)
        try:
            loss = forward_loss(model, batch(args, round_))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        finally:
            torch.set_flush_denormal(False)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=MIN_REPEATS)
    args = parser.parse_args()
    if not torch.set_flush_denormal(False):
        raise SystemExit("this CPU does not let torch flush denormals; nothing to compare")
    machine = Machine(("torch",))
    with torch.no_grad():
        first = {trap: forward_loss(build(args, trap), batch(args, -2)).item() for trap in (False, True)}
    names = {(False, False): "self-initialised", (False, True): "self-initialised, flush denormals",
             (True, False): "N(0, 1) table (the trap)", (True, True): "N(0, 1) table, flush denormals"}
    rows = []
    tokens = args.batch * args.context
    for threads in thread_counts():
        with torch_threads(threads):
            timings = interleave({names[key]: step_case(args, *key) for key in names}, args.repeats)
        base = timings[names[(False, False)]]
        for name, timing in timings.items():
            rows.append([f"{threads}", name, timing.rate_cell(tokens, ",.0f"), ratio_cell(timing, base)])
    text = "\n".join([
        "# The initialisation trap and denormals",
        "",
        f"CausalLM, GPT-2-shaped: d_model {args.d_model}, {args.d_model // 64} heads, {args.layers} layers, GELU, "
        f"learned positions, vocab {args.vocab} tied, context {args.context}, batch {args.batch}, fp32. One training "
        f"step per call; median (min-max) of {args.repeats} interleaved rounds, a new batch each round.",
        "",
        f"First loss on random ids: self-initialised {first[False]:.2f}, N(0, 1) table {first[True]:.2f}; "
        f"ln(vocab) = {math.log(args.vocab):.2f}.",
        "",
        markdown_table(["threads", "model", "training tokens/s", "speed vs self-initialised, no flush"], rows),
        "",
        machine.line("1 thread and all cores"),
    ])
    write_results("init.md", text)


if __name__ == "__main__":
    main()
